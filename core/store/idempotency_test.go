package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

const keyed = `
name: keyed
tasks:
  - {name: report, handler: noop, idempotency_key: "k-{{ .Params.day }}"}
`

// claimedKeyedTasks triggers n runs of keyed with the same day and claims
// each run's task.
func (f *fixture) claimedKeyedTasks(n int) []store.ClaimedTask {
	f.t.Helper()
	f.apply(keyed)
	out := make([]store.ClaimedTask, n)
	for i := range out {
		runID := f.trigger("keyed", `{"day":"2024-01-01"}`)
		out[i] = f.claim(f.taskID(runID, "report"), "w", time.Minute)
		if out[i].IdempotencyKey.String != "k-2024-01-01" {
			f.t.Fatalf("rendered key %v", out[i].IdempotencyKey)
		}
	}
	return out
}

func TestExactlyOneTaskRunOwnsAnIdempotencyKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cs := f.claimedKeyedTasks(20)
	const key = "k-2024-01-01"
	claims := make([]store.KeyClaim, len(cs))
	together(len(cs), func(i int) {
		kc, err := f.s.ClaimIdempotencyKey(f.ctx, key, cs[i].ID, cs[i].FencingToken)
		if err != nil {
			t.Errorf("claim key %d: %v", i, err)
		}
		claims[i] = kc
	})
	owner := -1
	for i, kc := range claims {
		switch {
		case kc.Owned && owner >= 0:
			t.Fatalf("task runs %d and %d both own the key", owner, i)
		case kc.Owned:
			owner = i
		case kc.Done:
			t.Fatalf("claim %d reports the key done before anyone finished", i)
		}
	}
	if owner < 0 {
		t.Fatal("nobody owns the key")
	}
	// The owner finishes; every other attempt reuses its result.
	f.finish(cs[owner], store.FinishRequest{Outcome: store.OutcomeSucceeded, Result: json.RawMessage(`{"rows":99}`), IdempotencyKey: key})
	var mu sync.Mutex
	done := 0
	together(len(cs), func(i int) {
		if i == owner {
			return
		}
		kc, err := f.s.ClaimIdempotencyKey(f.ctx, key, cs[i].ID, cs[i].FencingToken)
		if err != nil {
			t.Errorf("claim key %d: %v", i, err)
			return
		}
		if kc.Owned || !kc.Done || string(kc.Result) != `{"rows": 99}` {
			t.Errorf("claim %d after the owner finished: %+v (result %s)", i, kc, kc.Result)
			return
		}
		mu.Lock()
		done++
		mu.Unlock()
	})
	if done != len(cs)-1 {
		t.Fatalf("%d attempts reused the result, want %d", done, len(cs)-1)
	}
}

func TestAFailedOwnerReleasesTheIdempotencyKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cs := f.claimedKeyedTasks(3)
	const key = "k-2024-01-01"
	first, err := f.s.ClaimIdempotencyKey(f.ctx, key, cs[0].ID, cs[0].FencingToken)
	if err != nil || !first.Owned {
		t.Fatalf("first claim: %+v %v", first, err)
	}
	if kc, err := f.s.ClaimIdempotencyKey(f.ctx, key, cs[1].ID, cs[1].FencingToken); err != nil || kc.Owned || kc.Done {
		t.Fatalf("claim while the owner runs: %+v %v; want wait", kc, err)
	}
	f.finish(cs[0], store.FinishRequest{Outcome: store.OutcomeFailed, Error: "boom", RetryDelay: time.Hour, IdempotencyKey: key})
	kc, err := f.s.ClaimIdempotencyKey(f.ctx, key, cs[1].ID, cs[1].FencingToken)
	if err != nil || !kc.Owned {
		t.Fatalf("claim after the owner failed: %+v %v; want Owned", kc, err)
	}
	if kc, err := f.s.ClaimIdempotencyKey(f.ctx, key, cs[2].ID, cs[2].FencingToken); err != nil || kc.Owned || kc.Done {
		t.Fatalf("third claim: %+v %v; want wait", kc, err)
	}
	// The first owner's late success (stale token) records nothing.
	if _, ok, _ := f.s.Finish(f.ctx, store.FinishRequest{ID: cs[0].ID, Token: cs[0].FencingToken, Outcome: store.OutcomeSucceeded, Result: json.RawMessage(`"stale"`), IdempotencyKey: key}); ok {
		t.Fatal("a stale finish was recorded")
	}
	f.finish(cs[1], store.FinishRequest{Outcome: store.OutcomeSucceeded, Result: json.RawMessage(`"fresh"`), IdempotencyKey: key})
	kc, err = f.s.ClaimIdempotencyKey(f.ctx, key, cs[2].ID, cs[2].FencingToken)
	if err != nil || !kc.Done || string(kc.Result) != `"fresh"` {
		t.Fatalf("claim after the second owner succeeded: %+v %v", kc, err)
	}
}

