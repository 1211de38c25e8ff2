package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core/store/storetest"
)

const report = `
name: nightly-report
description: the nightly report
tasks:
  - {name: extract, handler: noop}
  - name: render
    handler: noop
    depends_on: [extract]
    retry: {max_attempts: 5}
    timeout: 30s
`

func TestWorkflowApplyListShow(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.ffIn(report, "workflow", "apply", "-f", "-", "-o", "json")
	if r.code != 0 {
		t.Fatal(r)
	}
	applied := decode[struct {
		Name    string `json:"name"`
		Version int    `json:"version"`
		Created bool   `json:"created"`
		Tasks   int    `json:"tasks"`
	}](t, r.stdout)
	if applied.Name != "nightly-report" || applied.Version != 1 || !applied.Created || applied.Tasks != 2 {
		t.Fatalf("apply: %+v", applied)
	}

	// Unchanged: a no-op that says so, and writes nothing.
	before := h.snapshot()
	r = h.ffIn(report, "workflow", "apply", "-f", "-")
	if r.code != 0 || !strings.Contains(r.stdout, "unchanged (version 1)") {
		t.Fatal(r)
	}
	h.assertUnchanged(before)

	// Changed: version 2.
	r = h.ffIn(strings.Replace(report, "max_attempts: 5", "max_attempts: 6", 1), "workflow", "apply", "-f", "-")
	if r.code != 0 || !strings.Contains(r.stdout, "stored version 2 (2 tasks)") {
		t.Fatal(r)
	}

	list := decode[[]struct {
		Name    string `json:"name"`
		Version int    `json:"version"`
		Tasks   int    `json:"tasks"`
		Runs    int    `json:"runs"`
		Created string `json:"created_at"`
	}](t, h.must("workflow", "list", "-o", "json").stdout)
	if len(list) != 1 || list[0].Version != 2 || list[0].Tasks != 2 || list[0].Created == "" {
		t.Fatalf("list: %+v", list)
	}
	table := h.must("workflow", "list").stdout
	if !strings.HasPrefix(table, "NAME            VERSION  TASKS  RUNS  CREATED              PAUSED\n") || !strings.Contains(table, "nightly-report  2        2      0     ") {
		t.Fatalf("list table:\n%s", table)
	}

	show := decode[struct {
		Name       string `json:"name"`
		Version    int    `json:"version"`
		Definition struct {
			Tasks []struct {
				Name      string   `json:"name"`
				DependsOn []string `json:"depends_on"`
				Timeout   string   `json:"timeout"`
			} `json:"tasks"`
		} `json:"definition"`
	}](t, h.must("workflow", "show", "nightly-report", "--version", "1", "-o", "json").stdout)
	if show.Version != 1 || len(show.Definition.Tasks) != 2 || show.Definition.Tasks[1].DependsOn[0] != "extract" || show.Definition.Tasks[1].Timeout != "30s" {
		t.Fatalf("show: %+v", show)
	}
	out := h.must("workflow", "show", "nightly-report").stdout
	for _, want := range []string{"workflow nightly-report version 2", "the nightly report", "render   noop     [extract]   6             1s (default)     1m (default)  30s"} {
		if !strings.Contains(out, want) {
			t.Fatalf("show table lacks %q:\n%s", want, out)
		}
	}
}

func TestWorkflowApplyFromJSONFile(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.ffIn(`{"name": "j", "tasks": [{"name": "a", "handler": "noop", "retry": {"max_attempts": 1}}]}`, "workflow", "apply", "-f", "-")
	if r.code != 0 || !strings.Contains(r.stdout, "workflow j: stored version 1 (1 tasks)") {
		t.Fatal(r)
	}
}

// TestWorkflowShowJSONHasEveryField checks that `workflow show -o json`
// writes every field of the definition, absent ones null and fail_fast
// false (issue 11: fail_fast was left out when false, although the README
// says absent values are null), and that re-applying the same file is
// still recognised as unchanged.
func TestWorkflowShowJSONHasEveryField(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply("name: plain\ntasks:\n  - {name: a, handler: noop}\n")
	var v struct {
		Definition map[string]json.RawMessage   `json:"definition"`
		Tasks      []map[string]json.RawMessage `json:"-"`
	}
	out := h.must("workflow", "show", "plain", "-o", "json").stdout
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(v.Definition["tasks"], &v.Tasks); err != nil || len(v.Tasks) != 1 {
		t.Fatalf("tasks: %v\n%s", err, out)
	}
	for k, want := range map[string]string{"name": `"plain"`, "description": "null", "fail_fast": "false"} {
		if got, ok := v.Definition[k]; !ok || string(got) != want {
			t.Errorf("definition.%s = %s (present %v), want %s\n%s", k, got, ok, want, out)
		}
	}
	for k, want := range map[string]string{"params": "null", "depends_on": "[]", "retry": "null", "timeout": "null", "idempotency_key": "null", "idempotency_ttl": "null"} {
		if got, ok := v.Tasks[0][k]; !ok || string(got) != want {
			t.Errorf("tasks[0].%s = %s (present %v), want %s\n%s", k, got, ok, want, out)
		}
	}
	if r := h.ffIn("name: plain\ntasks:\n  - {name: a, handler: noop}\n", "workflow", "apply", "-f", "-"); r.code != 0 || !strings.Contains(r.stdout, "unchanged (version 1)") {
		t.Fatalf("re-apply: %s", r)
	}
}

// TestWorkflowShowJSONGivesTheIdempotencyTTL: a task's idempotency_ttl is
// shown as the file gave it (a new user's trial found it dropped, so a
// file rebuilt from the output lost it).
func TestWorkflowShowJSONGivesTheIdempotencyTTL(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply("name: ttl\ntasks:\n  - {name: a, handler: noop, idempotency_key: \"k-{{ .Workflow }}\", idempotency_ttl: 90s}\n")
	var v struct {
		Definition struct {
			Tasks []map[string]json.RawMessage `json:"tasks"`
		} `json:"definition"`
	}
	out := h.must("workflow", "show", "ttl", "-o", "json").stdout
	if err := json.Unmarshal([]byte(out), &v); err != nil || len(v.Definition.Tasks) != 1 {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := string(v.Definition.Tasks[0]["idempotency_ttl"]); got != `"1m30s"` && got != `"90s"` {
		t.Errorf("idempotency_ttl = %s, want the 90s the file gave\n%s", got, out)
	}
}

// TestABadWorkflowFileIsNamedBeforeTheDatabase: workflow apply parses and
// checks the file before it connects, so a bad file is reported as such
// (exit 2) even where the database cannot be reached, not hidden behind
// the connection's error.
func TestABadWorkflowFileIsNamedBeforeTheDatabase(t *testing.T) {
	for _, c := range []struct{ name, file, says string }{
		{"not YAML", "name: x\ntasks: [\n", "wf.yaml"},
		{"a cycle", "name: x\ntasks:\n  - {name: a, handler: noop, depends_on: [b]}\n  - {name: b, handler: noop, depends_on: [a]}\n", "cycle"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "wf.yaml")
			if err := os.WriteFile(path, []byte(c.file), 0o600); err != nil {
				t.Fatal(err)
			}
			r := runFFCTL(t, "--database-url", storetest.RefusedURL(t), "workflow", "apply", "-f", path)
			if r.code != 2 || !strings.Contains(r.stderr, c.says) {
				t.Fatalf("exit %d, stderr %q: want 2 naming %q", r.code, r.stderr, c.says)
			}
		})
	}
}
