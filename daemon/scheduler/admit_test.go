package scheduler

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// runLoop runs the scheduler's loop (Run) until the test ends.
func (r *passRig) runLoop() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.s.Run(ctx) }()
	r.t.Cleanup(func() {
		cancel()
		<-done
	})
}

// dispatchedOf counts the task runs of workflow that have an outbox row.
func (r *passRig) dispatchedOf(workflow string) int {
	r.t.Helper()
	var n int
	if err := r.db.QueryRow(`SELECT count(DISTINCT o.task_run_id) FROM outbox o JOIN task_runs t ON t.id = o.task_run_id
	                           JOIN workflow_runs w ON w.id = t.run_id WHERE w.workflow_name = $1`, workflow).Scan(&n); err != nil {
		r.t.Fatal(err)
	}
	return n
}

// TestTheSchedulerWakesWhenARateKeyHasRoomAgain: a rate limit of 2 per
// 500 ms over 5 tasks, under a scheduler whose sweep is a minute away and
// that hears no notification after the trigger's: only the admission's
// own due time (store.AdmitResult.RateDue) can wake it, and it admits the
// rest on time (2 at once, 2 after ~0.5 s, 1 after ~1 s).
func TestTheSchedulerWakesWhenARateKeyHasRoomAgain(t *testing.T) {
	r := newPassRig(t, func(c *Config) { c.SweepInterval = time.Minute; c.FullSweepInterval = time.Minute })
	storetest.Apply(t, r.st, "name: rated\ntasks:\n  - {name: a, handler: noop, rate_limit: {key: api, limit: 2, per: 500ms}}\n")
	for range 5 {
		storetest.Trigger(t, r.st, "rated", "")
	}
	r.runLoop()
	start := time.Now()
	r.waitFor("two tasks admitted at once", 5*time.Second, func() bool { return r.dispatchedOf("rated") >= 2 })
	r.waitFor("all five admitted", 5*time.Second, func() bool { return r.dispatchedOf("rated") == 5 })
	if took := time.Since(start); took < 900*time.Millisecond || took > 3*time.Second {
		t.Fatalf("five starts at 2 per 500 ms took %v, want about 1 s", took)
	}
}

// spacedAdmits is the real store, its admission rounds counted, each
// reporting extra more slot holders counted than it did (a key at a limit
// of thousands, without thousands of tasks), and the next more rounds
// reporting that a key had more to admit than a round's batch.
type spacedAdmits struct {
	Store
	extra atomic.Int64
	calls atomic.Int64
	more  atomic.Int64
}

func (s *spacedAdmits) Admit(ctx context.Context, after, actor string) (store.AdmitResult, error) {
	s.calls.Add(1)
	res, err := s.Store.Admit(ctx, after, actor)
	res.Counted += int(s.extra.Load())
	if s.more.Add(-1) >= 0 {
		res.More = true
	}
	return res, err
}

// admitNextDispatched claims and succeeds the one dispatched task of
// workflow that has not finished; its finish asks the schedulers for an
// admission round (store.AdmitWake).
func (r *passRig) admitNextDispatched(workflow string) {
	r.t.Helper()
	var id uuid.UUID
	var token int64
	err := r.db.QueryRow(`SELECT t.id, t.fencing_token FROM task_runs t JOIN workflow_runs w ON w.id = t.run_id
	                       WHERE w.workflow_name = $1 AND t.state = 'READY' AND EXISTS (SELECT 1 FROM outbox o WHERE o.task_run_id = t.id)`,
		workflow).Scan(&id, &token)
	if err != nil {
		r.t.Fatalf("the dispatched task of %s: %v", workflow, err)
	}
	c, ok := storetest.Claim(r.t, r.st, id, token, "w1", time.Minute)
	if !ok {
		r.t.Fatalf("claim %s lost", id)
	}
	r.succeed(c)
}

