package e2e

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/daemon/failpoint"
	"github.com/flowforge/flowforge/e2e/harness"
)

// streamConsumer collects every message of a queue bound to the events
// exchange before the first trigger.
type streamConsumer struct {
	mu   sync.Mutex
	msgs []core.TransitionEvent
	bad  []string
}

func consumeStream(t *testing.T, s *harness.Stack, exchange string) *streamConsumer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tail, err := broker.DialEventTail(ctx, broker.Config{URLs: s.AMQPURLs, Queue: s.Queue}, exchange, core.StreamBindings(""))
	if err != nil {
		cancel()
		t.Fatalf("bind the consumer: %v", err)
	}
	c := &streamConsumer{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			body, err := tail.Next(ctx)
			if err != nil {
				return
			}
			e, err := core.DecodeTransitionEvent(body)
			c.mu.Lock()
			if err != nil {
				c.bad = append(c.bad, string(body))
			} else {
				c.msgs = append(c.msgs, e)
			}
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		_ = tail.Close()
		<-done
	})
	return c
}

// distinct returns the messages de-duplicated by event id, and how many
// duplicates there were; a duplicate that differs from its first copy
// fails the test.
func (c *streamConsumer) distinct(t *testing.T) (map[string]core.TransitionEvent, int) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.bad) > 0 {
		t.Fatalf("%d messages are not transition events, e.g. %s", len(c.bad), c.bad[0])
	}
	out := map[string]core.TransitionEvent{}
	dups := 0
	for _, e := range c.msgs {
		if first, ok := out[e.EventID]; ok {
			dups++
			if first != e {
				t.Fatalf("event %s published twice with different contents:\n%+v\n%+v", e.EventID, first, e)
			}
			continue
		}
		out[e.EventID] = e
	}
	return out, dups
}

