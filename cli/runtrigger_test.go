package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTriggerPrintsTheRunIDOrItsJSON(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(twoStep)
	r := h.must("run", "trigger", "twostep")
	if !uuidLine.MatchString(r.stdout) || r.stderr != "" {
		t.Fatalf("plain trigger output %q (stderr %q), want one run id", r.stdout, r.stderr)
	}
	pf := filepath.Join(t.TempDir(), "params.json")
	if err := os.WriteFile(pf, []byte(`{"date": "2026-11-30", "n": 3, "who": "file"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	// Flags may follow the positional name; --param overrides the file.
	run := decode[runOut](t, h.must("run", "trigger", "twostep", "--params-file", pf, "--param", "who=flag", "--param", "x=a=b", "-o", "json").stdout)
	if run.Workflow != "twostep" || run.WorkflowVersion != 1 || run.State != "RUNNING" || run.TasksTotal != 2 || len(run.Tasks) != 2 || run.Existing {
		t.Fatalf("trigger JSON: %+v", run)
	}
	if run.Params["date"] != "2026-11-30" || run.Params["n"] != float64(3) || run.Params["who"] != "flag" || run.Params["x"] != "a=b" {
		t.Fatalf("params: %v", run.Params)
	}
}

// TestAParamsFileThatBeginsWithAByteOrderMarkIsRead: the mark some
// editors write is not part of the JSON (a trial finding for runs files).
func TestAParamsFileThatBeginsWithAByteOrderMarkIsRead(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(twoStep)
	pf := filepath.Join(t.TempDir(), "params.json")
	if err := os.WriteFile(pf, []byte("\uFEFF"+`{"date": "2026-11-30"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	run := decode[runOut](t, h.must("run", "trigger", "twostep", "--params-file", pf, "-o", "json").stdout)
	if len(run.Params) != 1 || run.Params["date"] != "2026-11-30" {
		t.Fatalf("params: %v", run.Params)
	}
}

func TestTriggerIdempotencyKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(twoStep)
	first := decode[runOut](t, h.must("run", "trigger", "twostep", "--idempotency-key", "nightly-2026-11-30", "--param", "date=2026-11-30", "-o", "json").stdout)
	if first.IdempotencyKey == nil || *first.IdempotencyKey != "nightly-2026-11-30" || first.Existing {
		t.Fatalf("first trigger: %+v", first)
	}

	// The same key and params: the existing run, exit 0, and it says so.
	before := h.snapshot()
	r := h.must("run", "trigger", "twostep", "--idempotency-key", "nightly-2026-11-30", "--param", "date=2026-11-30", "-o", "json")
	again := decode[runOut](t, r.stdout)
	if again.ID != first.ID || !again.Existing {
		t.Fatalf("repeat trigger: %+v, want run %s with existing=true", again, first.ID)
	}
	if !strings.Contains(r.stderr, `idempotency key "nightly-2026-11-30" already used with the same params: returning existing run `+first.ID) {
		t.Fatalf("repeat trigger does not say it returned the existing run: %s", r)
	}
	r = h.must("run", "trigger", "twostep", "--idempotency-key", "nightly-2026-11-30", "--param", "date=2026-11-30")
	if r.stdout != first.ID+"\n" {
		t.Fatalf("plain repeat trigger printed %q, want %s", r.stdout, first.ID)
	}
	h.assertUnchanged(before)

	// The same key with other params: refused, exit 1, nothing written.
	r = h.ff("run", "trigger", "twostep", "--idempotency-key", "nightly-2026-11-30", "--param", "date=2026-12-01")
	expect(t, r, 1, "conflict", `idempotency key "nightly-2026-11-30" already belongs to run `+first.ID, "different params")
	if r.stdout != "" {
		t.Fatalf("refused trigger printed %q", r.stdout)
	}
	h.assertUnchanged(before)
}
