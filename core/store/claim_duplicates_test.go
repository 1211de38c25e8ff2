package store_test

import (
	"testing"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// TestAClaimBatchTriesEveryTokenOfATask: mode 86. One ClaimMany holds two
// requests for one task, a stale copy of its dispatch (an older token)
// first and the fresh one (the task's token) second, then the fresh one
// again: the batch keeps one request per (task, token), so the fresh
// request claims, the stale one loses, and the exact repeat loses as a
// duplicate. Before, the batch kept the first request of each task
// whatever its token: nothing claimed, and the fresh dispatch was acked as
// lost, the task READY until the redispatch.
func TestAClaimBatchTriesEveryTokenOfATask(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneTask)
	ids, toks := f.readyTasks(1)
	id, tok := ids[0], toks[0]
	if tok < 1 {
		t.Fatalf("the task is at token %d; the test needs an older token to send", tok)
	}
	reqs := []store.ClaimRequest{{ID: id, Token: tok - 1}, {ID: id, Token: tok}, {ID: id, Token: tok}}
	res, err := f.s.ClaimMany(f.ctx, reqs, "wb", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{false, true, false} {
		if res[i].OK != want {
			t.Errorf("request %d (token %d): ok=%v, want %v", i, reqs[i].Token, res[i].OK, want)
		}
	}
	if c := res[1].Task; c.ID != id || c.FencingToken != tok+1 || c.Attempt != 1 {
		t.Errorf("claimed %+v, want task %s at token %d, attempt 1", c, id, tok+1)
	}
	if st, now := f.state(id); st != core.TaskRunning || now != tok+1 {
		t.Errorf("task %s at token %d, want RUNNING at %d", st, now, tok+1)
	}
	if n := f.events(id, "wb"); n != 1 {
		t.Errorf("%d history rows by the batch, want 1", n)
	}
}
