package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// keyedTTL shares keyed's key template, with two TTLs: an hour (a result
// just recorded is reused) and a millisecond (it is stale at once).
const keyedTTL = `
name: keyed-hour
tasks:
  - {name: report, handler: noop, idempotency_key: "k-{{ .Params.day }}", idempotency_ttl: 1h}
`

const keyedMS = `
name: keyed-ms
tasks:
  - {name: report, handler: noop, idempotency_key: "k-{{ .Params.day }}", idempotency_ttl: 1ms}
`

// claimKeyed triggers workflow with day d and claims its task.
func (f *fixture) claimKeyed(workflow, worker string) store.ClaimedTask {
	f.t.Helper()
	return f.claim(f.taskID(f.trigger(workflow, `{"day":"d"}`), "report"), worker, time.Minute)
}

// reuse claims key for c, insists it is Done, and finishes c with the
// reused result the way the worker does.
func (f *fixture) reuse(c store.ClaimedTask, key string) store.KeyClaim {
	f.t.Helper()
	kc, err := f.s.ClaimIdempotencyKey(f.ctx, key, c.ID, c.FencingToken)
	if err != nil || !kc.Done {
		f.t.Fatalf("key claim of %s: %+v %v; want Done", c.ID, kc, err)
	}
	from := kc.From
	f.finish(c, store.FinishRequest{Outcome: store.OutcomeSucceeded, Result: kc.Result, IdempotencyKey: key, ReusedFrom: &from})
	return kc
}

// TestAReusedResultNamesItsSource: a task run that reuses the result
// recorded for its idempotency key is told which task run (of which run)
// recorded it; its finish stores that (run show, task show: reused_from)
// and says so in its history; the owner itself shows no reuse.
func TestAReusedResultNamesItsSource(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(keyed)
	const key = "k-d"
	owner := f.claimKeyed("keyed", "w1")
	if kc, err := f.s.ClaimIdempotencyKey(f.ctx, key, owner.ID, owner.FencingToken); err != nil || !kc.Owned {
		t.Fatalf("owner's key claim: %+v %v", kc, err)
	}
	f.finish(owner, store.FinishRequest{Outcome: store.OutcomeSucceeded, Result: json.RawMessage(`{"rows":1}`), IdempotencyKey: key})
	reuser := f.claimKeyed("keyed", "w2")
	kc := f.reuse(reuser, key)
	want := store.KeySource{TaskRunID: owner.ID, RunID: owner.RunID}
	if kc.From != want {
		t.Fatalf("key claim names %+v as the source, want %+v", kc.From, want)
	}
	got := f.task(reuser.ID)
	if got.ReusedFrom == nil || *got.ReusedFrom != want {
		t.Fatalf("task show: reused_from %+v, want %+v", got.ReusedFrom, want)
	}
	if string(got.Result) != `{"rows": 1}` {
		t.Fatalf("reused result %s", got.Result)
	}
	note := fmt.Sprintf("result reused from task run %s of run %s (idempotency key %s)", owner.ID, owner.RunID, key)
	last := got.Events[len(got.Events)-1]
	if last.ToState != "SUCCEEDED" || last.Reason == nil || *last.Reason != note {
		t.Fatalf("history ends with %+v (reason %v), want SUCCEEDED with %q", last, last.Reason, note)
	}
	run := f.run(reuser.RunID)
	js, err := json.Marshal(run)
	if err != nil {
		t.Fatal(err)
	}
	if wantJS := fmt.Sprintf(`"reused_from":{"task_run_id":"%s","run_id":"%s"}`, owner.ID, owner.RunID); !strings.Contains(string(js), wantJS) {
		t.Fatalf("run show JSON %s does not contain %s", js, wantJS)
	}
	if o := f.task(owner.ID); o.ReusedFrom != nil {
		t.Fatalf("the owner shows a reuse: %+v", o.ReusedFrom)
	}
	if js, _ := json.Marshal(f.run(owner.RunID)); !strings.Contains(string(js), `"reused_from":null`) {
		t.Fatalf("the owner's run JSON %s lacks \"reused_from\":null", js)
	}
}

