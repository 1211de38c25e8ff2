package cli_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/cli"
	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// harness is a migrated throwaway database, the store on it, and a raw
// connection for the checks ffctl does not expose (row snapshots).
type harness struct {
	t   *testing.T
	ctx context.Context
	url string
	s   *store.Store
	db  *sql.DB
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	s, db, url := storetest.NewWithDB(t)
	return &harness{t: t, ctx: t.Context(), url: url, s: s, db: db}
}

// result is what one ffctl invocation produced.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// ff runs ffctl in-process against the harness's database with empty
// standard input.
func (h *harness) ff(args ...string) result { return h.ffIn("", args...) }

// ffIn runs ffctl with stdin as its standard input.
func (h *harness) ffIn(stdin string, args ...string) result {
	var out, errOut bytes.Buffer
	full := append([]string{"ffctl", "--database-url", h.url}, args...)
	code := cli.Run(h.ctx, full, nil, strings.NewReader(stdin), &out, &errOut)
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// must runs ffctl and fails the test unless it exits 0.
func (h *harness) must(args ...string) result {
	h.t.Helper()
	r := h.ff(args...)
	if r.code != 0 {
		h.t.Fatalf("ffctl %s: %s", strings.Join(args, " "), r)
	}
	return r
}

// expect asserts the exit code and that stderr contains every piece of
// want.
func expect(t *testing.T, r result, code int, want ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit code %d, want %d\n%s", r.code, code, r)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Fatalf("stderr does not contain %q\n%s", w, r)
		}
	}
}

// snapshotTables are the tables whose rows a refused command must not
// change.
var snapshotTables = []string{"workflows", "workflow_runs", "task_runs", "task_events", "outbox", "idempotency_keys", "workflow_pauses", "workflow_pause_events", "events", "event_deliveries"}

// snapshot returns, per table, the row count and a digest of every row, so
// comparing two snapshots shows whether any row was added, removed or
// changed.
func (h *harness) snapshot() map[string]string {
	h.t.Helper()
	out := map[string]string{}
	for _, tbl := range snapshotTables {
		var n int
		var digest string
		q := `SELECT count(*), coalesce(md5(string_agg(x::text, '|' ORDER BY x::text)), '') FROM ` + tbl + ` x`
		if err := h.db.QueryRowContext(h.ctx, q).Scan(&n, &digest); err != nil {
			h.t.Fatalf("snapshot %s: %v", tbl, err)
		}
		out[tbl] = fmt.Sprintf("%d rows %s", n, digest)
	}
	return out
}

func (h *harness) assertUnchanged(before map[string]string) {
	h.t.Helper()
	after := h.snapshot()
	for _, tbl := range snapshotTables {
		if before[tbl] != after[tbl] {
			h.t.Fatalf("table %s changed: before %s, after %s", tbl, before[tbl], after[tbl])
		}
	}
}

// apply stores a workflow definition through ffctl.
func (h *harness) apply(src string) {
	h.t.Helper()
	if r := h.ffIn(src, "workflow", "apply", "-f", "-"); r.code != 0 {
		h.t.Fatalf("workflow apply: %s", r)
	}
}

// trigger starts a run through the store.
func (h *harness) trigger(workflow string) uuid.UUID {
	h.t.Helper()
	return storetest.Trigger(h.t, h.s, workflow, "")
}

func (h *harness) run(id uuid.UUID) store.Run {
	h.t.Helper()
	r, err := h.s.GetRun(h.ctx, id)
	if err != nil {
		h.t.Fatalf("get run %s: %v", id, err)
	}
	return r
}

func (h *harness) taskID(runID uuid.UUID, name string) uuid.UUID {
	h.t.Helper()
	for _, t := range h.run(runID).Tasks {
		if t.Name == name {
			return t.ID
		}
	}
	h.t.Fatalf("run %s has no task %q", runID, name)
	return uuid.Nil
}

func (h *harness) state(id uuid.UUID) core.TaskState {
	h.t.Helper()
	st, _, err := h.s.TaskStateOf(h.ctx, id)
	if err != nil {
		h.t.Fatal(err)
	}
	return st
}

// claim claims a READY task as a worker holding its dispatch would.
func (h *harness) claim(id uuid.UUID, worker string) store.ClaimedTask {
	h.t.Helper()
	st, tok, err := h.s.TaskStateOf(h.ctx, id)
	if err != nil {
		h.t.Fatal(err)
	}
	if st != core.TaskReady {
		h.t.Fatalf("claim %s: task is %s, want READY", id, st)
	}
	c, ok := storetest.Claim(h.t, h.s, id, tok, worker, time.Minute)
	if !ok {
		h.t.Fatalf("claim %s lost", id)
	}
	return c
}

func (h *harness) finish(c store.ClaimedTask, outcome store.Outcome, errText string, permanent bool) core.TaskState {
	h.t.Helper()
	st, ok := storetest.Finish(h.t, h.s, store.FinishRequest{ID: c.ID, Token: c.FencingToken, Outcome: outcome,
		Result: json.RawMessage(`{"ok":true}`), Error: errText, Permanent: permanent, WorkerID: "w-test"})
	if !ok {
		h.t.Fatalf("finish %s: lease lost", c.ID)
	}
	return st
}

// succeed claims and finishes a READY task successfully.
func (h *harness) succeed(id uuid.UUID) {
	h.t.Helper()
	h.finish(h.claim(id, "w-test"), store.OutcomeSucceeded, "", false)
}

// kill claims a READY task and fails it permanently: it ends DEAD.
func (h *harness) kill(id uuid.UUID, why string) {
	h.t.Helper()
	if st := h.finish(h.claim(id, "w-test"), store.OutcomeFailed, why, true); st != core.TaskDead {
		h.t.Fatalf("task %s is %s after a permanent failure, want DEAD", id, st)
	}
}

// advance runs one scheduler pass.
func (h *harness) advance() {
	h.t.Helper()
	if _, err := h.s.Advance(h.ctx, nil, 1000, "test-scheduler"); err != nil {
		h.t.Fatalf("advance: %v", err)
	}
}

const twoStep = `
name: twostep
tasks:
  - {name: a, handler: noop}
  - {name: b, handler: fail, depends_on: [a]}
`

// deadRun returns a settled FAILED run of twoStep whose task b is DEAD.
func (h *harness) deadRun() (runID, b uuid.UUID) {
	h.t.Helper()
	h.apply(twoStep)
	runID = h.trigger("twostep")
	h.succeed(h.taskID(runID, "a"))
	h.advance()
	b = h.taskID(runID, "b")
	h.kill(b, "boom")
	h.advance()
	if r := h.run(runID); r.State != "FAILED" || r.FinishedAt == nil {
		h.t.Fatalf("run %s finished %v, want FAILED and settled", r.State, r.FinishedAt)
	}
	return runID, b
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func decode[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("decode JSON: %v\n%s", err, s)
	}
	return v
}

// wantLines reports, as errors, each of wants that out lacks, saying
// what (e.g. "show lacks") and printing out.
func wantLines(t *testing.T, out, what string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("%s %q:\n%s", what, want, out)
		}
	}
}

// testAMQPURL is the broker the tests that dial one use:
// FLOWFORGE_TEST_AMQP_URL, else the local default.
func testAMQPURL() string {
	if u := os.Getenv("FLOWFORGE_TEST_AMQP_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}
