package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/stdlib"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon/metrics"
	"github.com/flowforge/flowforge/daemon/worker"
	"github.com/flowforge/flowforge/e2e/harness"
)

// Helpers shared by the dispatch, outbox, poison, idempotency and join
// tests (mode numbers refer to FAILURE_MODEL.md).

// dispatchInt runs a query returning one integer.
func dispatchInt(t *testing.T, db *sql.DB, query string, args ...any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	if err := db.QueryRowContext(ctx, query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

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

// dispatchHealthAddr returns a free 127.0.0.1 address for --health-addr.
func dispatchHealthAddr(t *testing.T) string {
	return fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
}

// dispatchMetric scrapes http://addr/metrics and returns the sum of the
// samples of metric name whose labels contain every label (`k="v"`). A
// metric not exported yet reads 0.
func dispatchMetric(t *testing.T, addr, name string, labels ...string) float64 {
	t.Helper()
	v, err := dispatchScrape(addr, name, labels...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func dispatchScrape(addr, name string, labels ...string) (float64, error) {
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	sum := 0.0
lines:
	for _, l := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(l, name+" ") && !strings.HasPrefix(l, name+"{") {
			continue
		}
		for _, lb := range labels {
			if !strings.Contains(l, lb) {
				continue lines
			}
		}
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("parse %q: %w", l, err)
		}
		sum += v
	}
	return sum, nil
}

// dispatchWaitMetric polls until the metric reaches want.
func dispatchWaitMetric(t *testing.T, addr string, want float64, name string, labels ...string) {
	t.Helper()
	harness.Eventually(t, 30*time.Second, fmt.Sprintf("%s%v = %v on %s", name, labels, want, addr), func() (bool, error) {
		v, err := dispatchScrape(addr, name, labels...)
		if err != nil {
			return false, err
		}
		if v > want {
			return false, fmt.Errorf("%s%v = %v, overshot %v", name, labels, v, want)
		}
		return v == want, fmt.Errorf("%s%v = %v", name, labels, v)
	})
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

// dispatchQueueDepth returns the ready messages in queue (the dispatch
// queue, or its dead-letter queue).
func dispatchQueueDepth(t *testing.T, s *harness.Stack, queue string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := dispatchBrokerConfig(s)
	cfg.Queue = queue
	n, _, err := broker.QueueDepth(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return n
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
		total := dispatchInt(t, db, `SELECT count(*) FROM outbox`)
		pub := dispatchInt(t, db, `SELECT count(*) FROM outbox WHERE published_at IS NOT NULL`)
		return total == n && pub == n, fmt.Errorf("%d rows, %d published", total, pub)
	})
}

// dispatchWaitRuns waits until every run succeeded.
func dispatchWaitRuns(t *testing.T, s *harness.Stack, ids []string, timeout time.Duration) {
	t.Helper()
	db := s.DB(t)
	harness.Eventually(t, timeout, fmt.Sprintf("%d runs to succeed", len(ids)), func() (bool, error) {
		n := dispatchInt(t, db, `SELECT count(*) FROM workflow_runs WHERE id = ANY ($1::uuid[]) AND state = 'SUCCEEDED'`, ids)
		bad := dispatchInt(t, db, `SELECT count(*) FROM workflow_runs WHERE id = ANY ($1::uuid[]) AND state IN ('FAILED', 'CANCELLED')`, ids)
		if bad > 0 {
			return false, fmt.Errorf("%d runs failed", bad)
		}
		return n == len(ids), fmt.Errorf("%d of %d succeeded", n, len(ids))
	})
	if bad := dispatchInt(t, db, `SELECT count(*) FROM workflow_runs WHERE id = ANY ($1::uuid[]) AND state <> 'SUCCEEDED'`, ids); bad > 0 {
		t.Fatalf("%d runs did not succeed", bad)
	}
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
	s.Daemon(t, "scheduler", "scheduler")
	s.Daemon(t, "publisher", "publisher")
	id := s.Trigger(t, "dup")
	dispatchWaitPublished(t, db, 1)

	// A foreign consumer takes the only message and holds it unacked.
	conn, err := amqp.Dial(s.AMQPURLs[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
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

	addr := dispatchHealthAddr(t)
	w := s.Daemon(t, "worker", "worker", "--allow-shell", "--health-addr", addr)
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
	dispatchWaitMetric(t, addr, 1, "flowforge_claims_lost_total", `reason="duplicate"`)
	w.WaitForLog(t, `"redelivered":true`, 10*time.Second)
	if got := dispatchExecutions(t, count)[id]; got != 1 {
		t.Fatalf("handler ran %d times, want 1", got)
	}
	if got := dispatchMetric(t, addr, "flowforge_tasks_claimed_total"); got != 1 {
		t.Fatalf("flowforge_tasks_claimed_total = %v, want 1", got)
	}
	dispatchAssertClaimedOnce(t, db)
	if n := dispatchQueueDepth(t, s, s.Queue); n != 0 {
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
	s.Daemon(t, "scheduler", "scheduler")
	s.Daemon(t, "publisher", "publisher")
	id := s.Trigger(t, "dup")
	dispatchWaitPublished(t, db, 1)
	payload := dispatchPayloads(t, db)[0]
	copies := make([][]byte, 9)
	for i := range copies {
		copies[i] = payload
	}
	dispatchPublish(t, s, copies...)
	if n := dispatchQueueDepth(t, s, s.Queue); n != 10 {
		t.Fatalf("dispatch queue holds %d messages, want 10", n)
	}
	addrs := []string{dispatchHealthAddr(t), dispatchHealthAddr(t)}
	for i, a := range addrs {
		s.Daemon(t, fmt.Sprintf("worker-%d", i), "worker", "--allow-shell", "--concurrency", "5", "--health-addr", a)
	}
	r := s.WaitRunTerminal(t, id, 30*time.Second)
	if r.State != "SUCCEEDED" {
		t.Fatalf("run %s: %s", id, r.State)
	}
	harness.Eventually(t, 30*time.Second, "nine lost claims", func() (bool, error) {
		sum := 0.0
		for _, a := range addrs {
			v, err := dispatchScrape(a, "flowforge_claims_lost_total")
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

// dispatchPartitionedRenewer is a heartbeat that never reaches the
// database: the worker keeps running its handler while its lease lapses.
type dispatchPartitionedRenewer struct{}

func (dispatchPartitionedRenewer) Renew(context.Context, uuid.UUID, int64, time.Duration) (store.RenewResult, error) {
	return store.RenewResult{}, errors.New("heartbeat connection partitioned (test)")
}

// TestAReapedWorkersFinishCannotOverwriteTheNewerAttempt runs a real worker
// (daemon/worker, in process, so its handler can be held) whose heartbeats
// cannot reach the database. While its handler is blocked, the lease
// expires, the reaper takes the task back, it is promoted and claimed again
// by another worker, which succeeds with its own result. Then the first
// handler returns: its finish carries the old fencing token, matches
// nothing, is counted in flowforge_stale_writes_rejected_total{op="finish"},
// and the newer outcome stands.
func TestAReapedWorkersFinishCannotOverwriteTheNewerAttempt(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	s.Apply(t, "name: stale\ntasks:\n  - {name: a, handler: hold, retry: {max_attempts: 3}}\n")
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	reg := core.NewRegistry()
	reg.MustRegister("hold", func(ctx context.Context, task core.Task) (json.RawMessage, error) {
		started <- struct{}{}
		<-release
		return json.RawMessage(`{"by":"first"}`), nil
	})
	m := metrics.New()
	w, err := worker.New(worker.Config{Store: s.Store, Renewer: dispatchPartitionedRenewer{},
		Broker: dispatchBrokerConfig(s), Registry: reg, Concurrency: 1, Lease: 300 * time.Millisecond,
		ID: "first-worker", Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(ctx)
	}()
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(func() { unblock(); stop(); <-done })
	s.Daemon(t, "publisher", "publisher")

	runID := s.Trigger(t, "stale")
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler never started")
	}
	taskID, _, _ := s.ShowRun(t, runID).Task(t, "a")
	tid := uuid.MustParse(taskID)
	noDelay := func(core.RetryPolicy, int) time.Duration { return 0 }
	harness.Eventually(t, 10*time.Second, "the lapsed lease to be reaped", func() (bool, error) {
		n, err := s.Store.ReapExpired(context.Background(), 10, noDelay, "test-reaper")
		return n == 1, err
	})
	var token int64
	harness.Eventually(t, 10*time.Second, "the retry to be promoted", func() (bool, error) {
		if _, err := s.Store.Advance(context.Background(), nil, 100, "test-scheduler"); err != nil {
			return false, err
		}
		st, tok, err := s.Store.TaskStateOf(context.Background(), tid)
		token = tok
		return st == core.TaskReady, err
	})
	second, ok, err := s.Store.Claim(context.Background(), tid, token, "second-worker", time.Minute)
	if err != nil || !ok {
		t.Fatalf("second claim: ok=%v err=%v", ok, err)
	}

	// The first attempt finishes while the second is still RUNNING: the
	// state check alone would let it through; the fencing token must not.
	unblock()
	harness.Eventually(t, 10*time.Second, "the stale finish to be rejected", func() (bool, error) {
		families, err := m.Registry.Gather()
		if err != nil {
			return false, err
		}
		for _, f := range families {
			if f.GetName() != "flowforge_stale_writes_rejected_total" {
				continue
			}
			for _, mt := range f.GetMetric() {
				for _, l := range mt.GetLabel() {
					if l.GetName() == "op" && l.GetValue() == "finish" && mt.GetCounter().GetValue() == 1 {
						return true, nil
					}
				}
			}
		}
		return false, errors.New("flowforge_stale_writes_rejected_total{op=finish} is not 1")
	})
	if st, tok, err := s.Store.TaskStateOf(context.Background(), tid); err != nil || st != core.TaskRunning || tok != second.FencingToken {
		t.Fatalf("after the stale finish: %s token %d (err %v), want the second attempt still RUNNING with token %d", st, tok, err, second.FencingToken)
	}
	state, ok, err := s.Store.Finish(context.Background(), store.FinishRequest{ID: tid, Token: second.FencingToken,
		WorkerID: "second-worker", Outcome: store.OutcomeSucceeded, Result: json.RawMessage(`{"by":"second"}`)})
	if err != nil || !ok || state != core.TaskSucceeded {
		t.Fatalf("second finish: state=%s ok=%v err=%v", state, ok, err)
	}
	r := s.ShowRun(t, runID)
	_, st, attempt := r.Task(t, "a")
	if st != "SUCCEEDED" || attempt != 2 {
		t.Fatalf("task: %s attempt %d, want SUCCEEDED by attempt 2", st, attempt)
	}
	var res struct {
		By string `json:"by"`
	}
	if err := json.Unmarshal(r.Tasks[0].Result, &res); err != nil || res.By != "second" {
		t.Fatalf("task result %s, want the second attempt's {\"by\":\"second\"}", r.Tasks[0].Result)
	}
}