// TestAnExpiredResultIsNotReusedAndTheHandlerRunsAgain: a task with an
// idempotency_ttl reuses a recorded result only while it is younger than
// the TTL (database clock). Past it the key is taken over: that attempt
// owns the key (runs its handler), a claimer without a TTL waits for it
// meanwhile and then reuses the new result.
func TestAnExpiredResultIsNotReusedAndTheHandlerRunsAgain(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(keyed)
	f.apply(keyedTTL)
	f.apply(keyedMS)
	const key = "k-d"
	first := f.claimKeyed("keyed", "w1")
	if kc, err := f.s.ClaimIdempotencyKey(f.ctx, key, first.ID, first.FencingToken); err != nil || !kc.Owned {
		t.Fatalf("first owner: %+v %v", kc, err)
	}
	f.finish(first, store.FinishRequest{Outcome: store.OutcomeSucceeded, Result: json.RawMessage(`"first"`), IdempotencyKey: key})
	// Within an hour's TTL the result is reused.
	if kc := f.reuse(f.claimKeyed("keyed-hour", "w2"), key); string(kc.Result) != `"first"` {
		t.Fatalf("reused %s, want \"first\"", kc.Result)
	}
	f.waitDB("the result to be older than a millisecond", `SELECT completed_at + interval '2 milliseconds' < now() FROM idempotency_keys WHERE key = $1`, key)
	fresh := f.claimKeyed("keyed-ms", "w3")
	if kc, err := f.s.ClaimIdempotencyKey(f.ctx, key, fresh.ID, fresh.FencingToken); err != nil || !kc.Owned {
		t.Fatalf("claim past the TTL: %+v %v; want Owned (the handler runs again)", kc, err)
	}
	waiter := f.claimKeyed("keyed", "w4")
	if kc, err := f.s.ClaimIdempotencyKey(f.ctx, key, waiter.ID, waiter.FencingToken); err != nil || kc.Owned || kc.Done {
		t.Fatalf("claim while the new owner runs: %+v %v; want wait", kc, err)
	}
	f.finish(fresh, store.FinishRequest{Outcome: store.OutcomeSucceeded, Result: json.RawMessage(`"second"`), IdempotencyKey: key})
	kc := f.reuse(waiter, key)
	if string(kc.Result) != `"second"` || kc.From.TaskRunID != fresh.ID {
		t.Fatalf("after the new owner finished: result %s from %+v; want \"second\" from %s", kc.Result, kc.From, fresh.ID)
	}
	if d := f.task(first.ID); string(d.Result) != `"first"` {
		t.Fatalf("the first owner's own result is now %s", d.Result)
	}
}