func TestAReapedOwnerReleasesTheIdempotencyKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(keyed)
	r1 := f.trigger("keyed", `{"day":"d"}`)
	r2 := f.trigger("keyed", `{"day":"d"}`)
	c1 := f.claim(f.taskID(r1, "report"), "w1", time.Millisecond)
	c2 := f.claim(f.taskID(r2, "report"), "w2", time.Minute)
	if kc, err := f.s.ClaimIdempotencyKey(f.ctx, "k-d", c1.ID, c1.FencingToken); err != nil || !kc.Owned {
		t.Fatalf("%+v %v", kc, err)
	}
	f.waitLeaseExpired(c1.ID)
	if n, err := f.s.ReapExpired(f.ctx, 10, zeroBackoff, "reaper"); n != 1 || err != nil {
		t.Fatalf("reap: %d %v", n, err)
	}
	if kc, err := f.s.ClaimIdempotencyKey(f.ctx, "k-d", c2.ID, c2.FencingToken); err != nil || !kc.Owned {
		t.Fatalf("claim after the owner's lease was reaped: %+v %v", kc, err)
	}
	f.wantState(c1.ID, core.TaskRetrying)
}

// TestIdempotencyKeyRendersNumbersVerbatim: Trigger decodes the params
// with json.Unmarshal into map[string]any, so a number becomes a float64 and
// the template prints it in %v form: {"day": 20240101} gives the key
// "k-2.0240101e+07", and two ids that differ past float64's precision
// share one key (and so one result).
func TestIdempotencyKeyRendersNumbersVerbatim(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(keyed)
	for params, want := range map[string]string{
		`{"day": 20240101}`:         "k-20240101",
		`{"day": 9007199254740993}`: "k-9007199254740993",
	} {
		runID := f.trigger("keyed", params)
		d := f.task(f.taskID(runID, "report"))
		got := "<none>"
		if d.IdempotencyKey != nil {
			got = *d.IdempotencyKey
		}
		if got != want {
			t.Errorf("params %s: key %q, want %q", params, got, want)
		}
	}
}

// TestLongIdempotencyKeysAreComparedWhole: two rendered keys longer than
// the stored bound that differ only past it are two keys (each owner runs
// its handler); the same long key is one key (its result is reused). The
// stored and claimed form is bounded and starts with the key itself.
func TestLongIdempotencyKeysAreComparedWhole(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(keyed)
	long := strings.Repeat("x", 3000)
	claims := make([]store.ClaimedTask, 3)
	for i, day := range []string{long + "a", long + "b", long + "a"} {
		runID := f.trigger("keyed", fmt.Sprintf(`{"day":%q}`, day))
		claims[i] = f.claim(f.taskID(runID, "report"), "w", time.Minute)
	}
	key := func(i int) string { return claims[i].IdempotencyKey.String }
	for i := range claims {
		if k := key(i); len(k) > 1200 || !strings.HasPrefix(k, "k-xxxxxxxx") {
			t.Fatalf("stored key %d is %d bytes (%.40q...), want a bounded form starting with the key", i, len(k), k)
		}
		if d := f.task(claims[i].ID); d.IdempotencyKey == nil || *d.IdempotencyKey != key(i) {
			t.Fatalf("task %d shows key %v, claimed %q", i, d.IdempotencyKey, key(i))
		}
	}
	if key(0) == key(1) {
		t.Fatalf("keys differing after byte 3002 are stored equal: %.60q...", key(0))
	}
	if key(0) != key(2) {
		t.Fatalf("equal keys are stored differently: %.60q... and %.60q...", key(0), key(2))
	}
	for i := range 2 {
		if kc, err := f.s.ClaimIdempotencyKey(f.ctx, key(i), claims[i].ID, claims[i].FencingToken); err != nil || !kc.Owned {
			t.Fatalf("claim of key %d: %+v %v; want Owned (a different key)", i, kc, err)
		}
	}
	f.finish(claims[0], store.FinishRequest{Outcome: store.OutcomeSucceeded, Result: json.RawMessage(`"a"`), IdempotencyKey: key(0)})
	f.finish(claims[1], store.FinishRequest{Outcome: store.OutcomeSucceeded, Result: json.RawMessage(`"b"`), IdempotencyKey: key(1)})
	if kc, err := f.s.ClaimIdempotencyKey(f.ctx, key(2), claims[2].ID, claims[2].FencingToken); err != nil || !kc.Done || string(kc.Result) != `"a"` {
		t.Fatalf("claim of the repeated key: %+v (result %s) %v; want Done with \"a\"", kc, kc.Result, err)
	}
}

