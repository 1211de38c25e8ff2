package e2e

// Failure model part 2: the broker refuses work without going away (modes
// 28, 29, 30): a resource alarm blocks publishers, the dispatch queue is
// deleted under a consuming worker, and the queue exists with other
// arguments than FlowForge declares.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/flowforge/flowforge/e2e/harness"
)

// TestMemoryAlarmBlocksPublishingBoundedAndResumes is mode 28: a private
// node raises its memory alarm, and in a second case its disk alarm. A run
// triggered during the alarm is not lost and does not hang the publisher:
// its cycle returns within the confirm timeout with the row still pending
// (recorded as a failed attempt whose error, which the dashboard's outbox
// screen shows, names the alarm), readiness reports the block (503) while
// the scheduler stays ready, and flowforge_publisher_blocked is 1; once
// the alarm clears readiness is 200 again, the gauge 0, and the run
// completes. The publisher logs the alarm once when it is raised and once
// when it clears, and no "recovered" in between.
func TestMemoryAlarmBlocksPublishingBoundedAndResumes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		alarm func(*harness.Rabbit, testing.TB, bool)
	}{
		{"memory", (*harness.Rabbit).SetMemoryAlarm},
		{"disk", (*harness.Rabbit).SetDiskAlarm},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			brokerAlarmCase(t, tc.alarm)
		})
	}
}

// brokerAlarmCase is one case of TestMemoryAlarmBlocksPublishingBoundedAndResumes:
// setAlarm raises and clears the alarm.
func brokerAlarmCase(t *testing.T, setAlarm func(*harness.Rabbit, testing.TB, bool)) {
	rabbit := harness.StartRabbit(t, harness.RabbitOptions{})
	s := harness.NewStack(t, harness.StackOptions{AMQPURLs: []string{rabbit.URL()}})
	sched := s.DaemonWithHealth(t, "scheduler", "scheduler")
	pub := s.DaemonWithHealth(t, "publisher", "publisher")
	w := s.DaemonWithHealth(t, "worker", "worker")
	recoveryReadyOK(t, pub, 20*time.Second, "postgres", "rabbitmq")
	recoveryReadyOK(t, w, 20*time.Second, "postgres", "rabbitmq")
	s.Apply(t, recoveryChainYAML)
	runs := []string{s.Trigger(t, "recovery-chain")}
	s.WaitRuns(t, "SUCCEEDED", 30*time.Second, runs[0])

	setAlarm(rabbit, t, true)
	alarm := time.Now()
	id := s.Trigger(t, "recovery-chain")
	runs = append(runs, id)
	// Bounded: the publish attempt comes back (the row is pending with a
	// recorded failure) instead of waiting for the alarm to clear.
	harness.Eventually(t, 40*time.Second, "the blocked publish to return with the row pending", func() (bool, error) {
		st, err := s.Store.OutboxStatus(context.Background())
		return err == nil && st.Pending >= 1 && st.FailingRows >= 1, fmt.Errorf("outbox %+v err %v", st, err)
	})
	t.Logf("blocked publish returned after %v", time.Since(alarm).Round(time.Millisecond))
	recoveryWaitReadiness(t, pub, 30*time.Second, "503 naming the resource alarm", func(r recoveryReadiness) bool {
		return r.Code == 503 && strings.Contains(r.Checks["rabbitmq"], "resource alarm") && r.Checks["postgres"] == "ok"
	})
	// The publisher drops and re-dials the blocked connection after each
	// bounded wait; readiness must not turn green in between while the
	// alarm lasts (sampled over a full confirm timeout).
	for end := time.Now().Add(12 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if r, err := recoveryReady(pub.Health); err == nil && r.Code == 200 {
			t.Fatalf("publisher readiness went green during the alarm: %v", r.Checks)
		}
	}
	if v := harness.Metric(t, pub.Health, "flowforge_publish_total", `outcome="confirmed"`); v < 2 {
		t.Errorf("flowforge_publish_total{outcome=\"confirmed\"} = %v before the alarm cleared, want >= 2 (the first run)", v)
	}
	// The alarm is logged once, however many cycles and re-dials it
	// lasts, and a re-dial while blocked is no recovery (it used to log
	// "publisher: recovered" every cycle).
	if n := recoveryCountLogs(pub.Process, "publisher: broker blocks publishing (resource alarm); rows stay pending"); n != 1 {
		t.Errorf("the publisher logged the alarm %d times during it, want once", n)
	}
	if n := recoveryCountLogs(pub.Process, "publisher: recovered"); n != 0 {
		t.Errorf("the publisher logged %q %d times while still blocked, want none", "publisher: recovered", n)
	}
	recoveryReadyOK(t, sched, 5*time.Second, "postgres")
	if st := s.ShowRun(t, id); st.State == "SUCCEEDED" {
		t.Fatalf("run %s succeeded during the alarm: nothing was blocked", id)
	}
	recoveryAssertAlive(t, sched, pub, w)

	if v := harness.Metric(t, pub.Health, "flowforge_publisher_blocked"); v != 1 {
		t.Errorf("flowforge_publisher_blocked = %v during the alarm, want 1", v)
	}
	if n := harness.QueryInt(t, s.DB(t), `SELECT count(*) FROM outbox WHERE published_at IS NULL AND last_error LIKE '%resource alarm%'`); n < 1 {
		t.Errorf("no pending outbox row whose error names the resource alarm (what ffctl tui's outbox screen shows)")
	}
	setAlarm(rabbit, t, false)
	recoveryReadyOK(t, pub, 40*time.Second, "postgres", "rabbitmq")
	s.WaitRuns(t, "SUCCEEDED", 60*time.Second, id)
	if n := recoveryCountLogs(pub.Process, "publisher: broker accepts publishing again (resource alarm cleared)"); n != 1 {
		t.Errorf("the publisher logged the alarm's end %d times, want once", n)
	}
	t.Logf("alarm raised to run completed: %v", time.Since(alarm).Round(time.Millisecond))
	if v := harness.Metric(t, pub.Health, "flowforge_publisher_blocked"); v != 0 {
		t.Errorf("flowforge_publisher_blocked = %v after the alarm cleared, want 0", v)
	}
	recoveryAssertAlive(t, sched, pub, w)
	recoveryAssertRanOnce(t, s, runs, w)
}

