package cli_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

const keyedCLI = `
name: keyed
tasks:
  - {name: report, handler: noop, idempotency_key: "k-{{ .Params.day }}"}
`

// keyedTask triggers keyed for day d and claims its task.
func (h *harness) keyedTask() store.ClaimedTask {
	h.t.Helper()
	res, err := h.s.Trigger(h.ctx, store.TriggerRequest{Workflow: "keyed", Params: json.RawMessage(`{"day":"d"}`), Actor: "test"})
	if err != nil {
		h.t.Fatal(err)
	}
	return h.claim(h.taskID(res.RunID, "report"), "w-test")
}

// claimKey claims key k-d for c and returns the outcome.
func (h *harness) claimKey(c store.ClaimedTask) store.KeyClaim {
	h.t.Helper()
	kc, err := h.s.ClaimIdempotencyKey(h.ctx, "k-d", c.ID, c.FencingToken)
	if err != nil {
		h.t.Fatal(err)
	}
	return kc
}

func (h *harness) keyEvents() int {
	h.t.Helper()
	var n int
	if err := h.db.QueryRowContext(h.ctx, `SELECT count(*) FROM idempotency_key_events`).Scan(&n); err != nil {
		h.t.Fatal(err)
	}
	return n
}

// TestForgetKeyBadInputIsRefusedAndWritesNothing: every malformed call of
// `task forget-key` exits 2 and every refused one exits 1 (unknown task, a
// task without a key, a key whose owner is RUNNING, named through the
// owner or a task waiting for it), with a message naming the problem,
// nothing on standard output and no row changed or audited. A bad
// idempotency_ttl is refused at apply.
func TestForgetKeyBadInputIsRefusedAndWritesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	_, dead := h.deadRun()
	h.apply(keyedCLI)
	owner := h.keyedTask()
	if kc := h.claimKey(owner); !kc.Owned {
		t.Fatalf("owner's key claim: %+v", kc)
	}
	waiter := h.keyedTask()
	fk := func(args ...string) []string { return append([]string{"task", "forget-key"}, args...) }
	wf := func(ttl string) string {
		return fmt.Sprintf("name: w\ntasks:\n  - {name: a, handler: noop, idempotency_key: k, idempotency_ttl: %s}\n", ttl)
	}
	before := h.snapshot()
	for _, tc := range []struct {
		name  string
		args  []string
		stdin string
		code  int
		want  []string
	}{
		{"no task id", fk("--reason", "r"), "", 2, []string{"expected exactly one task id"}},
		{"two task ids", fk(owner.ID.String(), waiter.ID.String(), "--reason", "r"), "", 2, []string{"expected exactly one task id"}},
		{"malformed task id", fk("not-a-uuid", "--reason", "r"), "", 2, []string{`"not-a-uuid"`}},
		{"nil task id", fk(uuid.Nil.String(), "--reason", "r"), "", 2, []string{"nil UUID"}},
		{"no reason", fk(owner.ID.String()), "", 2, []string{"--reason is required"}},
		{"blank reason", fk(owner.ID.String(), "--reason", "  "), "", 2, []string{"--reason is required"}},
		{"reason with NUL", fk(owner.ID.String(), "--reason", "a\x00b"), "", 2, []string{"NUL"}},
		{"bad output format", fk(owner.ID.String(), "--reason", "r", "-o", "yaml"), "", 2, []string{"yaml"}},
		{"unknown task", fk(uuid.NewString(), "--reason", "r"), "", 1, []string{"not found"}},
		{"task without a key", fk(dead.String(), "--reason", "r"), "", 1, []string{"has no idempotency key"}},
		{"owner RUNNING, named itself", fk(owner.ID.String(), "--reason", "r"), "", 1, []string{"owner is RUNNING", owner.ID.String()}},
		{"owner RUNNING, named through a waiter", fk(waiter.ID.String(), "--reason", "r", "-o", "json"), "", 1, []string{"owner is RUNNING", owner.ID.String()}},
		{"zero idempotency_ttl", []string{"workflow", "apply", "-f", "-"}, wf("0s"), 2, []string{"idempotency_ttl must be positive"}},
		{"idempotency_ttl over the limit", []string{"workflow", "apply", "-f", "-"}, wf("100000h"), 2, []string{"longer than the limit"}},
		{"idempotency_ttl without a key", []string{"workflow", "apply", "-f", "-"}, "name: w\ntasks:\n  - {name: a, handler: noop, idempotency_ttl: 1h}\n", 2, []string{"needs an idempotency_key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.ffIn(tc.stdin, tc.args...)
			expect(t, r, tc.code, tc.want...)
			if r.stdout != "" {
				t.Fatalf("printed on stdout: %q", r.stdout)
			}
			h.assertUnchanged(before)
			if n := h.keyEvents(); n != 0 {
				t.Fatalf("%d audit rows written", n)
			}
		})
	}
	if kc := h.claimKey(waiter); kc.Owned || kc.Done {
		t.Fatalf("the waiter after the refused forgets: %+v; want wait", kc)
	}
}