// TestForgetKeyIsRefusedWhileTheOwnerRuns: an operator releases a key by
// naming any task run that carries it. While the key's owner is RUNNING it
// is refused (whichever task run is named) and nothing changes; once the
// owner finished, the key is released, audited with the forgotten result,
// and the next attempt owns it and runs its handler.
func TestForgetKeyIsRefusedWhileTheOwnerRuns(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(keyed)
	f.apply(oneTask)
	const key = "k-d"
	owner := f.claimKeyed("keyed", "w1")
	if kc, err := f.s.ClaimIdempotencyKey(f.ctx, key, owner.ID, owner.FencingToken); err != nil || !kc.Owned {
		t.Fatalf("owner: %+v %v", kc, err)
	}
	waiter := f.claimKeyed("keyed", "w2")
	for _, named := range []uuid.UUID{owner.ID, waiter.ID} {
		if _, err := f.s.ForgetIdempotencyKey(f.ctx, named, "cli:ann@host", "bug fixed"); !errors.Is(err, store.ErrKeyOwnerRunning) || !strings.Contains(err.Error(), owner.ID.String()) {
			t.Fatalf("forget via %s while the owner runs: %v; want ErrKeyOwnerRunning naming %s", named, err, owner.ID)
		}
	}
	if kc, err := f.s.ClaimIdempotencyKey(f.ctx, key, waiter.ID, waiter.FencingToken); err != nil || kc.Owned || kc.Done {
		t.Fatalf("waiter after the refused forgets: %+v %v; want wait", kc, err)
	}
	if n := f.count(`SELECT count(*) FROM idempotency_key_events`); n != 0 {
		t.Fatalf("%d audit rows written by refused forgets", n)
	}
	f.finish(owner, store.FinishRequest{Outcome: store.OutcomeSucceeded, Result: json.RawMessage(`"old"`), IdempotencyKey: key})
	f.reuse(waiter, key)
	got, err := f.s.ForgetIdempotencyKey(f.ctx, waiter.ID, "cli:ann@host", "bug fixed")
	if err != nil {
		t.Fatalf("forget after the owner finished: %v", err)
	}
	if want := (store.ForgottenKey{Key: key, Owner: store.KeySource{TaskRunID: owner.ID, RunID: owner.RunID}, Completed: true}); got != want {
		t.Fatalf("forgot %+v, want %+v", got, want)
	}
	if n := f.count(`SELECT count(*) FROM idempotency_key_events WHERE key = $1 AND action = 'forget' AND actor = 'cli:ann@host' AND reason = 'bug fixed'
	                   AND task_run_id = $2 AND owner_task_run_id = $3 AND result = '"old"'::jsonb AND completed_at IS NOT NULL`, key, waiter.ID, owner.ID); n != 1 {
		t.Fatalf("%d matching audit rows, want 1", n)
	}
	next := f.claimKeyed("keyed", "w3")
	if kc, err := f.s.ClaimIdempotencyKey(f.ctx, key, next.ID, next.FencingToken); err != nil || !kc.Owned {
		t.Fatalf("claim after the forget: %+v %v; want Owned", kc, err)
	}
	for _, tc := range []struct {
		name string
		id   uuid.UUID
		want error
	}{
		{"unknown task", uuid.New(), store.ErrNotFound},
		{"task without a key", f.taskID(f.trigger("one", ""), "a"), store.ErrNoIdempotencyKey},
		{"key already forgotten, now owned by a running attempt", owner.ID, store.ErrKeyOwnerRunning},
	} {
		if _, err := f.s.ForgetIdempotencyKey(f.ctx, tc.id, "cli:ann@host", "again"); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v; want %v", tc.name, err, tc.want)
		}
	}
	f.finish(next, store.FinishRequest{Outcome: store.OutcomeFailed, Error: "boom", RetryDelay: time.Hour, IdempotencyKey: key})
	if _, err := f.s.ForgetIdempotencyKey(f.ctx, next.ID, "cli:ann@host", "failed owner"); err != nil {
		t.Fatalf("forget of a failed owner's key: %v", err)
	}
	if _, err := f.s.ForgetIdempotencyKey(f.ctx, next.ID, "cli:ann@host", "twice"); !errors.Is(err, store.ErrNoIdempotencyKey) {
		t.Fatalf("forget of a forgotten key: %v; want ErrNoIdempotencyKey", err)
	}
}

// TestForgetKeyWaitingBehindAKeyClaimSeesTheNewOwnerRunning forces the
// interleaving in which a forget's snapshot predates the owner's task
// claim: A's takeover of a failed owner's key is held uncommitted, the
// forget starts and waits for the key's row, A's task claim commits, then
// A's key claim. The forget must see A RUNNING and be refused; had it
// deleted the key, B would take it and run the handler alongside A.
func TestForgetKeyWaitingBehindAKeyClaimSeesTheNewOwnerRunning(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(keyed)
	const key = "k-d"
	old := f.claimKeyed("keyed", "w0")
	if kc, err := f.s.ClaimIdempotencyKey(f.ctx, key, old.ID, old.FencingToken); err != nil || !kc.Owned {
		t.Fatalf("first owner: %+v %v", kc, err)
	}
	f.finish(old, store.FinishRequest{Outcome: store.OutcomeFailed, Error: "boom", RetryDelay: time.Hour, IdempotencyKey: key})
	a := f.taskID(f.trigger("keyed", `{"day":"d"}`), "report")
	b := f.claimKeyed("keyed", "wb")
	_, tokA := f.state(a)
	hold, err := f.db.BeginTx(f.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hold.Rollback() })
	if _, err := hold.ExecContext(f.ctx, `UPDATE idempotency_keys SET task_run_id = $2, fencing_token = $3 WHERE key = $1`, key, a, tokA+1); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := f.s.ForgetIdempotencyKey(f.ctx, old.ID, "cli:ann@host", "race")
		got <- err
	}()
	f.waitBlocked(1)
	ca := f.claim(a, "wa", time.Minute)
	if ca.FencingToken != tokA+1 {
		t.Fatalf("A claimed with token %d, the held key claim wrote %d", ca.FencingToken, tokA+1)
	}
	if err := hold.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; !errors.Is(err, store.ErrKeyOwnerRunning) {
		t.Fatalf("forget behind A's key claim: %v; want ErrKeyOwnerRunning (A runs with the key)", err)
	}
	if kc, err := f.s.ClaimIdempotencyKey(f.ctx, key, b.ID, b.FencingToken); err != nil || kc.Owned || kc.Done {
		t.Fatalf("B after the forget: %+v %v; want wait (A owns the key)", kc, err)
	}
}