// TestReplayingTheStreamRebuildsEveryRunAndTask: modes 121 and 122. 200
// runs through a stack whose publisher streams transitions: 180 with a
// retry each, 10 whose tasks are reaped (their worker killed holding
// them), 10 whose tasks go DEAD and are requeued (and go DEAD again). The
// first publisher is made to crash after the broker confirmed its first
// batch of stream messages and before it stamped them; its successor
// publishes them again. A queue bound before the first trigger receives
// the stream; once every run settled and every stream row is published,
// the events, de-duplicated by event id and ordered by seq, rebuild each
// run's and task's state equal to the tables; each run's seqs are 1..n;
// each task's transitions chain (each from is the previous to); the
// republished batch came with the same seq and event ids (duplicates
// equal to their first copies).
func TestReplayingTheStreamRebuildsEveryRunAndTask(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	exchange := s.Queue + ".events"
	t.Cleanup(func() { deleteExchange(s, exchange) })
	consumer := consumeStream(t, s, exchange)
	s.Daemon(t, "scheduler", "scheduler", "--sweep-interval", "200ms")
	first := s.DaemonEnv(t, "publisher-crashing", "publisher", []string{failpoint.EnvVar + "=" + string(failpoint.PublisherStreamExitAfterConfirm)}, "--events-exchange", exchange)
	harness.Eventually(t, 20*time.Second, "the publisher to turn the stream on", func() (bool, error) {
		return harness.QueryInt(t, db, `SELECT count(*) FROM transition_stream_setting WHERE exchange = $1`, exchange) == 1, errors.New("stream off")
	})
	doomed := s.Daemon(t, "worker-doomed", "worker", "--id", "doomed", "--lease", "1s", "--allow-shell", "--concurrency", "10")
	s.Apply(t, `
name: replay-reap
tasks:
  - name: slow
    handler: shell
    params: {command: ["sh", "-c", "if [ \"$FLOWFORGE_ATTEMPT\" = 1 ]; then sleep 60; fi; echo attempt $FLOWFORGE_ATTEMPT"]}
    retry: {max_attempts: 3, initial_backoff: 100ms, max_backoff: 100ms}
`)
	s.Apply(t, `
name: replay-retry
tasks:
  - {name: a, handler: noop}
  - {name: b, handler: fail, params: {times: 1}, depends_on: [a], retry: {max_attempts: 3, initial_backoff: 50ms, max_backoff: 50ms}}
`)
	s.Apply(t, "name: replay-dead\ntasks:\n  - {name: d, handler: fail, params: {permanent: true}}\n")

	var reaped []string
	for range 10 {
		reaped = append(reaped, s.Trigger(t, "replay-reap"))
	}
	if code, err := first.Wait(30 * time.Second); err != nil || code != failpoint.ExitCode {
		t.Fatalf("the crashing publisher: exit %d, %v; want exit %d by its failpoint", code, err, failpoint.ExitCode)
	}
	s.Daemon(t, "publisher", "publisher", "--events-exchange", exchange)
	harness.Eventually(t, 30*time.Second, "the doomed worker to run every reap task", func() (bool, error) {
		n := harness.QueryInt(t, db, `SELECT count(*) FROM task_runs WHERE state = 'RUNNING' AND worker_id = 'doomed'`)
		return n == len(reaped), fmt.Errorf("%d running", n)
	})
	doomed.Kill()
	s.Daemon(t, "worker", "worker", "--lease", "2s", "--allow-shell", "--concurrency", "16")

	var retried, dead []string
	for range 180 {
		retried = append(retried, s.Trigger(t, "replay-retry"))
	}
	for range 10 {
		dead = append(dead, s.Trigger(t, "replay-dead"))
	}
	s.WaitRuns(t, "SUCCEEDED", 60*time.Second, append(slices.Clone(reaped), retried...)...)
	s.WaitRuns(t, "FAILED", 30*time.Second, dead...)
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_runs WHERE run_id = ANY ($1::uuid[]) AND attempt = 2`, reaped); n != len(reaped) {
		t.Fatalf("%d reap tasks ended on attempt 2, want %d", n, len(reaped))
	}
	deadTasks := tableStates(t, db, dead).taskIDs
	harness.Eventually(t, 20*time.Second, "the FAILED runs to settle", func() (bool, error) {
		n := harness.QueryInt(t, db, `SELECT count(*) FROM workflow_runs WHERE id = ANY ($1::uuid[]) AND finished_at IS NOT NULL`, dead)
		return n == len(dead), fmt.Errorf("%d settled", n)
	})
	s.MustCLI(t, append([]string{"dead", "requeue", "--reason", "replay test"}, deadTasks...)...)
	harness.Eventually(t, 30*time.Second, "the requeued tasks to go DEAD again", func() (bool, error) {
		n := harness.QueryInt(t, db, `SELECT count(*) FROM task_runs t JOIN workflow_runs r ON r.id = t.run_id
		  WHERE t.run_id = ANY ($1::uuid[]) AND t.state = 'DEAD' AND r.state = 'FAILED' AND r.finished_at IS NOT NULL
		    AND (SELECT count(*) FROM task_events e WHERE e.task_run_id = t.id AND e.to_state = 'DEAD') = 2`, dead)
		return n == len(dead), fmt.Errorf("%d of %d", n, len(dead))
	})

	// A published row is deleted (migration 26): once none is left, every
	// transition was numbered, and a run's last seq counts its transitions.
	var rows int
	harness.Eventually(t, 30*time.Second, "every stream row to be published and consumed", func() (bool, error) {
		pending := harness.QueryInt(t, db, `SELECT count(*) FROM transition_stream`)
		rows = harness.QueryInt(t, db, `SELECT coalesce(sum(last_seq), 0)::int FROM transition_stream_seqs`)
		got, _ := consumer.distinct(t)
		return pending == 0 && len(got) == rows, fmt.Errorf("%d unpublished, %d of %d consumed", pending, len(got), rows)
	})
	events, dups := consumer.distinct(t)
	if dups == 0 {
		t.Fatal("no duplicate: the crashed publisher's confirmed batch was not published again")
	}
	checkReplay(t, events, tableStates(t, db, append(append(append([]string{}, reaped...), retried...), dead...)))
}

// streamTables is what the tables say of the test's runs: each run's
// state, each task's (by run and name), and the task run ids.
type streamTables struct {
	runs    map[string]string
	tasks   map[string]map[string]string
	taskIDs []string
}

func tableStates(t *testing.T, db *sql.DB, runs []string) streamTables {
	t.Helper()
	st := streamTables{runs: map[string]string{}, tasks: map[string]map[string]string{}}
	rows, err := db.QueryContext(context.Background(), `SELECT r.id::text, r.state, t.id::text, t.task_name, t.state
  FROM workflow_runs r JOIN task_runs t ON t.run_id = r.id WHERE r.id = ANY ($1::uuid[]) ORDER BY t.id`, runs)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var run, runState, task, name, state string
		if err := rows.Scan(&run, &runState, &task, &name, &state); err != nil {
			t.Fatal(err)
		}
		st.runs[run] = runState
		if st.tasks[run] == nil {
			st.tasks[run] = map[string]string{}
		}
		st.tasks[run][name] = state
		st.taskIDs = append(st.taskIDs, task)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(st.runs) != len(runs) {
		t.Fatalf("%d of %d runs in the tables", len(st.runs), len(runs))
	}
	return st
}

// checkReplay rebuilds each run's and task's state from events (ordered
// by seq per run) and compares it with the tables.
func checkReplay(t *testing.T, events map[string]core.TransitionEvent, want streamTables) {
	t.Helper()
	byRun := map[string][]core.TransitionEvent{}
	for _, e := range events {
		byRun[e.RunID] = append(byRun[e.RunID], e)
	}
	if len(byRun) != len(want.runs) {
		t.Fatalf("events of %d runs, want %d", len(byRun), len(want.runs))
	}
	for id, runWant := range want.runs {
		evs := byRun[id]
		sort.Slice(evs, func(i, j int) bool { return evs[i].Seq < evs[j].Seq })
		runState := ""
		tasks := map[string]string{}
		for i, e := range evs {
			if e.Seq != int64(i+1) {
				t.Fatalf("run %s: seq %d at position %d: not 1..n", id, e.Seq, i+1)
			}
			prev := runState
			if e.Kind == core.TransitionTask {
				prev = tasks[e.Task]
			}
			if e.From != prev {
				t.Fatalf("run %s seq %d: %s %s from %q, but its previous state was %q", id, e.Seq, e.Kind, e.Task, e.From, prev)
			}
			if e.Kind == core.TransitionTask {
				tasks[e.Task] = e.To
			} else {
				runState = e.To
			}
		}
		if runState != runWant {
			t.Fatalf("run %s replayed %s, table %s (events %s)", id, runState, runWant, describe(evs))
		}
		if len(tasks) != len(want.tasks[id]) {
			t.Fatalf("run %s: %d tasks replayed, %d in the table", id, len(tasks), len(want.tasks[id]))
		}
		for name, state := range want.tasks[id] {
			if tasks[name] != state {
				t.Fatalf("run %s task %s replayed %s, table %s (events %s)", id, name, tasks[name], state, describe(evs))
			}
		}
	}
}

func describe(evs []core.TransitionEvent) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "\n  %d %s %s %s->%s", e.Seq, e.Kind, e.Task, e.From, e.To)
	}
	return b.String()
}

// deleteExchange deletes the test's events exchange.
func deleteExchange(s *harness.Stack, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = broker.DeleteExchange(ctx, broker.Config{URLs: s.AMQPURLs, Queue: s.Queue}, name)
}

// TestPublishersGivenDifferentExchangesFollowTheDatabasesOne: mode 122.
// Publisher A is started with --events-exchange X, then publisher B with
// Y (a rename rolled out one publisher at a time). B's start sets the
// database's setting to Y; A follows it within a second and says so. Three
// runs then stream whole to Y — each run's seqs 1..n, n the rows the
// database wrote for it — and nothing of them reaches X: the stream is
// never split between the two exchanges (a trial saw each consumer get
// half of every run's seqs, and neither publisher say a word).
func TestPublishersGivenDifferentExchangesFollowTheDatabasesOne(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	x, y := s.Queue+".events-x", s.Queue+".events-y"
	t.Cleanup(func() { deleteExchange(s, x); deleteExchange(s, y) })
	onX, onY := consumeStream(t, s, x), consumeStream(t, s, y)
	s.Daemon(t, "scheduler", "scheduler")
	s.Daemon(t, "worker", "worker")
	a := s.DaemonEnv(t, "publisher-a", "publisher", []string{"FLOWFORGE_EVENTS_EXCHANGE=" + x})
	a.WaitForLog(t, "publisher: transition stream on", 30*time.Second)
	b := s.DaemonEnv(t, "publisher-b", "publisher", []string{"FLOWFORGE_EVENTS_EXCHANGE=" + y})
	b.WaitForLog(t, "publisher: transition stream on", 30*time.Second)
	a.WaitForLog(t, "another publisher set it); following the database", 30*time.Second)
	s.Apply(t, recoveryChainYAML)
	var runs []string
	for range 3 {
		runs = append(runs, s.Trigger(t, "recovery-chain"))
	}
	s.WaitRuns(t, "SUCCEEDED", 30*time.Second, runs...)
	harness.Eventually(t, 30*time.Second, "every stream row published", func() (bool, error) {
		n := harness.QueryInt(t, db, `SELECT count(*) FROM transition_stream`)
		return n == 0, fmt.Errorf("%d stream rows unpublished", n)
	})
	for _, run := range runs {
		want := harness.QueryInt(t, db, `SELECT last_seq::int FROM transition_stream_seqs WHERE run_id = $1`, run)
		harness.Eventually(t, 10*time.Second, "run "+run+"'s events on "+y, func() (bool, error) {
			evs, _ := onY.distinct(t)
			seqs := map[int64]bool{}
			for _, e := range evs {
				if e.RunID == run {
					seqs[e.Seq] = true
				}
			}
			for i := int64(1); i <= int64(want); i++ {
				if !seqs[i] {
					return false, fmt.Errorf("seq %d of %d missing (%d received)", i, want, len(seqs))
				}
			}
			return len(seqs) == want, fmt.Errorf("%d seqs received, want %d", len(seqs), want)
		})
		evs, _ := onX.distinct(t)
		for _, e := range evs {
			if e.RunID == run {
				t.Fatalf("run %s: event %d (%s %s->%s) went to %s, the exchange the database no longer names", run, e.Seq, e.Kind, e.From, e.To, x)
			}
		}
	}
}
