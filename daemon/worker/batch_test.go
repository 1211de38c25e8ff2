package worker

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// TestAWorkerRunsOnlyTheWinnersOfAClaimBatch: mode 50 at the worker. Every
// slot is taken until all deliveries wait, so one batch holds them all: three fresh dispatches, a duplicate of a
// task another worker runs, one of a cancelled run and a stale one (a
// token behind; the task's current token is a fresh row's). Only the
// winners run; each loser is acked, explained and counted by its reason.
func TestAWorkerRunsOnlyTheWinnersOfAClaimBatch(t *testing.T) {
	var mu sync.Mutex
	ran := map[string]int{}
	reg := core.NewRegistry()
	reg.MustRegister("count", func(_ context.Context, task core.Task) (json.RawMessage, error) {
		mu.Lock()
		defer mu.Unlock()
		ran[task.TaskRunID]++
		return nil, nil
	})
	r := newRig(t, reg, func(c *Config) { c.Concurrency = 8 })
	r.signals.lost = make(chan uuid.UUID, 8)
	r.signals.received = make(chan uuid.UUID, 8)
	r.w.signals = r.signals
	// Every slot starts taken (as by running tasks), so the first delivery
	// waits for one while the others queue behind it.
	for range cap(r.w.slots) {
		r.w.slots <- struct{}{}
	}
	storetest.Apply(t, r.st, "name: one\ntasks:\n  - {name: a, handler: count}\n")
	ctx := t.Context()
	ids := make([]uuid.UUID, 6)
	for i := range ids {
		ids[i] = r.taskOf(storetest.Trigger(t, r.st, "one", ""), "a").ID
	}
	fresh, dup, cancelled, stale := ids[:3], ids[3], ids[4], ids[5]
	_, tok, err := r.st.TaskStateOf(ctx, dup)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := storetest.Claim(t, r.st, dup, tok, "other-worker", time.Minute); !ok {
		t.Fatal("claim by the other worker lost")
	}
	runOf := func(id uuid.UUID) uuid.UUID {
		var run uuid.UUID
		if err := r.db.QueryRowContext(ctx, `SELECT run_id FROM task_runs WHERE id = $1`, id).Scan(&run); err != nil {
			t.Fatal(err)
		}
		return run
	}
	if _, err := r.st.CancelRun(ctx, runOf(cancelled), "test", "test"); err != nil {
		t.Fatal(err)
	}
	// The stale task moved on to token 2 (a newer generation) while its
	// dispatch still carries token 1; fresh[0] is at token 2 too (row and
	// dispatch), so the batch carries the stale task's current token for
	// another row.
	if _, err := r.db.ExecContext(ctx, `UPDATE task_runs SET fencing_token = fencing_token + 1 WHERE id = ANY ($1::uuid[])`,
		[]uuid.UUID{stale, fresh[0]}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.db.ExecContext(ctx, `UPDATE outbox SET fencing_token_snapshot = fencing_token_snapshot + 1,
	        payload = jsonb_set(payload, '{fencing_token}', to_jsonb(fencing_token_snapshot + 1)) WHERE task_run_id = $1`, fresh[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := r.db.ExecContext(ctx, `UPDATE outbox SET published_at = now() WHERE task_run_id NOT IN (SELECT unnest($1::uuid[]))`, ids); err != nil {
		t.Fatal(err)
	}
	r.start()
	if n := r.publish(); n != len(ids) {
		t.Fatalf("%d dispatches, want %d", n, len(ids))
	}
	for range ids {
		select {
		case <-r.signals.received:
		case <-time.After(20 * time.Second):
			t.Fatal("not every dispatch reached the worker")
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(r.w.pending) != len(ids)-1 { // the first waits for a slot in the claim loop
		if time.Now().After(deadline) {
			t.Fatalf("%d deliveries wait behind the first, want %d", len(r.w.pending), len(ids)-1)
		}
		time.Sleep(5 * time.Millisecond) // poll interval, not a wait for state
	}
	for range cap(r.w.slots) {
		<-r.w.slots // the slots free: the first takes one and gathers the rest
	}
	for range fresh {
		if f := r.awaitFinished(30 * time.Second); !f.OK || f.State != core.TaskSucceeded {
			t.Fatalf("finish %+v, want SUCCEEDED", f)
		}
	}
	lost := map[uuid.UUID]bool{}
	for range 3 {
		select {
		case id := <-r.signals.lost:
			lost[id] = true
		case <-time.After(30 * time.Second):
			t.Fatalf("only %d lost claims acked", len(lost))
		}
	}
	if !lost[dup] || !lost[cancelled] || !lost[stale] {
		t.Fatalf("lost claims %v, want the duplicate, cancelled and stale deliveries", lost)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range fresh {
		if ran[id.String()] != 1 {
			t.Errorf("fresh task %s ran %d times, want 1", id, ran[id.String()])
		}
	}
	if len(ran) != len(fresh) {
		t.Errorf("handlers ran for %v, want the fresh tasks only", ran)
	}
	for _, reason := range []string{"duplicate", "cancelled", "stale"} {
		if v := testutil.ToFloat64(r.metrics.ClaimsLost.WithLabelValues(reason)); v != 1 {
			t.Errorf("claims lost %q = %v, want 1", reason, v)
		}
	}
	if st, _, err := r.st.TaskStateOf(ctx, stale); err != nil || st != core.TaskReady {
		t.Errorf("stale task: %s %v, want READY (its own dispatch still to come)", st, err)
	}
	if st, _, _ := r.st.TaskStateOf(ctx, dup); st != core.TaskRunning {
		t.Errorf("duplicate task: %s, want RUNNING for the other worker", st)
	}
}
