package e2e

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/e2e/harness"
)

// Mode 138: a quorum-queue delivery-limit on the dispatch queues.

// TestDeliveryLimitDeadLettersAreRedrivenAndGarbageStays, on a private
// node whose dispatch queues have a delivery-limit of 1 (a policy): a
// worker without the tasks' handler hands their dispatches back until the
// broker dead-letters them (reason delivery_limit), and is then SIGKILLed
// holding deliveries. A worker with the handler starts; the publisher
// re-drives the dead-lettered dispatches, so every task ends SUCCEEDED on
// its first attempt well before --redispatch-after (10 min), and
// flowforge_dispatches_redriven_total counts them; the publisher warns
// once. A re-driven copy of a dispatch whose task already ran is refused by
// its claim (a lost claim; the task stays at attempt 1). The garbage in
// the dead-letter queue (a message a worker rejected, one put there by
// hand) stays there, bodies intact, in its order, walked past only a few
// times.
func TestDeliveryLimitDeadLettersAreRedrivenAndGarbageStays(t *testing.T) {
	r := harness.StartRabbit(t, harness.RabbitOptions{})
	s := harness.NewStack(t, harness.StackOptions{AMQPURLs: []string{r.URL()}})
	q, dead := s.Queue, broker.DeadLetterQueue(s.Queue)
	r.Ctl(t, "set_policy", "-p", "/", "--apply-to", "queues", "ff-delivery-limit",
		"^"+regexp.QuoteMeta(q)+`(\.h\..+)?$`, `{"delivery-limit":1}`)
	s.Daemon(t, "scheduler", "scheduler", "--redispatch-after", "10m")
	pub := s.DaemonWithHealth(t, "publisher", "publisher")
	a := s.DaemonWithHealth(t, "worker-a", "worker", "--handlers", "sleep", "--unknown-handler-grace", "10m")
	pub.WaitForLog(t, "publisher: started", 60*time.Second)
	a.WaitForLog(t, "worker: started", 60*time.Second)

	ch := confirmChannel(t, r.URL())
	publishConfirmed(t, ch, dead, amqp.Publishing{Body: []byte("put here by hand")})
	publishConfirmed(t, ch, q, amqp.Publishing{Body: []byte("not a dispatch {")}) // worker A rejects it
	harness.WaitMetric(t, a.Health, 1, "flowforge_poison_messages_total")

	const n = 6
	var yaml strings.Builder
	yaml.WriteString("name: dlimit\ntasks:\n")
	for i := range n {
		fmt.Fprintf(&yaml, "  - {name: t%d, handler: noop}\n", i)
	}
	s.ApplyUnservedHandlers(t, yaml.String())
	start := time.Now()
	run := s.Trigger(t, "dlimit")
	harness.Eventually(t, 60*time.Second, fmt.Sprintf("the broker to dead-letter %d dispatches by their delivery-limit", n), func() (bool, error) {
		return deliveryLimitDeadLettered(t, r) >= n, nil
	})
	a.Kill()
	b := s.DaemonWithHealth(t, "worker-b", "worker")
	bStart := time.Now()
	got := s.WaitRunTerminal(t, run, 90*time.Second)
	t.Logf("run %s %s %v after its trigger, %v after the worker with the handler started; the broker dead-lettered %d dispatches by their delivery-limit",
		run, got.State, time.Since(start).Round(time.Millisecond), time.Since(bStart).Round(time.Millisecond), deliveryLimitDeadLettered(t, r))
	for i := range n {
		if _, state, attempt := got.Task(t, fmt.Sprintf("t%d", i)); state != "SUCCEEDED" || attempt != 1 {
			t.Errorf("task t%d: %s at attempt %d, want SUCCEEDED at attempt 1", i, state, attempt)
		}
	}
	redriven := harness.Metric(t, pub.Health, "flowforge_dispatches_redriven_total", `queue="`+q+`"`)
	if redriven < n {
		t.Errorf("flowforge_dispatches_redriven_total{queue=%q} = %v, want at least %d", q, redriven, n)
	}

	// A re-driven copy of a dispatch whose task already ran loses its claim.
	taskID, _, _ := got.Task(t, "t0")
	var payload string
	if err := s.DB(t).QueryRowContext(t.Context(), `SELECT payload::text FROM outbox WHERE task_run_id = $1 ORDER BY id LIMIT 1`, taskID).Scan(&payload); err != nil {
		t.Fatal(err)
	}
	lost := harness.Metric(t, b.Health, "flowforge_claims_lost_total")
	publishConfirmed(t, ch, dead, amqp.Publishing{MessageId: "stale", Body: []byte(payload), Headers: amqp.Table{
		"x-death": []any{amqp.Table{"reason": broker.DeathReasonDeliveryLimit, "queue": q, "count": int64(1)}}}})
	harness.WaitMetricAtLeast(t, pub.Health, redriven+1, "flowforge_dispatches_redriven_total", `queue="`+q+`"`)
	harness.WaitMetricAtLeast(t, b.Health, lost+1, "flowforge_claims_lost_total")
	if _, state, attempt := s.ShowRun(t, run).Task(t, "t0"); state != "SUCCEEDED" || attempt != 1 {
		t.Errorf("after a stale re-driven copy, task t0 is %s at attempt %d, want SUCCEEDED at attempt 1", state, attempt)
	}

	if err := pub.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("stop the publisher: %v", err)
	}
	if code, err := pub.Wait(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("publisher after SIGTERM: exit %d, %v", code, err)
	}
	if c := strings.Count(pub.Logs(), "publisher: a quorum-queue delivery-limit dead-lettered dispatches"); c != 1 {
		t.Errorf("the publisher warned of the delivery-limit %d times, want once", c)
	}
	checkGarbageKept(t, ch, dead, []string{"put here by hand", "not a dispatch {"})
}