// TestAdmissionRoundsAreSpacedByTheHoldersTheyCount (issue 27's W1 with a
// key): after a round that counted 40,000 slot holders (2 s of
// AdmitSpacingPerCounted), a finish's wake runs no round — the slot it
// gave back waits — and the round runs 2 s after the last, with no wake.
// Unspaced, the wake's turn admitted at once: a key at its limit was
// counted whole after every finish.
func TestAdmissionRoundsAreSpacedByTheHoldersTheyCount(t *testing.T) {
	var sa *spacedAdmits
	r := newPassRig(t, func(c *Config) {
		sa = &spacedAdmits{Store: c.Store}
		c.Store = sa
		c.SweepInterval, c.FullSweepInterval = time.Minute, time.Minute
	})
	storetest.Apply(t, r.st, "name: keyed\ntasks:\n  - {name: a, handler: noop, concurrency: {key: k, limit: 1}}\n")
	for range 3 {
		storetest.Trigger(t, r.st, "keyed", "")
	}
	r.s.signals.reconnectSwept = make(chan struct{}, 1)
	r.s.signals.passed = make(chan error, 64)
	r.runLoop()
	select {
	case <-r.s.signals.reconnectSwept:
	case <-time.After(10 * time.Second):
		t.Fatal("the scheduler's listener never connected")
	}
	r.waitFor("the first task admitted", 5*time.Second, func() bool { return r.dispatchedOf("keyed") == 1 })

	// The last round counted nothing: the finish's wake admits at once,
	// and that round reports 40,000 holders.
	sa.extra.Store(40_000)
	r.admitNextDispatched("keyed")
	r.waitFor("the second task admitted", 5*time.Second, func() bool { return r.dispatchedOf("keyed") == 2 })
	admitted := time.Now()
	calls := sa.calls.Load()

	for len(r.s.signals.passed) > 0 {
		<-r.s.signals.passed
	}
	r.admitNextDispatched("keyed")
	select {
	case <-r.s.signals.passed:
	case <-time.After(5 * time.Second):
		t.Fatal("the finish's wake ran no turn")
	}
	if time.Since(admitted) > 1500*time.Millisecond {
		t.Fatalf("the wake's turn came %v after the last round: too late to tell a spaced round from one at once", time.Since(admitted))
	}
	if got := sa.calls.Load(); got != calls || r.dispatchedOf("keyed") != 2 {
		t.Fatalf("the wake's turn ran an admission round %v after one that counted 40,000 holders (rounds %d → %d)", time.Since(admitted), calls, got)
	}
	r.waitFor("the third task admitted, with no wake", 5*time.Second, func() bool { return r.dispatchedOf("keyed") == 3 })
	if took := time.Since(admitted); took < 1900*time.Millisecond {
		t.Fatalf("the next round ran %v after the last, want about 2 s (40,000 × %v)", took, AdmitSpacingPerCounted)
	}
}

// TestARoundWithMoreToAdmitIsFollowedAtOnce: rounds that admitted a
// key's whole batch with slots left (store.AdmitResult.More) are followed
// by the next at once, however many holders they counted (40,000 here:
// 2 s of AdmitSpacingPerCounted each), with no wake: a key of 10,000 over
// a backlog is filled a batch at a time without waiting between batches.
// Once no round has more, the spacing applies again.
func TestARoundWithMoreToAdmitIsFollowedAtOnce(t *testing.T) {
	var sa *spacedAdmits
	r := newPassRig(t, func(c *Config) {
		sa = &spacedAdmits{Store: c.Store}
		c.Store = sa
		c.SweepInterval, c.FullSweepInterval = time.Minute, time.Minute
	})
	sa.extra.Store(40_000)
	sa.more.Store(9)
	r.runLoop()
	start := time.Now()
	r.waitFor("ten rounds, nine of them with more to admit", 5*time.Second, func() bool { return sa.calls.Load() >= 10 })
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Fatalf("ten rounds took %v: a round with more to admit waited for the spacing", took)
	}
	calls := sa.calls.Load()
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if sa.calls.Load() > calls {
			t.Fatalf("a round ran %v after the last with nothing more to admit, want the spacing (2 s)", time.Since(deadline.Add(-time.Second)))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
