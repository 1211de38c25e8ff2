package store_test

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// pairWithChild has two independent tasks that retry and a child of y.
const pairWithChild = `
name: pairfin
tasks:
  - {name: x, handler: noop, retry: {max_attempts: 3}}
  - {name: y, handler: noop, retry: {max_attempts: 3}}
  - {name: z, handler: noop, depends_on: [y]}
`

// finished is what a FinishMany started in the background returned.
type finished struct {
	res []store.FinishResult
	err error
}

// finishInBackground starts a FinishMany and returns where it lands.
func (f *fixture) finishInBackground(reqs []store.FinishRequest) <-chan finished {
	out := make(chan finished, 1)
	go func() {
		res, err := f.s.FinishMany(f.ctx, reqs)
		out <- finished{res, err}
	}()
	return out
}

// awaitFinish waits for a background FinishMany for at most the 10 s the
// worker allows a finish call (a bound on a hang, not a measure: the
// answer is expected within store.FinishRunLockWait and a few round trips).
func (f *fixture) awaitFinish(done <-chan finished, what string) finished {
	f.t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(10 * time.Second):
		f.t.Fatalf("%s: FinishMany did not return within the worker's 10s", what)
		return finished{}
	}
}

// TestAHeldRunCostsOnlyItsOwnFailedRows: mode 84. Run R1's row is held
// (a forgotten BEGIN … FOR UPDATE) while a finish batch holds a FAILED
// attempt of R1 (x), a SUCCEEDED attempt of R1 (y), a SUCCEEDED attempt of
// another run R2 (x) and a permanent failure of R2 (y, whose child z it
// buries). The call returns while R1 is still held: every row commits
// except the FAILED row of R1, which comes back with an error wrapping
// ErrLockTimeout, its task still RUNNING at its token; a batch of that row
// alone does the same; once R1 is released a retry records it.
func TestAHeldRunCostsOnlyItsOwnFailedRows(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(pairWithChild)
	r1, r2 := f.trigger("pairfin", ""), f.trigger("pairfin", "")
	t1, t2 := f.tasks(r1), f.tasks(r2)
	c1x, c1y := f.claim(t1["x"].ID, "w1", time.Minute), f.claim(t1["y"].ID, "w1", time.Minute)
	c2x, c2y := f.claim(t2["x"].ID, "w1", time.Minute), f.claim(t2["y"].ID, "w1", time.Minute)
	req := func(c store.ClaimedTask, o store.Outcome, permanent bool) store.FinishRequest {
		return store.FinishRequest{ID: c.ID, Token: c.FencingToken, Outcome: o, Permanent: permanent, Error: "boom",
			Result: json.RawMessage(`{"ok":true}`), RetryDelay: time.Minute, WorkerID: "w1"}
	}
	reqs := []store.FinishRequest{
		req(c1x, store.OutcomeFailed, false),
		req(c1y, store.OutcomeSucceeded, false),
		req(c2x, store.OutcomeSucceeded, false),
		req(c2y, store.OutcomeFailed, true),
	}

	h := f.hold()
	f.exec(h, `SELECT 1 FROM workflow_runs WHERE id = $1 FOR UPDATE`, r1)
	got := f.awaitFinish(f.finishInBackground(reqs), "a batch beside a held run")
	// The holder is still there, holding R1: the call did not wait it out.
	f.exec(h, `SELECT 1 FROM workflow_runs WHERE id = $1 FOR UPDATE`, r1)
	if got.err != nil {
		t.Fatalf("the batch failed as a whole: %v", got.err)
	}
	want := []store.FinishResult{{}, {State: core.TaskSucceeded, OK: true}, {State: core.TaskSucceeded, OK: true}, {State: core.TaskDead, OK: true}}
	for i, r := range got.res {
		if i == 0 {
			if r.OK || !errors.Is(r.Err, store.ErrLockTimeout) {
				t.Errorf("the FAILED row of the held run: %+v, want an error wrapping ErrLockTimeout", r)
			}
			continue
		}
		if r != want[i] {
			t.Errorf("row %d: %+v, want %+v", i, r, want[i])
		}
	}
	f.wantRunning(c1x.ID, c1x.FencingToken)
	f.wantState(c1y.ID, core.TaskSucceeded)
	f.wantState(c2x.ID, core.TaskSucceeded)
	f.wantState(c2y.ID, core.TaskDead)
	f.wantBuried(t2, "y", "w1", "z")

	alone := f.awaitFinish(f.finishInBackground(reqs[:1]), "the held run's row alone")
	f.exec(h, `SELECT 1 FROM workflow_runs WHERE id = $1 FOR UPDATE`, r1)
	if alone.err != nil || alone.res[0].OK || !errors.Is(alone.res[0].Err, store.ErrLockTimeout) {
		t.Fatalf("the held run's row alone: %+v %v, want an error wrapping ErrLockTimeout", alone.res, alone.err)
	}
	f.wantRunning(c1x.ID, c1x.FencingToken)

	if err := h.Rollback(); err != nil {
		t.Fatal(err)
	}
	res, err := f.s.FinishMany(f.ctx, reqs[:1])
	if err != nil || res[0] != (store.FinishResult{State: core.TaskRetrying, OK: true}) {
		t.Fatalf("retry once the run is free: %+v %v, want RETRYING", res, err)
	}
	f.wantStateToken(c1x.ID, core.TaskRetrying, c1x.FencingToken)
}