// checkGarbageKept takes every message of the dead-letter queue dead
// (basic.get) and fails unless their bodies are want, in order, each
// walked past (returned) by the re-driver only a few times.
func checkGarbageKept(t *testing.T, ch *amqp.Channel, dead string, want []string) {
	t.Helper()
	var bodies []string
	var counts []int64
	for {
		d, ok, err := ch.Get(dead, false)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		bodies = append(bodies, string(d.Body))
		var c int64
		switch v := d.Headers["x-delivery-count"].(type) {
		case int64:
			c = v
		case int32:
			c = int64(v)
		}
		counts = append(counts, c)
	}
	t.Logf("the dead-letter queue holds %q, returned %v times", bodies, counts)
	if strings.Join(bodies, "|") != strings.Join(want, "|") {
		t.Fatalf("the dead-letter queue holds %q, want %q", bodies, want)
	}
	for i, c := range counts {
		if c > 30 {
			t.Errorf("dead letter %q was returned %d times: the re-driver spins over it", bodies[i], c)
		}
	}
}

// confirmChannel opens a channel in confirm mode on url, closed in
// t.Cleanup.
func confirmChannel(t *testing.T, url string) *amqp.Channel {
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
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	return ch
}

// publishConfirmed publishes msg to queue (default exchange, mandatory) and
// waits for its confirm.
func publishConfirmed(t *testing.T, ch *amqp.Channel, queue string, msg amqp.Publishing) {
	t.Helper()
	dc, err := ch.PublishWithDeferredConfirmWithContext(t.Context(), "", queue, true, false, msg)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(t.Context()); err != nil || !ok {
		t.Fatalf("publish to %s: confirmed %v, %v", queue, ok, err)
	}
}

var deliveryLimitRE = regexp.MustCompile(`messages_dead_lettered_delivery_limit_total\s*=>\s*(\d+)`)

// deliveryLimitDeadLettered reads the broker's global count of messages
// quorum queues dead-lettered (at most once, the dispatch queues'
// strategy) because of their delivery-limit.
func deliveryLimitDeadLettered(t *testing.T, r *harness.Rabbit) int {
	t.Helper()
	out := r.Ctl(t, "eval", `maps:get([{queue_type, rabbit_quorum_queue}, {dead_letter_strategy, at_most_once}], rabbit_global_counters:overview()).`)
	m := deliveryLimitRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no delivery-limit counter in %s", out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