// TestIdempotencyKeysThatCannotBeStoredAsTheyAreAreRefused: a rendered key
// with a NUL character or invalid UTF-8 is refused at trigger (replacing
// the bytes would make different keys equal) and nothing is written.
func TestIdempotencyKeysThatCannotBeStoredAsTheyAreAreRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, tc := range []struct{ name, tmpl, params, want string }{
		{"nul", `k-{{ printf "%c" 0 }}{{ .Params.day }}`, `{"day": "d"}`, "NUL"},
		{"cut", `k-{{ slice .Params.day 0 1 }}`, `{"day": "éa"}`, "UTF-8"},
		{"crlf", `k-{{ .Params.day }}`, `{"day": "d\r\nX-Injected: 1"}`, "control character"},
	} {
		f.apply(fmt.Sprintf("name: %s\ntasks:\n  - {name: t, handler: noop, idempotency_key: '%s'}\n", tc.name, tc.tmpl))
		_, err := f.s.Trigger(f.ctx, store.TriggerRequest{Workflow: tc.name, Params: json.RawMessage(tc.params), Actor: "test"})
		if !errors.Is(err, core.ErrBadParams) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("trigger of %s: %v; want core.ErrBadParams naming %s", tc.name, err, tc.want)
		}
	}
	if n := f.count(`SELECT count(*) FROM workflow_runs`); n != 0 {
		t.Fatalf("%d runs written by refused triggers", n)
	}
}