// TestAFinishBatchKeepsTheLiveAttemptBehindAStaleOne: mode 87. A batch
// holds a stale attempt's outcome (token t) before the live attempt's (token
// t+1) of the same task, then a repeat of the live one: only the live one
// is OK, whatever the outcomes (the two may be recorded by different
// statements), and the task holds its outcome.
func TestAFinishBatchKeepsTheLiveAttemptBehindAStaleOne(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		stale, live store.Outcome
		want        core.TaskState
	}{
		{"both succeeded", store.OutcomeSucceeded, store.OutcomeSucceeded, core.TaskSucceeded},
		{"the stale one failed", store.OutcomeFailed, store.OutcomeSucceeded, core.TaskSucceeded},
		{"the live one failed", store.OutcomeSucceeded, store.OutcomeFailed, core.TaskDead},
		{"both failed", store.OutcomeFailed, store.OutcomeFailed, core.TaskDead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.apply(oneTask)
			id := f.taskID(f.trigger("one", ""), "a")
			c := f.claim(id, "w2", time.Minute)
			req := func(tok int64, o store.Outcome, note string) store.FinishRequest {
				return store.FinishRequest{ID: id, Token: tok, Outcome: o, Result: json.RawMessage(`"` + note + `"`),
					Error: note, Permanent: true, WorkerID: "w2"}
			}
			reqs := []store.FinishRequest{
				req(c.FencingToken-1, tc.stale, "stale"),
				req(c.FencingToken, tc.live, "live"),
				req(c.FencingToken, store.OutcomeSucceeded, "repeat"),
			}
			res, err := f.s.FinishMany(f.ctx, reqs)
			if err != nil {
				t.Fatal(err)
			}
			want := []store.FinishResult{{}, {State: tc.want, OK: true}, {}}
			for i, r := range res {
				r.Run = nil // the run a finish settles: TestClaimAndSettleReturnTheLatencyTimes
				if r != want[i] {
					t.Errorf("request %d (token %d, %s): %+v, want %+v", i, reqs[i].Token, reqs[i].Error, r, want[i])
				}
			}
			d := f.task(id)
			if d.State != tc.want || d.FencingToken != c.FencingToken {
				t.Fatalf("task %s at token %d, want %s at %d", d.State, d.FencingToken, tc.want, c.FencingToken)
			}
			if tc.want == core.TaskSucceeded && string(d.Result) != `"live"` || tc.want != core.TaskSucceeded && (d.Error == nil || *d.Error != "live") {
				t.Errorf("task holds result %s error %v, want the live attempt's", d.Result, d.Error)
			}
			if n := f.events(id, "w2"); n != 2 { // claimed, finished once
				t.Errorf("%d history rows by w2, want 2", n)
			}
		})
	}
}

