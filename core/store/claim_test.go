package store_test

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

func TestExactlyOneOfManyClaimsWins(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneTask)
	id := f.taskID(f.trigger("one", ""), "a")
	_, tok := f.state(id)
	var wins atomic.Int32
	var winner atomic.Value
	together(50, func(i int) {
		worker := fmt.Sprintf("w%d", i)
		c, ok, err := f.s.Claim(f.ctx, id, tok, worker, 30*time.Second)
		if err != nil {
			t.Errorf("claim %d: %v", i, err)
			return
		}
		if ok {
			wins.Add(1)
			winner.Store(worker)
			if c.FencingToken != tok+1 || c.Attempt != 1 {
				t.Errorf("winning claim: token %d attempt %d, want %d and 1", c.FencingToken, c.Attempt, tok+1)
			}
		}
	})
	if n := wins.Load(); n != 1 {
		t.Fatalf("%d claims won, want exactly 1", n)
	}
	d := f.task(id)
	if d.State != core.TaskRunning || d.FencingToken != tok+1 || d.Attempt != 1 || d.WorkerID == nil || *d.WorkerID != winner.Load() {
		t.Fatalf("task after the race: state %s token %d attempt %d worker %v", d.State, d.FencingToken, d.Attempt, d.WorkerID)
	}
}

func TestAStaleTokenNeverClaims(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneTask)
	id := f.taskID(f.trigger("one", ""), "a")
	_, tok := f.state(id)
	for _, stale := range []int64{tok - 1, tok + 1, 0} {
		if _, ok, err := f.s.Claim(f.ctx, id, stale, "w", time.Second); ok || err != nil {
			t.Fatalf("claim with token %d (current %d): ok=%v err=%v", stale, tok, ok, err)
		}
	}
	f.wantState(id, core.TaskReady)

	// A message of an earlier generation: the task was claimed, its lease
	// reaped, and promoted again with a new token. The old message loses.
	c := f.claim(id, "w1", time.Millisecond)
	f.waitLeaseExpired(id)
	if n, err := f.s.ReapExpired(f.ctx, 10, zeroBackoff, "reaper"); err != nil || n != 1 {
		t.Fatalf("reap: %d %v", n, err)
	}
	f.waitRetryDue(id)
	if res := f.advance(); res.RetriesDue != 1 {
		t.Fatalf("advance: %+v", res)
	}
	_, newTok := f.state(id)
	for _, old := range []int64{tok, c.FencingToken} {
		if _, ok, err := f.s.Claim(f.ctx, id, old, "w2", time.Second); ok || err != nil {
			t.Fatalf("claim with old token %d: ok=%v err=%v", old, ok, err)
		}
	}
	c2, ok, err := f.s.Claim(f.ctx, id, newTok, "w3", time.Second)
	if !ok || err != nil || c2.Attempt != 2 {
		t.Fatalf("claim with the current token %d: ok=%v err=%v attempt=%d", newTok, ok, err, c2.Attempt)
	}
}

func TestClaimOfAnUnknownTaskLoses(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	_, ok, err := f.s.Claim(f.ctx, [16]byte{1}, 1, "w", time.Second)
	if ok || err != nil {
		t.Fatalf("ok=%v err=%v", ok, err)
	}
}

func TestClaimCarriesWhatTheHandlerNeeds(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(`
name: carry
tasks:
  - {name: up, handler: noop}
  - name: down
    handler: echo
    params: {greeting: hi}
    depends_on: [up]
    retry: {max_attempts: 4, initial_backoff: 250ms, max_backoff: 2s}
    timeout: 90s
    idempotency_key: "d-{{ .Params.day }}"
`)
	runID := f.trigger("carry", `{"day":"mon"}`)
	ts := f.tasks(runID)
	up := f.claim(ts["up"].ID, "w1", time.Minute)
	f.finish(up, store.FinishRequest{Outcome: store.OutcomeSucceeded, Result: json.RawMessage(`{"rows":7}`)})
	f.advance()
	c := f.claim(ts["down"].ID, "w2", time.Minute)
	if c.RunID != runID || c.Workflow != "carry" || c.TaskName != "down" || c.Handler != "echo" {
		t.Fatalf("claimed %+v", c)
	}
	if string(c.Params) != `{"greeting": "hi"}` || string(c.RunParams) != `{"day": "mon"}` {
		t.Fatalf("params %s run params %s", c.Params, c.RunParams)
	}
	if got := string(c.UpstreamResults()["up"]); got != `{"rows": 7}` {
		t.Fatalf("upstream up = %s", got)
	}
	want := core.RetryPolicy{MaxAttempts: 4, InitialBackoff: 250 * time.Millisecond, MaxBackoff: 2 * time.Second}
	if c.Policy() != want || c.Timeout() != 90*time.Second || c.IdempotencyKey.String != "d-mon" {
		t.Fatalf("policy %+v timeout %s key %v", c.Policy(), c.Timeout(), c.IdempotencyKey)
	}
	now, err := f.s.Now(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if left := c.LeaseExpiresAt.Sub(now); left < 50*time.Second || left > 61*time.Second {
		t.Fatalf("lease expires in %s on the database clock, want about a minute", left)
	}
}
