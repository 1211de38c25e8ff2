package cli_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"
)

const greetWorkflow = `name: greet
tasks:
  - name: say
    handler: shell
    params: {command: [echo, "{{ .Params.date }}"], env: {WHO: "{{ .Workflow }}/{{ .Task }}"}}
  - name: literal
    handler: shell
    depends_on: [say]
    params: {command: [echo, '{{"{{"}} .Params.date }}']}
`

// storedParams is the params task name of run stores, as `task show -o
// json` prints them, compacted.
func (h *harness) storedParams(run uuid.UUID, name string) string {
	h.t.Helper()
	p := decode[struct {
		Params json.RawMessage `json:"params"`
	}](h.t, h.must("task", "show", h.taskID(run, name).String(), "-o", "json").stdout).Params
	var b bytes.Buffer
	if err := json.Compact(&b, p); err != nil {
		h.t.Fatal(err)
	}
	return b.String()
}

// TestTriggerRendersTheTemplatesInTaskParams: a shell task's command
// `[echo, "{{ .Params.date }}"]` printed the braces (issue 23). Now run
// trigger and the bulk trigger store each task's params with their
// templates rendered from the run's params ({{"{{"}} is a literal "{{");
// a run lacking a param a template needs is refused (exit 2, naming the
// task and the param, nothing written), and a template that does not parse
// is refused at apply (exit 2, nothing written).
func TestTriggerRendersTheTemplatesInTaskParams(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(greetWorkflow)

	id := h.must("run", "trigger", "greet", "--param", "date=2026-11-30").stdout
	run := uuid.MustParse(strings.TrimSpace(id))
	if got, want := h.storedParams(run, "say"), `{"env":{"WHO":"greet/say"},"command":["echo","2026-11-30"]}`; got != want {
		t.Fatalf("say's stored params %s, want %s", got, want)
	}
	if got, want := h.storedParams(run, "literal"), `{"command":["echo","{{ .Params.date }}"]}`; got != want {
		t.Fatalf("literal's stored params %s, want %s", got, want)
	}

	ids := strings.Fields(h.must("run", "trigger", "greet", "--runs-file", runsFile(t, "{\"date\":\"mon\"}\n{\"date\":\"tue\"}\n")).stdout)
	if len(ids) != 2 {
		t.Fatalf("bulk trigger printed %q, want two run ids", ids)
	}
	for i, day := range []string{"mon", "tue"} {
		if got, want := h.storedParams(uuid.MustParse(ids[i]), "say"), `{"env":{"WHO":"greet/say"},"command":["echo","`+day+`"]}`; got != want {
			t.Fatalf("bulk run %d: say's stored params %s, want %s", i+1, got, want)
		}
	}

	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"run trigger without the param", []string{"run", "trigger", "greet", "--param", "day=mon"},
			[]string{`task "say"`, "params.command[1]", `map has no entry for key "date"`}},
		{"a runs file line without it", []string{"run", "trigger", "greet", "--runs-file", runsFile(t, "{\"date\":\"mon\"}\n{}\n")},
			[]string{"line 2", `task "say"`, `map has no entry for key "date"`, "nothing was triggered"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := h.snapshot()
			r := h.ff(tc.args...)
			expect(t, r, 2, tc.want...)
			if r.stdout != "" {
				t.Fatalf("a refused trigger printed:\n%s", r)
			}
			h.assertUnchanged(before)
		})
	}

	t.Run("a template that does not parse is refused at apply", func(t *testing.T) {
		before := h.snapshot()
		r := h.ffIn("name: greet\ntasks:\n  - {name: say, handler: shell, params: {command: [echo, '{{ .Params.date']}}\n", "workflow", "apply", "-f", "-")
		expect(t, r, 2, `task "say": params.command[1]: template:`, `a literal {{ is written {{"{{"}}`)
		h.assertUnchanged(before)
	})
}
