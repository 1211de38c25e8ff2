package core_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core"
)

// TestRenderRunTasksRendersParamsTemplates: every string value in a task's
// params, at any depth, renders at trigger over the run's params with the
// idempotency_key's engine and data (issue 23: "{{ .Params.date }}" reached
// the shell command as it was written). Numbers, booleans, null and object
// keys are untouched; a literal "{{" is written {{"{{"}}; a task without a
// template stores its params as they are (nil); a missing param is an
// error wrapping core.ErrBadParams naming the task, the value and the key.
func TestRenderRunTasksRendersParamsTemplates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		src    string // the workflow file
		params string // the run's
		want   []string
		err    []string // "": no error; else the parts of it
	}{
		{"argv element", `{name: w, tasks: [{name: a, handler: shell, params: {command: [echo, "{{ .Params.date }}"]}}]}`,
			`{"date": "2026-11-30"}`, []string{`{"command":["echo","2026-11-30"]}`}, nil},
		{"nested in objects and arrays, with .Workflow and .Task",
			`{name: w, tasks: [{name: a, handler: shell, params: {command: [sh], env: {D: "{{.Params.cfg.region}}-{{.Task}}"}, deep: [{x: ["{{ .Workflow }}"]}]}}]}`,
			`{"cfg": {"region": "eu"}}`, []string{`{"command":["sh"],"deep":[{"x":["w"]}],"env":{"D":"eu-a"}}`}, nil},
		{"non-string values and keys untouched, numbers verbatim",
			`raw:{"n": 1.50, "b": true, "z": null, "s": "plain", "{{.Task}}": "{{ .Params.n }}"}`,
			`{"n": 1.50}`, []string{`{"b":true,"n":1.50,"s":"plain","z":null,"{{.Task}}":"1.50"}`}, nil},
		{"escaped braces are text", `{name: w, tasks: [{name: a, handler: noop, params: {s: '{{"{{"}} .Params.date }}'}}]}`,
			`{}`, []string{`{"s":"{{ .Params.date }}"}`}, nil},
		{"braces written as JSON escapes", `{"name": "w", "tasks": [{"name": "a", "handler": "noop", "params": {"s": "\u007b\u007b .Params.d }}"}}]}`,
			`{"d": "x"}`, []string{`{"s":"x"}`}, nil},
		{"an untemplated task keeps its params", `{name: w, tasks: [{name: a, handler: noop, params: {s: plain}}, {name: b, handler: noop, params: {s: "{{ .Params.d }}"}}]}`,
			`{"d": "x"}`, []string{"", `{"s":"x"}`}, nil},
		{"no template anywhere decodes nothing", `{name: w, tasks: [{name: a, handler: noop, params: {s: "{ not one }"}}]}`,
			`not json`, nil, nil},
		{"missing param", `{name: w, tasks: [{name: greet, handler: shell, params: {command: [echo, "{{ .Params.date }}"]}}]}`,
			`{"day": "x"}`, nil, []string{`task "greet"`, `params.command[1]`, `map has no entry for key "date"`}},
		{"rendered params that cannot be stored", `{name: w, tasks: [{name: a, handler: noop, params: {s: '{{ printf "%c" 0 }}'}}]}`,
			`{}`, nil, []string{`task "a": rendered params`, "NUL"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// raw: a stored definition with these params for task a (a
			// workflow file's numbers are normalised at apply).
			def := &core.Definition{Name: "w", Tasks: []core.TaskDef{{Name: "a", Handler: "noop", Params: json.RawMessage(strings.TrimPrefix(tc.src, "raw:"))}}}
			if !strings.HasPrefix(tc.src, "raw:") {
				var err error
				if def, err = core.ParseDefinition([]byte(tc.src)); err != nil {
					t.Fatal(err)
				}
			}
			rt, err := core.RenderRunTasks(def, json.RawMessage(tc.params))
			if tc.err != nil {
				if !errors.Is(err, core.ErrBadParams) || rt.Params != nil {
					t.Fatalf("%+v, %v; want an error wrapping core.ErrBadParams", rt, err)
				}
				for _, w := range tc.err {
					if !strings.Contains(err.Error(), w) {
						t.Fatalf("error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := []string(nil)
			for _, p := range rt.Params {
				got = append(got, string(p))
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") || (got == nil) != (tc.want == nil) {
				t.Fatalf("params %q, want %q", got, tc.want)
			}
		})
	}
}

// TestParamsTemplatesAreCheckedAtApply: a template in a task's params that
// does not parse, or names a field the template data lacks, is refused at
// apply (core.ErrBadWorkflow) naming the task and the value; a param the
// file does not know is fine until a trigger lacks it.
func TestParamsTemplatesAreCheckedAtApply(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, value string
		err         []string // nil: accepted
	}{
		{"unclosed action", "echo {{ .Params.date", []string{`task "a": params.command[1]: template:`, `a literal {{ is written {{"{{"}}`}},
		{"unknown function", "{{ nope }}", []string{`task "a": params.command[1]:`, `function "nope" not defined`}},
		{"a field the data lacks", "{{ .Date }}", []string{`task "a": params.command[1]:`, "the template sees .Params.<name>, .Workflow and .Task"}},
		{"a param checked at trigger", "{{ .Params.date }}", nil},
		{"escaped braces", `{{"{{"}}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, _ := json.Marshal(map[string]any{"name": "w", "tasks": []any{map[string]any{
				"name": "a", "handler": "shell", "params": map[string]any{"command": []string{"echo", tc.value}}}}})
			_, err := core.ParseDefinition(src)
			if tc.err == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, core.ErrBadWorkflow) {
				t.Fatalf("%v; want core.ErrBadWorkflow", err)
			}
			for _, w := range tc.err {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestAStoredTemplateThatDoesNotParseRefusesTheTrigger: a version applied
// before params were templates may hold a "{{" that does not parse (apply
// refuses one now); its trigger is refused, saying how to mend it.
func TestAStoredTemplateThatDoesNotParseRefusesTheTrigger(t *testing.T) {
	t.Parallel()
	def := &core.Definition{Name: "old", Tasks: []core.TaskDef{{Name: "a", Handler: "noop", Params: json.RawMessage(`{"s": "{{ unclosed"}`)}}}
	_, err := core.RenderRunTasks(def, json.RawMessage(`{}`))
	if !errors.Is(err, core.ErrBadParams) || !strings.Contains(err.Error(), `task "a": template: params.s:1:`) ||
		!strings.Contains(err.Error(), `a literal {{ is written {{"{{"}}: apply the workflow again with it`) {
		t.Fatalf("%v; want core.ErrBadParams naming the task, the value and the mend", err)
	}
}
