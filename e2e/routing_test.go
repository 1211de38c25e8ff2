package e2e

import (
	"database/sql"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/e2e/harness"
)

// routingWorkflow has n "special" tasks (testbin's handler) and n noop
// tasks, each noop task after a special one, so both handler sets take
// part in every run.
func routingWorkflow(name string, n int) string {
	yaml := "name: " + name + "\ntasks:\n"
	for i := range n {
		yaml += fmt.Sprintf("  - {name: s%d, handler: special}\n  - {name: n%d, handler: noop, depends_on: [s%d]}\n", i, i, i)
	}
	return yaml
}

// waitHandlerQueueConsumed waits until the handler's own queue exists and
// has consumers consumers (a worker bound and took it).
func waitHandlerQueueConsumed(t *testing.T, s *harness.Stack, handler string, consumers int) {
	t.Helper()
	q, ok := broker.HandlerQueue(s.Queue, handler)
	if !ok {
		t.Fatalf("handler %q gets no queue", handler)
	}
	harness.Eventually(t, 30*time.Second, "a consumer on "+q, func() (bool, error) {
		_, n, err := s.QueueDepth(q)
		return n == consumers, err
	})
}

// handBacks counts the history rows that say a task of the runs waited for
// a worker with its handler (the first hand-back of each dispatch).
func handBacks(t *testing.T, db *sql.DB, runIDs []string) int {
	t.Helper()
	n := 0
	for _, id := range runIDs {
		n += harness.QueryInt(t, db, `SELECT count(*) FROM task_events e JOIN task_runs t ON t.id = e.task_run_id
		  WHERE t.run_id = $1 AND e.reason LIKE $2 || '%'`, id, store.WaitingReasonPrefix)
	}
	return n
}

// TestDisjointHandlerSetsRunEachTaskOnAWorkerThatHasItsHandler: mode 115.
// Two workers with disjoint handler sets (testbin --handlers special,
// ffctl --handlers noop,sleep) share a dispatch queue name; every dispatch
// goes to its handler's own queue, which only the worker that has the
// handler consumes: every task runs on that worker on its first attempt,
// and no delivery is handed back (the hand-back metric of both workers
// reads 0 and no history row says a task waited for a worker with its
// handler). Before routing, each worker received about half of the other's
// tasks and handed them back.
func TestDisjointHandlerSetsRunEachTaskOnAWorkerThatHasItsHandler(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	testbin := harness.BuildTestBin(t)
	s.ControlPlane(t)
	special := s.WithBin(testbin).DaemonWithHealth(t, "special-worker", "worker", "--id", "w-special", "--handlers", "special", "--concurrency", "4")
	plain := s.DaemonWithHealth(t, "noop-worker", "worker", "--id", "w-noop", "--handlers", "noop,sleep", "--concurrency", "4")
	waitHandlerQueueConsumed(t, s, "special", 1)
	waitHandlerQueueConsumed(t, s, "noop", 1)
	waitHandlerQueueConsumed(t, s, "sleep", 1)
	s.ApplyUnservedHandlers(t, routingWorkflow("disjoint", 6))
	var ids []string
	for range 3 {
		ids = append(ids, s.Trigger(t, "disjoint"))
	}
	s.WaitRuns(t, "SUCCEEDED", 90*time.Second, ids...)
	db := s.DB(t)
	want := map[string]string{"special": "w-special", "noop": "w-noop"}
	for _, id := range ids {
		rows, err := db.Query(`SELECT task_name, handler, coalesce(worker_id, ''), attempt FROM task_runs WHERE run_id = $1`, id)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rows.Next() {
			var name, handler, worker string
			var attempt int
			if err := rows.Scan(&name, &handler, &worker, &attempt); err != nil {
				t.Fatal(err)
			}
			n++
			if worker != want[handler] || attempt != 1 {
				t.Errorf("run %s task %s (handler %s) ran on %q at attempt %d, want %q at attempt 1", id, name, handler, worker, attempt, want[handler])
			}
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
		if n != 12 {
			t.Errorf("run %s has %d tasks, want 12", id, n)
		}
	}
	for _, w := range []*harness.HealthDaemon{special, plain} {
		if n := harness.Metric(t, w.Health, "flowforge_deliveries_handed_back_total", `reason="unknown_handler"`); n != 0 {
			t.Errorf("a worker handed back %v deliveries for a handler it lacks, want 0", n)
		}
	}
	if n := handBacks(t, db, ids); n != 0 {
		t.Errorf("%d history rows say a task waited for a worker with its handler, want 0", n)
	}
}

// TestADispatchOnTheSharedQueueStillRunsDuringARollingDeploy: mode 115's
// fallback. A dispatch an older publisher sent straight to the shared
// queue (the default exchange, as before routing) reaches the new workers,
// which consume the shared queue beside their handlers' queues: a worker
// that lacks its handler hands it back (the history says what the task
// waits for), and once a worker that has the handler runs, it runs there,
// on attempt 1.
func TestADispatchOnTheSharedQueueStillRunsDuringARollingDeploy(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	testbin := harness.BuildTestBin(t)
	db := s.DB(t)
	s.Daemon(t, "scheduler", "scheduler") // no publisher: the test is the old one
	s.ApplyUnservedHandlers(t, "name: old-publisher\ntasks:\n  - {name: s, handler: special}\n")
	id := s.Trigger(t, "old-publisher")
	var rowID int64
	var payload []byte
	harness.Eventually(t, 30*time.Second, "the dispatch's outbox row", func() (bool, error) {
		err := db.QueryRow(`SELECT o.id, o.payload FROM outbox o JOIN task_runs t ON t.id = o.task_run_id WHERE t.run_id = $1`, id).Scan(&rowID, &payload)
		if err == sql.ErrNoRows {
			return false, nil
		}
		return err == nil, err
	})
	// A worker without the handler, which declares the topology.
	s.Daemon(t, "noop-worker", "worker", "--id", "w-noop", "--handlers", "noop")
	waitHandlerQueueConsumed(t, s, "noop", 1)
	publishToSharedQueue(t, s, rowID, payload)
	if _, err := db.Exec(`UPDATE outbox SET published_at = now() WHERE id = $1`, rowID); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 30*time.Second, "the worker without the handler to hand the dispatch back", func() (bool, error) {
		return handBacks(t, db, []string{id}) == 1, nil
	})
	s.WithBin(testbin).Daemon(t, "special-worker", "worker", "--id", "w-special", "--handlers", "special")
	s.WaitRuns(t, "SUCCEEDED", 60*time.Second, id)
	var worker string
	var attempt int
	if err := db.QueryRow(`SELECT worker_id, attempt FROM task_runs WHERE run_id = $1`, id).Scan(&worker, &attempt); err != nil {
		t.Fatal(err)
	}
	if worker != "w-special" || attempt != 1 {
		t.Fatalf("the task ran on %q at attempt %d, want w-special at attempt 1", worker, attempt)
	}
}

// publishToSharedQueue publishes an outbox row's payload as a publisher
// from before routing did: to the default exchange with the shared queue
// as routing key, with a confirm.
func publishToSharedQueue(t *testing.T, s *harness.Stack, rowID int64, payload []byte) {
	t.Helper()
	ch := s.BrokerChannel(t)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirm("", s.Queue, true, false, amqp.Publishing{
		ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: fmt.Sprint(rowID), Body: payload})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(t.Context()); err != nil || !ok {
		t.Fatalf("publish to the shared queue: acked %v, %v", ok, err)
	}
}
