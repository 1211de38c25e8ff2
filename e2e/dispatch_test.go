package e2e

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/e2e/harness"
)

// Helpers shared by the dispatch, outbox, poison, idempotency and join
// tests (mode numbers refer to FAILURE_MODEL.md).

// dispatchCountFile returns a shell command line that appends the run id to
// path: one line per execution of the handler.
func dispatchCountCommand(path string) string {
	return fmt.Sprintf(`["sh", "-c", "echo $FLOWFORGE_RUN_ID >> %s"]`, path)
}

// dispatchExecutions reads the file written by dispatchCountCommand: how
// many times the handler ran, per run id.
func dispatchExecutions(t *testing.T, path string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]int{}
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, l := range strings.Fields(string(b)) {
		out[l]++
	}
	return out
}

// dispatchClaimsPerTask counts the claims (READY -> RUNNING events) of every
// task of the stack, keyed by task run id.
func dispatchClaimsPerTask(t *testing.T, db *sql.DB) map[string]int {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), `
SELECT t.id::text, count(e.*) FROM task_runs t
  LEFT JOIN task_events e ON e.task_run_id = t.id AND e.from_state = 'READY' AND e.to_state = 'RUNNING'
 GROUP BY t.id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		out[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// dispatchAssertClaimedOnce fails unless every task of the stack was
// claimed exactly once.
func dispatchAssertClaimedOnce(t *testing.T, db *sql.DB) {
	t.Helper()
	claims := dispatchClaimsPerTask(t, db)
	if len(claims) == 0 {
		t.Fatal("no task runs")
	}
	for id, n := range claims {
		if n != 1 {
			t.Errorf("task run %s was claimed %d times, want exactly 1", id, n)
		}
	}
}

// dispatchBrokerConfig is the stack's broker configuration.
func dispatchBrokerConfig(s *harness.Stack) broker.Config {
	return broker.Config{URLs: s.AMQPURLs, Queue: s.Queue}
}

// dispatchPublish publishes raw bodies to the stack's dispatch queue with
// FlowForge's own publisher (declaring the topology, with confirms) and
// fails unless the broker confirmed every one.
func dispatchPublish(t *testing.T, s *harness.Stack, bodies ...[]byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := broker.DialPublisher(ctx, dispatchBrokerConfig(s))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	msgs := make([]broker.Message, len(bodies))
	for i, b := range bodies {
		msgs[i] = broker.Message{ID: "test-" + strconv.Itoa(i), Body: b}
	}
	out, err := p.PublishBatch(ctx, msgs)
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	for i, o := range out {
		if o != broker.Confirmed {
			t.Fatalf("message %d (%q): %s", i, bodies[i], o)
		}
	}
}

// dispatchPayloads returns the outbox payloads of the stack, oldest first.
func dispatchPayloads(t *testing.T, db *sql.DB) [][]byte {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), `SELECT payload::text FROM outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out [][]byte
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		out = append(out, []byte(p))
	}
	return out
}

// dispatchWaitPublished waits until the outbox holds n rows, all stamped.
func dispatchWaitPublished(t *testing.T, db *sql.DB, n int) {
	t.Helper()
	harness.Eventually(t, 30*time.Second, fmt.Sprintf("%d outbox rows published", n), func() (bool, error) {
		total := harness.QueryInt(t, db, `SELECT count(*) FROM outbox`)
		pub := harness.QueryInt(t, db, `SELECT count(*) FROM outbox WHERE published_at IS NOT NULL`)
		return total == n && pub == n, fmt.Errorf("%d rows, %d published", total, pub)
	})
}