// recoveryAMQP runs fn on a channel of a fresh connection to the stack's
// first broker URL.
func recoveryAMQP(t *testing.T, s *harness.Stack, fn func(ch *amqp.Channel) error) error {
	t.Helper()
	conn, err := amqp.DialConfig(s.AMQPURLs[0], amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		t.Fatalf("dial %s: %v", s.AMQPURLs[0], err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	return fn(ch)
}

// TestDispatchQueueDeletedWorkerReDeclaresAndResubscribes is mode 29: the
// dispatch queue is deleted under a consuming worker (the broker cancels
// its consumer). The worker logs that it was cancelled, re-declares the
// queue, subscribes again (the queue has a consumer again: it does not sit
// connected but idle) and a run triggered afterwards completes. The
// dispatch queue is the test's own, on the shared broker; nothing else is
// touched.
func TestDispatchQueueDeletedWorkerReDeclaresAndResubscribes(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	s.DaemonWithHealth(t, "scheduler", "scheduler")
	s.DaemonWithHealth(t, "publisher", "publisher")
	w := s.DaemonWithHealth(t, "worker", "worker")
	recoveryReadyOK(t, w, 20*time.Second, "postgres", "rabbitmq")
	s.Apply(t, recoveryChainYAML)
	runs := []string{s.Trigger(t, "recovery-chain")}
	s.WaitRuns(t, "SUCCEEDED", 30*time.Second, runs[0])

	for round := 1; round <= 2; round++ {
		err := recoveryAMQP(t, s, func(ch *amqp.Channel) error {
			_, err := ch.QueueDelete(s.Queue, false, false, false)
			return err
		})
		if err != nil {
			t.Fatalf("delete %s: %v", s.Queue, err)
		}
		recoveryWaitLogCount(t, w.Process, 15*time.Second, round, "worker: the broker cancelled the consumer (queue deleted?); re-declaring and re-subscribing")
		recoveryWaitLogCount(t, w.Process, 15*time.Second, round, "worker: recovered", "dependency", "rabbitmq")
		harness.Eventually(t, 15*time.Second, "the re-declared queue to have the worker as consumer", func() (bool, error) {
			_, consumers, err := s.QueueDepth(s.Queue)
			return err == nil && consumers == 1, fmt.Errorf("consumers %d err %v", consumers, err)
		})
		recoveryReadyOK(t, w, 15*time.Second, "postgres", "rabbitmq")
		id := s.Trigger(t, "recovery-chain")
		runs = append(runs, id)
		s.WaitRuns(t, "SUCCEEDED", 30*time.Second, id)
	}
	recoveryAssertRanOnce(t, s, runs, w)
}

// TestDaemonsRefuseMismatchedDispatchQueue is mode 30: the dispatch queue
// (or its dead-letter queue) already exists with other arguments. Worker,
// publisher and `all` exit 1 at start, quickly, with an error that names
// the queue, what FlowForge needs (a quorum queue with its dead-letter
// arguments), what the broker found different, and how to migrate. The
// queues are the test's own, on the shared broker.
func TestDaemonsRefuseMismatchedDispatchQueue(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	cases := []struct {
		name    string
		queue   string // which queue is pre-declared wrongly
		args    amqp.Table
		differs string // how the broker names the difference
	}{
		{"classic dispatch queue", s.Queue, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeClassic},
			// RabbitMQ names the first argument it compares that differs.
			"inequivalent arg 'x-dead-letter-exchange'"},
		{"quorum dispatch queue with other settings", s.Queue, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum, "x-delivery-limit": int32(3),
			"x-dead-letter-exchange": "", "x-dead-letter-routing-key": s.Queue + ".dead"}, "inequivalent arg 'x-delivery-limit'"},
		{"classic dead-letter queue", s.Queue + ".dead", amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeClassic}, "inequivalent arg 'x-queue-type'"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := recoveryAMQP(t, s, func(ch *amqp.Channel) error {
				for _, q := range []string{s.Queue, s.Queue + ".dead"} {
					if _, err := ch.QueueDelete(q, false, false, false); err != nil {
						return err
					}
				}
				_, err := ch.QueueDeclare(tc.queue, true, false, false, false, tc.args)
				return err
			})
			if err != nil {
				t.Fatalf("pre-declare %s: %v", tc.queue, err)
			}
			for _, role := range []string{"worker", "publisher", "all"} {
				start := time.Now()
				p := s.Daemon(t, role+"-"+strings.ReplaceAll(tc.name, " ", "-"), role)
				code, err := p.Wait(20 * time.Second)
				if err != nil {
					t.Fatalf("%s kept running with a mismatched queue: %v\n%s", role, err, p.Logs())
				}
				out := p.Logs()
				if code != 1 {
					t.Errorf("%s exited %d, want 1:\n%s", role, code, out)
				}
				var last string
				for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
					if strings.HasPrefix(line, "ffctl: ") {
						last = line
					}
				}
				for _, want := range []string{
					fmt.Sprintf("queue %q exists with different arguments", tc.queue),
					"quorum", tc.differs, "to migrate", "rabbitmqctl delete_queue " + tc.queue,
				} {
					if !strings.Contains(last, want) {
						t.Errorf("%s: error line lacks %q:\n%s", role, want, last)
					}
				}
				t.Logf("%s refused in %v: %s", role, time.Since(start).Round(time.Millisecond), last)
			}
		})
	}
}
