package store_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// readyTasks triggers n runs of oneTask and returns their tasks' ids and
// current tokens.
func (f *fixture) readyTasks(n int) ([]uuid.UUID, []int64) {
	f.t.Helper()
	ids, toks := make([]uuid.UUID, n), make([]int64, n)
	for i := range n {
		ids[i] = f.taskID(f.trigger("one", ""), "a")
		_, toks[i] = f.state(ids[i])
	}
	return ids, toks
}

// events counts the task's history rows written by actor.
func (f *fixture) events(id uuid.UUID, actor string) int {
	f.t.Helper()
	return f.count(`SELECT count(*) FROM task_events WHERE task_run_id = $1 AND actor = $2`, id, actor)
}

// TestABatchClaimRunsOnlyItsWinners: one ClaimMany whose rows lose for
// every reason a claim loses — a stale token (the task's current token is
// another row's, so only a per-row token check rejects it), a task already
// RUNNING (claimed with its current token), a cancelled run, an unknown
// id, the same id twice — claims the fresh rows only, each with one
// history row, and leaves the losers as they were.
func TestABatchClaimRunsOnlyItsWinners(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneTask)
	ids, toks := f.readyTasks(5)
	fresh, stale, running, cancelled, fresh2 := 0, 1, 2, 3, 4
	if toks[stale] != toks[fresh] {
		t.Fatalf("fresh tasks hold tokens %v; the test needs them equal", toks)
	}
	// stale: a dispatch of an older generation of the task, whose token
	// is one behind; the task's current token is fresh's, which the batch
	// carries for fresh.
	_, staleNow := f.state(ids[stale])
	rc := f.claim(ids[running], "w0", time.Minute)
	runOf := f.task(ids[cancelled]).RunID
	if _, err := f.s.CancelRun(f.ctx, runOf, "test", "test"); err != nil {
		t.Fatal(err)
	}
	reqs := []store.ClaimRequest{
		{ID: ids[fresh], Token: toks[fresh]},
		{ID: ids[stale], Token: toks[stale] - 1},
		{ID: ids[running], Token: rc.FencingToken},
		{ID: ids[cancelled], Token: toks[cancelled]},
		{ID: uuid.New(), Token: 1},
		{ID: ids[fresh2], Token: toks[fresh2]},
		{ID: ids[fresh], Token: toks[fresh]},
	}
	res, err := f.s.ClaimMany(f.ctx, reqs, "wb", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := []bool{true, false, false, false, false, true, false}
	for i, r := range res {
		if r.OK != want[i] {
			t.Errorf("request %d (%s token %d): ok=%v, want %v", i, reqs[i].ID, reqs[i].Token, r.OK, want[i])
		}
		if r.OK && (r.Task.ID != reqs[i].ID || r.Task.FencingToken != reqs[i].Token+1 || r.Task.Attempt != 1) {
			t.Errorf("request %d: claimed %+v", i, r.Task)
		}
	}
	for _, i := range []int{fresh, fresh2} {
		d := f.task(ids[i])
		if d.State != core.TaskRunning || d.WorkerID == nil || *d.WorkerID != "wb" {
			t.Errorf("winner %d: %s by %v", i, d.State, d.WorkerID)
		}
		if n := f.events(ids[i], "wb"); n != 1 {
			t.Errorf("winner %d: %d history rows by the batch, want 1", i, n)
		}
	}
	for i, wantState := range map[int]core.TaskState{stale: core.TaskReady, running: core.TaskRunning, cancelled: core.TaskCancelled} {
		d := f.task(ids[i])
		if d.State != wantState || f.events(ids[i], "wb") != 0 {
			t.Errorf("loser %d: %s (want %s) with %d history rows by the batch", i, d.State, wantState, f.events(ids[i], "wb"))
		}
	}
	if _, tok := f.state(ids[stale]); tok != staleNow {
		t.Errorf("stale loser's token moved from %d to %d", staleNow, tok)
	}
}