// dispatchTriggerMany triggers n runs of workflow concurrently (8 CLI
// processes at a time) and returns their ids.
func dispatchTriggerMany(t *testing.T, s *harness.Stack, workflow string, n int, params ...string) []string {
	t.Helper()
	ids := make([]string, n)
	errs := make([]error, n)
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			args := []string{"run", "trigger", workflow}
			for _, p := range params {
				args = append(args, "--param", p)
			}
			out, errOut, code := s.CLI(t, args...)
			if code != 0 {
				errs[i] = fmt.Errorf("trigger: exit %d: %s", code, errOut)
				return
			}
			ids[i] = strings.TrimSpace(out)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// Mode 2: duplicate delivery.

// TestARedeliveredDispatchRunsTheHandlerOnce makes RabbitMQ redeliver a
// dispatch for real: a consumer takes the message and closes its channel
// without acking it, after a copy of the same (task, token) already ran.
// The worker receives the redelivery (redelivered=true), loses the claim
// and acks it: the shell handler ran once.
func TestARedeliveredDispatchRunsTheHandlerOnce(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	count := filepath.Join(t.TempDir(), "executions")
	s.Apply(t, "name: dup\ntasks:\n  - {name: a, handler: shell, params: {command: "+dispatchCountCommand(count)+"}}\n")
	s.ControlPlane(t)
	id := s.Trigger(t, "dup")
	dispatchWaitPublished(t, db, 1)

	// A foreign consumer takes the only message and holds it unacked.
	ch := s.BrokerChannel(t)
	if err := ch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	deliveries, err := ch.Consume(s.Queue, "test-holder", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var held amqp.Delivery
	select {
	case held = <-deliveries:
	case <-time.After(20 * time.Second):
		t.Fatal("no delivery for the test consumer")
	}

	w := s.DaemonWithHealth(t, "worker", "worker", "--allow-shell")
	addr := w.Health
	dispatchPublish(t, s, held.Body) // the same (task, token) once more
	r := s.WaitRunTerminal(t, id, 30*time.Second)
	if r.State != "SUCCEEDED" {
		t.Fatalf("run %s: %s", id, r.State)
	}
	// Closing the channel hands the unacked message back to the broker,
	// which redelivers it to the worker.
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	harness.WaitMetric(t, addr, 1, "flowforge_claims_lost_total", `reason="duplicate"`)
	w.WaitForLog(t, `"redelivered":true`, 10*time.Second)
	if got := dispatchExecutions(t, count)[id]; got != 1 {
		t.Fatalf("handler ran %d times, want 1", got)
	}
	if got := harness.Metric(t, addr, "flowforge_tasks_claimed_total"); got != 1 {
		t.Fatalf("flowforge_tasks_claimed_total = %v, want 1", got)
	}
	dispatchAssertClaimedOnce(t, db)
	if n := s.Messages(t, s.Queue); n != 0 {
		t.Fatalf("dispatch queue still holds %d messages", n)
	}
}

// TestManyCopiesOfADispatchOnTwoWorkersRunTheHandlerOnce queues ten
// identical dispatches of one READY task and lets two worker processes
// (five slots each) race for them: the claim is one conditional statement,
// so exactly one wins and the nine others are acked unrun. This is the
// end-to-end counterpart of core/store's TestExactlyOneOfManyClaimsWins.
func TestManyCopiesOfADispatchOnTwoWorkersRunTheHandlerOnce(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	count := filepath.Join(t.TempDir(), "executions")
	s.Apply(t, "name: dup\ntasks:\n  - {name: a, handler: shell, params: {command: "+dispatchCountCommand(count)+"}}\n")
	s.ControlPlane(t)
	id := s.Trigger(t, "dup")
	dispatchWaitPublished(t, db, 1)
	payload := dispatchPayloads(t, db)[0]
	copies := make([][]byte, 9)
	for i := range copies {
		copies[i] = payload
	}
	dispatchPublish(t, s, copies...)
	if n := s.Messages(t, s.Queue); n != 10 {
		t.Fatalf("dispatch queue holds %d messages, want 10", n)
	}
	var addrs []string
	for i := range 2 {
		addrs = append(addrs, s.DaemonWithHealth(t, fmt.Sprintf("worker-%d", i), "worker", "--allow-shell", "--concurrency", "5").Health)
	}
	r := s.WaitRunTerminal(t, id, 30*time.Second)
	if r.State != "SUCCEEDED" {
		t.Fatalf("run %s: %s", id, r.State)
	}
	harness.Eventually(t, 30*time.Second, "nine lost claims", func() (bool, error) {
		sum := 0.0
		for _, a := range addrs {
			v, _, err := harness.Scrape(a, "flowforge_claims_lost_total")
			if err != nil {
				return false, err
			}
			sum += v
		}
		return sum == 9, fmt.Errorf("%v lost claims", sum)
	})
	if got := dispatchExecutions(t, count)[id]; got != 1 {
		t.Fatalf("handler ran %d times, want 1", got)
	}
	dispatchAssertClaimedOnce(t, db)
}

// Mode 10: stale results.
