package store_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// TestClaimAndSettleReturnTheLatencyTimes: the times the latency
// histograms need come with the statements that already run, no query
// added. A claim returns the task's ready_at, its own start and the run's
// created_at (in that order on the database clock); the finish that
// settles a run of one task returns that run (workflow, SUCCEEDED,
// created_at before finished_at); a finish that settles nothing returns
// none; and the scheduler's pass returns the runs it settles.
func TestClaimAndSettleReturnTheLatencyTimes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply("name: solo\ntasks:\n  - {name: only, handler: noop}\n")
	f.apply("name: pair\ntasks:\n  - {name: a, handler: noop}\n  - {name: b, handler: noop, depends_on: [a]}\n")
	finish := func(c store.ClaimedTask) store.FinishResult {
		t.Helper()
		res, err := f.s.FinishMany(f.ctx, []store.FinishRequest{{ID: c.ID, Token: c.FencingToken, WorkerID: "w1",
			Outcome: store.OutcomeSucceeded, Result: json.RawMessage(`{}`)}})
		if err != nil || !res[0].OK {
			t.Fatalf("finish %s: %+v %v", c.TaskName, res, err)
		}
		return res[0]
	}

	solo := f.trigger("solo", `{}`)
	c := f.claim(f.taskID(solo, "only"), "w1", 30*time.Second)
	if !c.ReadyAt.Valid || c.ReadyAt.Time.Before(c.RunCreatedAt) || c.ClaimedAt.Before(c.ReadyAt.Time) {
		t.Fatalf("claim: run created %v, ready %v (valid %v), claimed %v; want created <= ready <= claimed",
			c.RunCreatedAt, c.ReadyAt.Time, c.ReadyAt.Valid, c.ClaimedAt)
	}
	r := finish(c).Run
	if r == nil {
		t.Fatal("the finish that settled a run of one task returned no run")
	}
	if r.Workflow != "solo" || r.State != core.RunSucceeded || !r.CreatedAt.Equal(c.RunCreatedAt) || r.Duration() < 0 {
		t.Errorf("settled run %+v, want workflow solo, SUCCEEDED, created at %v, finished after", *r, c.RunCreatedAt)
	}

	pair := f.trigger("pair", `{}`)
	for _, name := range []string{"a", "b"} {
		if got := finish(f.claim(f.taskID(pair, name), "w1", 30*time.Second)).Run; got != nil {
			t.Errorf("the finish of %s settled %+v; a run of two tasks is the scheduler's to settle", name, *got)
		}
	}
	res, err := f.s.Advance(f.ctx, nil, 1000, "sched")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Settled) != 1 || res.Settled[0].Workflow != "pair" || res.Settled[0].State != core.RunSucceeded ||
		res.Settled[0].Duration() < 0 || res.RunsSettled != 1 {
		t.Errorf("the pass settled %+v (RunsSettled %d), want the pair run SUCCEEDED", res.Settled, res.RunsSettled)
	}
}