// TestConcurrentBatchClaimsInOppositeOrdersNeitherDeadlockNorShare: two
// workers claim the same tasks at once, in opposite orders; the rows are
// locked in id order, so neither batch fails (a deadlock would fail one)
// and every task is claimed by exactly one of them. Twenty rounds of 60:
// a deadlock needs the two statements to interleave, which five rounds of
// 30 did not always bring about (the mutant that locks in request order
// survived a CI rehearsal).
func TestConcurrentBatchClaimsInOppositeOrdersNeitherDeadlockNorShare(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneTask)
	for round := range 20 {
		ids, toks := f.readyTasks(60)
		fwd := make([]store.ClaimRequest, len(ids))
		rev := make([]store.ClaimRequest, len(ids))
		for i := range ids {
			fwd[i] = store.ClaimRequest{ID: ids[i], Token: toks[i]}
			rev[len(ids)-1-i] = fwd[i]
		}
		won := make([]map[uuid.UUID]bool, 2)
		together(2, func(w int) {
			reqs := fwd
			if w == 1 {
				reqs = rev
			}
			res, err := f.s.ClaimMany(f.ctx, reqs, fmt.Sprintf("w%d", w), time.Minute)
			if err != nil {
				t.Errorf("round %d worker %d: %v", round, w, err)
				return
			}
			won[w] = map[uuid.UUID]bool{}
			for i, r := range res {
				if r.OK {
					won[w][reqs[i].ID] = true
				}
			}
		})
		if t.Failed() {
			t.FailNow()
		}
		for _, id := range ids {
			if won[0][id] == won[1][id] {
				t.Fatalf("round %d: task %s claimed by worker 0: %v, by worker 1: %v; want exactly one", round, id, won[0][id], won[1][id])
			}
		}
	}
}

// TestABatchClaimLocksItsRowsInIDOrderBeforeWriting holds the task whose
// id is the median of a batch of 40 and starts a batch claim that asks for
// them in descending id order: the claim must wait for the held row having
// locked exactly the rows of smaller id (it locks in id order before it
// writes), which a session that skips locked rows sees. A claim that
// locked in its request order would wait holding the rows of greater id;
// one that locked in the table's order, a random set (the ids are random
// uuids), the same as id order once in C(39,20), about 7e10; two such
// batches in opposite orders can deadlock. Unlike the test above, this
// needs no luck in timing: the held row decides where the claim waits.
func TestABatchClaimLocksItsRowsInIDOrderBeforeWriting(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneTask)
	ids, toks := f.readyTasks(40)
	tokOf := make(map[uuid.UUID]int64, len(ids))
	for i, id := range ids {
		tokOf[id] = toks[i]
	}
	// PostgreSQL orders uuids bytewise, as bytes.Compare does.
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	mid := ids[len(ids)/2]
	var reqs []store.ClaimRequest
	for _, id := range slices.Backward(ids) {
		reqs = append(reqs, store.ClaimRequest{ID: id, Token: tokOf[id]})
	}

	held := f.hold()
	f.exec(held, `SELECT 1 FROM task_runs WHERE id = $1 FOR UPDATE`, mid)
	type claimed struct {
		res []store.ClaimResult
		err error
	}
	done := make(chan claimed, 1)
	go func() {
		res, err := f.s.ClaimMany(f.ctx, reqs, "w", time.Minute)
		done <- claimed{res, err}
	}()
	f.waitBlocked(1)

	probe := f.hold()
	rows, err := probe.QueryContext(f.ctx, `SELECT id FROM task_runs WHERE id = ANY ($1::uuid[]) AND id <> $2 ORDER BY id FOR UPDATE SKIP LOCKED`, ids, mid)
	if err != nil {
		t.Fatal(err)
	}
	var free []uuid.UUID
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		free = append(free, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if err := probe.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := held.Rollback(); err != nil {
		t.Fatal(err)
	}
	c := <-done
	if c.err != nil {
		t.Fatal(c.err)
	}
	if want := ids[len(ids)/2+1:]; !slices.Equal(free, want) {
		t.Fatalf("the claim waited for the row of median id with %d rows of its batch unlocked, want exactly the %d of greater id: it does not lock in id order first", len(free), len(want))
	}
	for i, r := range c.res {
		if !r.OK {
			t.Errorf("claim %d lost once the held row was released", i)
		}
	}
}

// claimAll claims the tasks for worker in one batch and insists all won.
func (f *fixture) claimAll(ids []uuid.UUID, toks []int64, worker string) []store.ClaimedTask {
	f.t.Helper()
	reqs := make([]store.ClaimRequest, len(ids))
	for i := range ids {
		reqs[i] = store.ClaimRequest{ID: ids[i], Token: toks[i]}
	}
	res, err := f.s.ClaimMany(f.ctx, reqs, worker, time.Minute)
	if err != nil {
		f.t.Fatal(err)
	}
	out := make([]store.ClaimedTask, len(res))
	for i, r := range res {
		if !r.OK {
			f.t.Fatalf("claim %d lost", i)
		}
		out[i] = r.Task
	}
	return out
}