// TestForgetKeyRacingKeyClaimsNeverMakesTwoOwners: in each round a failed
// owner's key is forgotten while 8 live attempts claim it, all at once,
// each claiming twice. No two distinct attempts may ever be told they own
// the key (none finishes, so an owner stays live for the whole round).
func TestForgetKeyRacingKeyClaimsNeverMakesTwoOwners(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(keyed)
	const claimers = 8
	rounds := 40
	if testing.Short() {
		rounds = 10
	}
	for round := range rounds {
		day := fmt.Sprintf("r%d", round)
		key := "k-" + day
		claimKey := func(id uuid.UUID, tok int64) (store.KeyClaim, error) {
			return f.s.ClaimIdempotencyKey(f.ctx, key, id, tok)
		}
		oc := f.claim(f.taskID(f.trigger("keyed", fmt.Sprintf(`{"day":%q}`, day)), "report"), "w0", time.Minute)
		if kc, err := claimKey(oc.ID, oc.FencingToken); err != nil || !kc.Owned {
			t.Fatalf("round %d: first owner %+v %v", round, kc, err)
		}
		f.finish(oc, store.FinishRequest{Outcome: store.OutcomeFailed, Error: "boom", RetryDelay: time.Hour, IdempotencyKey: key})
		cs := make([]store.ClaimedTask, claimers)
		for i := range cs {
			cs[i] = f.claim(f.taskID(f.trigger("keyed", fmt.Sprintf(`{"day":%q}`, day)), "report"), fmt.Sprintf("w%d", i+1), time.Minute)
		}
		var mu sync.Mutex
		owners := map[uuid.UUID]bool{}
		together(claimers+1, func(i int) {
			if i == claimers {
				_, err := f.s.ForgetIdempotencyKey(f.ctx, oc.ID, "test", "race")
				if err != nil && !errors.Is(err, store.ErrKeyOwnerRunning) && !errors.Is(err, store.ErrNoIdempotencyKey) {
					t.Errorf("round %d: forget: %v", round, err)
				}
				return
			}
			for range 2 {
				kc, err := claimKey(cs[i].ID, cs[i].FencingToken)
				if err != nil {
					t.Errorf("round %d: key claim %d: %v", round, i, err)
					return
				}
				if kc.Owned {
					mu.Lock()
					owners[cs[i].ID] = true
					mu.Unlock()
				}
			}
		})
		if len(owners) > 1 {
			t.Fatalf("round %d: %d attempts own the key at once, want at most 1", round, len(owners))
		}
	}
}

// TestTriggerCopiesTheIdempotencyTTLOntoTheTaskRun: the TTL a task run is
// judged by is the one its workflow version declared when it was
// triggered.
func TestTriggerCopiesTheIdempotencyTTLOntoTheTaskRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(keyed)
	f.apply(keyedTTL)
	for wf, want := range map[string]int{"keyed": -1, "keyed-hour": 3600000} {
		id := f.taskID(f.trigger(wf, `{"day":"d"}`), "report")
		if got := f.count(`SELECT coalesce(idempotency_ttl_ms, -1) FROM task_runs WHERE id = $1`, id); got != want {
			t.Errorf("%s: idempotency_ttl_ms %d, want %d", wf, got, want)
		}
	}
	if _, err := core.ParseDefinition([]byte(keyedMS)); err != nil {
		t.Fatalf("a 1ms TTL: %v", err)
	}
}
