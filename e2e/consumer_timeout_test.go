package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/flowforge/flowforge/e2e/harness"
)

// consumerTimeoutControl holds one delivery unacked on its own quorum queue
// of broker url and reports, on the returned channel, the error the broker
// closes the channel with. It proves the broker really enforces its
// consumer_timeout within the test's time frame.
func consumerTimeoutControl(t *testing.T, url string) <-chan *amqp.Error {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if _, err := ch.QueueDeclare("control", true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(context.Background(), "", "control", false, false, amqp.Publishing{Body: []byte("held")}); err != nil {
		t.Fatal(err)
	}
	msgs, err := ch.Consume("control", "control", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-msgs: // received and never acknowledged
	case <-time.After(10 * time.Second):
		t.Fatal("control consumer received nothing")
	}
	return closed
}

// TestHandlerOutlivingConsumerTimeoutCompletesOnceAndWorkerKeepsConsuming:
// mode 19. On a private broker whose consumer_timeout is 3 s, checked every
// 250 ms (a control consumer that holds a delivery unacked is cut off by it), a single-slot
// worker runs a 12 s task while three more dispatches queue behind it. The
// worker acks at claim, and hands back deliveries that wait longer than
// --slot-wait (1 s) for its slot, so no delivery stays unacked for 3 s: the
// long task completes exactly once, every queued task completes once, the
// worker's channel is never closed, and a run triggered afterwards
// completes on the same process.
func TestHandlerOutlivingConsumerTimeoutCompletesOnceAndWorkerKeepsConsuming(t *testing.T) {
	t.Parallel()
	const timeout = 3 * time.Second
	r := harness.StartRabbit(t, harness.RabbitOptions{ConsumerTimeout: timeout})
	// RabbitMQ checks the timeout on each channel's tick (every 60 s by
	// default); tick every 250 ms so that an unacked delivery is cut off
	// within the test's time frame. Channels opened from now on use it.
	r.Ctl(t, "eval", "application:set_env(rabbit, channel_tick_interval, 250).")
	s := harness.NewStack(t, harness.StackOptions{AMQPURLs: []string{r.URL()}})
	db := s.DB(t)
	s.ControlPlane(t, "--sweep-interval", "200ms")
	w := s.Daemon(t, "worker", "worker", "--concurrency", "1", "--slot-wait", "1s", "--lease", "2s")
	s.Apply(t, "name: ct-long\ntasks:\n  - {name: long, handler: sleep, params: {duration: 12s}}\n")
	s.Apply(t, "name: ct-quick\ntasks:\n  - {name: quick, handler: noop}\n")

	control := consumerTimeoutControl(t, r.URL())
	controlStart := time.Now()
	long := s.Trigger(t, "ct-long")
	crashWaitTask(t, db, long, "long", 30*time.Second, "RUNNING", func(c crashTask) bool { return c.State == "RUNNING" })
	longStart := time.Now()
	var queued []string
	for i := 0; i < 3; i++ {
		queued = append(queued, s.Trigger(t, "ct-quick"))
	}
	select {
	case err := <-control:
		if err == nil || !strings.Contains(err.Reason, "timed out") {
			t.Fatalf("control channel closed with %v, want the delivery acknowledgement timeout", err)
		}
		t.Logf("the broker cut the control consumer off after %v", time.Since(controlStart).Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatal("the broker never enforced its consumer_timeout on the control consumer; the test proves nothing")
	}
	s.WaitRuns(t, "SUCCEEDED", 60*time.Second, long)
	if el := time.Since(longStart); el < 3*timeout {
		t.Fatalf("the long task ran only %v, not well past the %v consumer_timeout", el, timeout)
	}
	for _, id := range append([]string{long}, queued...) {
		s.WaitRuns(t, "SUCCEEDED", 30*time.Second, id)
		var claims int
		if err := db.QueryRow(`SELECT count(*) FROM task_events WHERE run_id = $1 AND reason = 'claimed'`, id).Scan(&claims); err != nil {
			t.Fatal(err)
		}
		if claims != 1 {
			t.Fatalf("run %s: %d claims, want exactly 1", id, claims)
		}
	}
	after := s.Trigger(t, "ct-quick")
	s.WaitRuns(t, "SUCCEEDED", 30*time.Second, after)
	if w.Exited() {
		t.Fatal("the worker exited")
	}
	logs := w.Logs()
	for _, bad := range []string{"broker connection lost", "cancelled the consumer", "recovered"} {
		if strings.Contains(logs, bad) {
			t.Fatalf("the worker's consumer was cut off (%q in its log)", bad)
		}
	}
	w.WaitForLog(t, "no free slot; handing the delivery back", time.Second)
}