// TestAFinishBatchOverThreeRunsNamesThemAll: mode 56. One FinishMany over
// tasks of three runs (each with a task still to run) sends one
// notification naming exactly those three runs, for successes and (in the
// transaction that locks their runs) for failures alike.
func TestAFinishBatchOverThreeRunsNamesThemAll(t *testing.T) {
	// Not parallel: the package's tests share a database, whose
	// notifications every listener of a channel receives.
	f, url := notifyFixture(t)
	f.apply(twoRoots)
	l := listenOn(t, url, store.TasksChannel)
	for _, o := range []store.Outcome{store.OutcomeSucceeded, store.OutcomeFailed} {
		var runs []string
		var reqs []store.FinishRequest
		for range 3 {
			run := f.trigger("two", "")
			c := f.claim(f.taskID(run, "a"), "w1", time.Minute)
			runs = append(runs, run.String())
			reqs = append(reqs, store.FinishRequest{ID: c.ID, Token: c.FencingToken, Outcome: o, Error: "boom", WorkerID: "w1"})
		}
		res, err := f.s.FinishMany(f.ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			if !r.OK {
				t.Fatalf("%s row %d: %+v", o, i, r)
			}
		}
		got := nextNaming(t, l, runs)
		slices.Sort(got)
		slices.Sort(runs)
		if !slices.Equal(got, runs) {
			t.Fatalf("a %s batch over runs %v notified %v, want exactly those runs", o, runs, got)
		}
	}
}

// nextNaming returns the payload items of the next notification naming any
// of runs, skipping the other schemas' (other tests share the database).
func nextNaming(t *testing.T, l *store.Listener, runs []string) []string {
	t.Helper()
	for {
		items := next(t, l)
		for _, it := range items {
			if _, err := uuid.Parse(it); err == nil && slices.Contains(runs, it) {
				return items
			}
		}
	}
}

// TestAFinishBatchWaitsForHeldRunsOnceNotPerRow: mode 84. A batch of FAILED
// rows of 40 runs another transaction holds and of one free run waits out
// store.FinishRunLockWait once, then records the free run's row beside the
// held ones: it returns within the 10 s the worker allows a finish call,
// the held runs' rows each with an error wrapping ErrLockTimeout. (A
// fallback row by row would wait once per held row: 40 × 500 ms = 20 s.)
func TestAFinishBatchWaitsForHeldRunsOnceNotPerRow(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneTask)
	const nHeld = 40
	var held []uuid.UUID
	var reqs []store.FinishRequest
	for i := range nHeld + 1 {
		run := f.trigger("one", "")
		c := f.claim(f.taskID(run, "a"), "w1", time.Minute)
		reqs = append(reqs, store.FinishRequest{ID: c.ID, Token: c.FencingToken, Outcome: store.OutcomeFailed, Error: "boom", Permanent: true, WorkerID: "w1"})
		if i < nHeld {
			held = append(held, run)
		}
	}
	h := f.hold()
	f.exec(h, `SELECT 1 FROM workflow_runs WHERE id = ANY ($1::uuid[]) ORDER BY id FOR UPDATE`, held)
	got := f.awaitFinish(f.finishInBackground(reqs), "a batch of 40 held runs' rows and a free one")
	f.exec(h, `SELECT 1 FROM workflow_runs WHERE id = ANY ($1::uuid[]) FOR UPDATE`, held)
	if got.err != nil {
		t.Fatalf("the batch failed as a whole: %v", got.err)
	}
	for i, r := range got.res[:nHeld] {
		if r.OK || !errors.Is(r.Err, store.ErrLockTimeout) {
			t.Fatalf("row %d of a held run: %+v, want an error wrapping ErrLockTimeout", i, r)
		}
	}
	if r := got.res[nHeld]; r != (store.FinishResult{State: core.TaskDead, OK: true}) {
		t.Fatalf("the free run's row: %+v, want DEAD", r)
	}
}