// TestReuseIsShownAndForgetKeyReleasesAFinishedOwnersKey: a task run that
// reused another's result says so in task show and run show (table and
// JSON); forget-key named through it releases the key (JSON output names
// the key and its owner; audited), and a second forget finds nothing.
func TestReuseIsShownAndForgetKeyReleasesAFinishedOwnersKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(keyedCLI)
	owner := h.keyedTask()
	if kc := h.claimKey(owner); !kc.Owned {
		t.Fatalf("owner's key claim: %+v", kc)
	}
	h.finishKeyed(owner, nil)
	reuser := h.keyedTask()
	kc := h.claimKey(reuser)
	if !kc.Done {
		t.Fatalf("reuser's key claim: %+v", kc)
	}
	h.finishKeyed(reuser, &kc.From)
	note := fmt.Sprintf("result reused from task run %s of run %s", owner.ID, owner.RunID)
	if out := h.must("task", "show", reuser.ID.String()).stdout; !strings.Contains(out, "  reused    "+note) {
		t.Fatalf("task show lacks %q:\n%s", note, out)
	}
	if out := h.must("run", "show", reuser.RunID.String()).stdout; !strings.Contains(out, "REUSED RESULTS") || !strings.Contains(out, "report: "+note) {
		t.Fatalf("run show lacks the reuse:\n%s", out)
	}
	if out := h.must("task", "show", owner.ID.String()).stdout; strings.Contains(out, "reused") {
		t.Fatalf("the owner's task show mentions a reuse:\n%s", out)
	}
	js := decode[struct {
		ReusedFrom *store.KeySource `json:"reused_from"`
	}](t, h.must("task", "show", reuser.ID.String(), "-o", "json").stdout)
	if js.ReusedFrom == nil || *js.ReusedFrom != (store.KeySource{TaskRunID: owner.ID, RunID: owner.RunID}) {
		t.Fatalf("task show -o json: reused_from %+v", js.ReusedFrom)
	}

	got := decode[struct {
		TaskRunID uuid.UUID       `json:"task_run_id"`
		Forgotten bool            `json:"forgotten"`
		Key       string          `json:"key"`
		Owner     store.KeySource `json:"owner"`
		Completed bool            `json:"completed"`
	}](t, h.must("task", "forget-key", reuser.ID.String(), "--reason", "bug fixed", "-o", "json").stdout)
	if got.TaskRunID != reuser.ID || !got.Forgotten || got.Key != "k-d" || got.Owner.TaskRunID != owner.ID || got.Owner.RunID != owner.RunID || !got.Completed {
		t.Fatalf("forget-key -o json: %+v", got)
	}
	var actor, reason string
	if err := h.db.QueryRowContext(h.ctx, `SELECT actor, reason FROM idempotency_key_events WHERE key = 'k-d' AND task_run_id = $1`, reuser.ID).Scan(&actor, &reason); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(actor, "cli:") || !strings.Contains(actor, "@") || reason != "bug fixed" {
		t.Fatalf("audit: actor %q reason %q", actor, reason)
	}
	r := h.ff("task", "forget-key", owner.ID.String(), "--reason", "again")
	expect(t, r, 1, "not recorded")
	if kc := h.claimKey(h.keyedTask()); !kc.Owned {
		t.Fatalf("a claim after the forget: %+v; want Owned", kc)
	}
}

// finishKeyed finishes c successfully with key k-d, as a reuse of from
// when it is set.
func (h *harness) finishKeyed(c store.ClaimedTask, from *store.KeySource) {
	h.t.Helper()
	_, ok := storetest.Finish(h.t, h.s, store.FinishRequest{ID: c.ID, Token: c.FencingToken, Outcome: store.OutcomeSucceeded,
		Result: json.RawMessage(`{"rows":1}`), WorkerID: "w-test", IdempotencyKey: "k-d", ReusedFrom: from})
	if !ok {
		h.t.Fatalf("finish %s: lease lost", c.ID)
	}
}