// TestAKeyClaimWaitingBehindTheOwnersKeyClaimSeesTheOwnerRunning forces the
// interleaving in which a key claim's snapshot predates the owner's task
// claim: attempt B asks for the key while the owner A's key claim is held
// uncommitted (a transaction that writes exactly what A's claim writes:
// the row for A with the token A's Claim is about to give it), so B's
// statement starts, then waits for that row; A's Claim commits; then A's
// key claim commits. B must see A RUNNING and wait, not take the key: two
// owners would run the handler twice, concurrently. Both shapes: a free key
// (B waits on A's insert) and a key A takes over from a failed owner (B
// waits on A's update).
func TestAKeyClaimWaitingBehindTheOwnersKeyClaimSeesTheOwnerRunning(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		takeOver bool
	}{
		{"free key", false},
		{"key taken over from a failed owner", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.apply(keyed)
			const key = "k-d"
			var old store.ClaimedTask
			if tc.takeOver {
				old = f.claim(f.taskID(f.trigger("keyed", `{"day":"d"}`), "report"), "w0", time.Minute)
				if kc, err := f.s.ClaimIdempotencyKey(f.ctx, key, old.ID, old.FencingToken); err != nil || !kc.Owned {
					t.Fatalf("first owner's claim: %+v %v", kc, err)
				}
				f.finish(old, store.FinishRequest{Outcome: store.OutcomeFailed, Error: "boom", RetryDelay: time.Hour, IdempotencyKey: key})
			}
			a := f.taskID(f.trigger("keyed", `{"day":"d"}`), "report")
			b := f.claim(f.taskID(f.trigger("keyed", `{"day":"d"}`), "report"), "wb", time.Minute)
			_, tokA, err := f.s.TaskStateOf(f.ctx, a)
			if err != nil {
				t.Fatal(err)
			}
			hold, err := f.db.BeginTx(f.ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { hold.Rollback() })
			ownerWrite := `INSERT INTO idempotency_keys (key, task_run_id, fencing_token) VALUES ($1, $2, $3)`
			if tc.takeOver {
				ownerWrite = `UPDATE idempotency_keys SET task_run_id = $2, fencing_token = $3 WHERE key = $1`
			}
			if _, err := hold.ExecContext(f.ctx, ownerWrite, key, a, tokA+1); err != nil {
				t.Fatal(err)
			}
			type out struct {
				kc  store.KeyClaim
				err error
			}
			got := make(chan out, 1)
			go func() {
				kc, err := f.s.ClaimIdempotencyKey(f.ctx, key, b.ID, b.FencingToken)
				got <- out{kc, err}
			}()
			f.waitBlocked(1)
			ca := f.claim(a, "wa", time.Minute)
			if ca.FencingToken != tokA+1 {
				t.Fatalf("A claimed with token %d, the held key claim wrote %d", ca.FencingToken, tokA+1)
			}
			if err := hold.Commit(); err != nil {
				t.Fatal(err)
			}
			o := <-got
			if o.err != nil {
				t.Fatalf("B's key claim: %v", o.err)
			}
			if o.kc.Owned || o.kc.Done {
				t.Fatalf("B's key claim while A runs with the key: %+v; want wait (A and B would both run the handler)", o.kc)
			}
			var owner string
			if err := f.db.QueryRowContext(f.ctx, `SELECT task_run_id::text FROM idempotency_keys WHERE key = $1`, key).Scan(&owner); err != nil || owner != a.String() {
				t.Fatalf("key owner %s %v, want A %s", owner, err, a)
			}
			// A is the owner: asking again says so; B still waits.
			if kc, err := f.s.ClaimIdempotencyKey(f.ctx, key, ca.ID, ca.FencingToken); err != nil || !kc.Owned {
				t.Fatalf("A asking again: %+v %v; want Owned", kc, err)
			}
			if kc, err := f.s.ClaimIdempotencyKey(f.ctx, key, b.ID, b.FencingToken); err != nil || kc.Owned || kc.Done {
				t.Fatalf("B asking again: %+v %v; want wait", kc, err)
			}
		})
	}
}

// TestKeyClaimsRacingTaskClaimsNeverMakeTwoOwners: in each round 16 READY
// attempts sharing a fresh key are claimed and immediately claim the key,
// all at once, so key claims interleave with other attempts' task claims.
// Exactly one attempt may own the key per round.
func TestKeyClaimsRacingTaskClaimsNeverMakeTwoOwners(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(keyed)
	const attempts = 16
	rounds := 200
	if testing.Short() {
		rounds = 20
	}
	for round := range rounds {
		day := fmt.Sprintf("r%d", round)
		ids := make([]uuid.UUID, attempts)
		toks := make([]int64, attempts)
		together(attempts, func(i int) {
			res, err := f.s.Trigger(f.ctx, store.TriggerRequest{Workflow: "keyed", Params: json.RawMessage(fmt.Sprintf(`{"day":%q}`, day)), Actor: "test"})
			if err != nil {
				t.Errorf("trigger %d: %v", i, err)
				return
			}
			run, err := f.s.GetRun(f.ctx, res.RunID)
			if err != nil || len(run.Tasks) != 1 {
				t.Errorf("run %d: %+v %v", i, run, err)
				return
			}
			ids[i], toks[i] = run.Tasks[0].ID, run.Tasks[0].FencingToken
		})
		if t.Failed() {
			t.FailNow()
		}
		var owners atomic.Int32
		together(attempts, func(i int) {
			c, ok, err := f.s.Claim(f.ctx, ids[i], toks[i], fmt.Sprintf("w%d", i), time.Minute)
			if err != nil || !ok {
				t.Errorf("claim %d: %v %v", i, ok, err)
				return
			}
			kc, err := f.s.ClaimIdempotencyKey(f.ctx, "k-"+day, c.ID, c.FencingToken)
			if err != nil {
				t.Errorf("key claim %d: %v", i, err)
			}
			if kc.Owned {
				owners.Add(1)
			}
		})
		if n := owners.Load(); n != 1 {
			t.Fatalf("round %d: %d attempts own the key, want exactly 1", round, n)
		}
	}
}