// TestABatchFinishRecordsOnlyItsFreshRows: one FinishMany with fresh rows
// (a success, a permanent failure) among a row with a stale token (the
// lease moved on to a newer attempt, whose token another request of the
// batch carries, so only a per-row token check rejects it) and a
// row already finished with its own token (only a per-row state check
// rejects it) records the fresh rows alone.
func TestABatchFinishRecordsOnlyItsFreshRows(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneTask)
	ids, toks := f.readyTasks(4)
	cs := f.claimAll(ids, toks, "w1")
	ok1, dead, stale, done := 0, 1, 2, 3
	for i := range cs[1:] {
		if cs[i+1].FencingToken != cs[ok1].FencingToken {
			t.Fatalf("claimed tokens differ; the test needs them equal")
		}
	}
	f.finish(cs[done], store.FinishRequest{Outcome: store.OutcomeSucceeded, Result: json.RawMessage(`"first"`)})
	// stale's lease was lost: a newer attempt holds the row.
	if _, err := f.db.ExecContext(f.ctx, `UPDATE task_runs SET fencing_token = fencing_token + 1 WHERE id = $1`, ids[stale]); err != nil {
		t.Fatal(err)
	}
	reqs := []store.FinishRequest{
		{ID: ids[ok1], Token: cs[ok1].FencingToken, Outcome: store.OutcomeSucceeded, Result: json.RawMessage(`{"n":1}`), WorkerID: "w1"},
		{ID: ids[dead], Token: cs[dead].FencingToken, Outcome: store.OutcomeFailed, Error: "bad", Permanent: true, WorkerID: "w1"},
		{ID: ids[stale], Token: cs[stale].FencingToken, Outcome: store.OutcomeSucceeded, Result: json.RawMessage(`"stale"`), WorkerID: "w1"},
		{ID: ids[done], Token: cs[done].FencingToken, Outcome: store.OutcomeFailed, Error: "late", WorkerID: "w1"},
		// An unknown task whose token is the stale row's current one: only
		// a per-row token check keeps it from fencing the stale row.
		{ID: uuid.New(), Token: cs[stale].FencingToken + 1, Outcome: store.OutcomeSucceeded, WorkerID: "w1"},
	}
	res, err := f.s.FinishMany(f.ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.FinishResult{{State: core.TaskSucceeded, OK: true}, {State: core.TaskDead, OK: true}, {}, {}, {}}
	for i, r := range res {
		r.Run = nil // the run a finish settles: TestClaimAndSettleReturnTheLatencyTimes
		if r != want[i] {
			t.Errorf("request %d: %+v, want %+v", i, r, want[i])
		}
	}
	if d := f.task(ids[stale]); d.State != core.TaskRunning || d.Result != nil {
		t.Errorf("stale row: %s result %s, want RUNNING untouched", d.State, d.Result)
	}
	if d := f.task(ids[done]); d.State != core.TaskSucceeded || string(d.Result) != `"first"` {
		t.Errorf("finished row: %s result %s, want SUCCEEDED with its first result", d.State, d.Result)
	}
	if d := f.task(ids[ok1]); string(d.Result) != `{"n": 1}` {
		t.Errorf("fresh row's result %s", d.Result)
	}
	for i, n := range []int{2, 2, 1, 2} { // claimed (+ finished)
		if got := f.events(ids[i], "w1"); got != n {
			t.Errorf("request %d: %d history rows by w1, want %d", i, got, n)
		}
	}
}

// TestAPoisonedRowDoesNotSinkItsBatch: a row whose result the database
// refuses (jsonb cannot hold \u0000) fails the batch's statement; the
// batch is then recorded row by row, so the other rows commit and only the
// poisoned one carries the error (and stays RUNNING for a retry or the
// reaper).
func TestAPoisonedRowDoesNotSinkItsBatch(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneTask)
	ids, toks := f.readyTasks(3)
	cs := f.claimAll(ids, toks, "w1")
	reqs := make([]store.FinishRequest, len(cs))
	for i, c := range cs {
		reqs[i] = store.FinishRequest{ID: c.ID, Token: c.FencingToken, Outcome: store.OutcomeSucceeded, Result: json.RawMessage(`{"i":` + fmt.Sprint(i) + `}`), WorkerID: "w1"}
	}
	reqs[1].Result = json.RawMessage(`{"bad":"\u0000"}`)
	res, err := f.s.FinishMany(f.ctx, reqs)
	if err != nil {
		t.Fatalf("the batch failed as a whole: %v", err)
	}
	for i, r := range res {
		if i == 1 {
			if r.OK || r.Err == nil || errors.Is(r.Err, store.ErrCommitOutcomeUnknown) {
				t.Errorf("poisoned row: %+v, want its own definite error", r)
			}
			continue
		}
		if !r.OK || r.State != core.TaskSucceeded || r.Err != nil {
			t.Errorf("row %d: %+v, want SUCCEEDED", i, r)
		}
	}
	f.wantState(ids[0], core.TaskSucceeded)
	f.wantState(ids[1], core.TaskRunning)
	f.wantState(ids[2], core.TaskSucceeded)
}