// TestRunIdempotencyKeysAreComparedWhole: a trigger's idempotency key is
// stored whole and compared whole up to its limit of
// core.MaxIdempotencyKeyBytes; keys differing only in their last byte are
// two runs, the same key returns the existing run, and a longer key is
// refused (not cut) with nothing written.
func TestRunIdempotencyKeysAreComparedWhole(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneTask)
	base := strings.Repeat("r", core.MaxIdempotencyKeyBytes-1)
	trig := func(key string) (store.TriggerResult, error) {
		return f.s.Trigger(f.ctx, store.TriggerRequest{Workflow: "one", IdempotencyKey: key, Actor: "test"})
	}
	a, err := trig(base + "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := trig(base + "b")
	if err != nil || b.Existing || b.RunID == a.RunID {
		t.Fatalf("a key differing in its last byte: %+v %v; want a new run", b, err)
	}
	if again, err := trig(base + "a"); err != nil || !again.Existing || again.RunID != a.RunID {
		t.Fatalf("the same key again: %+v %v; want the existing run %s", again, err, a.RunID)
	}
	if _, err := trig(base + "aa"); !errors.Is(err, core.ErrBadParams) {
		t.Fatalf("a key of %d bytes: %v; want core.ErrBadParams", core.MaxIdempotencyKeyBytes+1, err)
	}
	if n := f.count(`SELECT count(*) FROM workflow_runs`); n != 2 {
		t.Fatalf("%d runs, want 2", n)
	}
}

// TestAReapedAttemptNeverTakesAnIdempotencyKey: an attempt whose lease was
// reaped while it waited for the key (its token moved on) must not start
// the handler, neither for a free key nor for one whose owner failed: the
// retry of its task may be running it already.
func TestAReapedAttemptNeverTakesAnIdempotencyKey(t *testing.T) {
	t.Parallel()
	for _, ownerFailed := range []bool{false, true} {
		t.Run(fmt.Sprintf("owner failed %v", ownerFailed), func(t *testing.T) {
			f := newFixture(t)
			f.apply(keyed)
			const key = "k-d"
			if ownerFailed {
				o := f.claim(f.taskID(f.trigger("keyed", `{"day":"d"}`), "report"), "w0", time.Minute)
				if kc, err := f.s.ClaimIdempotencyKey(f.ctx, key, o.ID, o.FencingToken); err != nil || !kc.Owned {
					t.Fatalf("first owner: %+v %v", kc, err)
				}
				f.finish(o, store.FinishRequest{Outcome: store.OutcomeFailed, Error: "boom", RetryDelay: time.Hour, IdempotencyKey: key})
			}
			stale := f.claim(f.taskID(f.trigger("keyed", `{"day":"d"}`), "report"), "w1", time.Millisecond)
			f.waitLeaseExpired(stale.ID)
			if n, err := f.s.ReapExpired(f.ctx, 10, zeroBackoff, "reaper"); n != 1 || err != nil {
				t.Fatalf("reap: %d %v", n, err)
			}
			if kc, err := f.s.ClaimIdempotencyKey(f.ctx, key, stale.ID, stale.FencingToken); err != nil || kc.Owned || kc.Done {
				t.Fatalf("key claim of a reaped attempt: %+v %v; want wait", kc, err)
			}
			live := f.claim(f.taskID(f.trigger("keyed", `{"day":"d"}`), "report"), "w2", time.Minute)
			if kc, err := f.s.ClaimIdempotencyKey(f.ctx, key, live.ID, live.FencingToken); err != nil || !kc.Owned {
				t.Fatalf("key claim of a live attempt after it: %+v %v; want Owned", kc, err)
			}
		})
	}
}
