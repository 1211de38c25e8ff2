package core_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core"
)

// TestTaskIdempotencyKeys (core.RenderRunTasks' Keys): a run's task keys render task by task from its
// params (numbers verbatim, "" for a task without a template), none at all
// when no task has a template (the params are not even decoded), and every
// refusal wraps core.ErrBadParams.
func TestTaskIdempotencyKeys(t *testing.T) {
	t.Parallel()
	def := func(t *testing.T, src string) *core.Definition {
		t.Helper()
		d, err := core.ParseDefinition([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	const keyed = "name: keyed\ntasks:\n  - {name: a, handler: noop, idempotency_key: 'k-{{ .Params.n }}-{{ .Task }}'}\n" +
		"  - {name: b, handler: noop, depends_on: [a]}\n"
	const unkeyed = "name: plain\ntasks:\n  - {name: a, handler: noop}\n"
	for _, tc := range []struct {
		name, src, params string
		want              []string
		err               string // "": no error; else a part of it
	}{
		{"no template decodes nothing", unkeyed, `not json`, nil, ""},
		{"number verbatim, untemplated task empty", keyed, `{"n": 1.50}`, []string{"k-1.50-a", ""}, ""},
		{"missing param", keyed, `{"m": 1}`, nil, `map has no entry for key "n"`},
		{"NUL in the key", keyed, `{"n": "x\u0000y"}`, nil, `task "a": idempotency key contains a NUL character`},
		{"params not an object", keyed, `[1]`, nil, "invalid params: json: cannot unmarshal array"},
	} {
		rt, err := core.RenderRunTasks(def(t, tc.src), json.RawMessage(tc.params))
		keys := rt.Keys
		if tc.err == "" {
			if err != nil || !slices.Equal(keys, tc.want) || (tc.want == nil) != (keys == nil) {
				t.Errorf("%s: %q, %v; want %q", tc.name, keys, err, tc.want)
			}
			continue
		}
		if !errors.Is(err, core.ErrBadParams) || !strings.Contains(err.Error(), tc.err) || keys != nil {
			t.Errorf("%s: %q, %v; want an error wrapping core.ErrBadParams containing %q", tc.name, keys, err, tc.err)
		}
	}
}

// TestAForEachTaskMayReadAnElementsFieldInItsTemplates: `{{ .Item.file }}`
// in a for_each task's params and idempotency key passes the trigger
// (no element exists yet: a missing param is still refused there) and
// renders each element's field at expansion.
func TestAForEachTaskMayReadAnElementsFieldInItsTemplates(t *testing.T) {
	t.Parallel()
	def, err := core.ParseDefinition([]byte(`name: fe
tasks:
  - name: each
    handler: shell
    for_each: "[{'file': 'a.txt', 'meta': {'size': 3}}]"
    idempotency_key: "k-{{ .Item.file }}-{{ .Params.n }}"
    params: {command: ["echo", "{{ .Item.file }}", "{{ .Item.meta.size }}", "{{ .Params.n }}"]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := core.RenderRunTasks(def, json.RawMessage(`{"n": 1}`)); err != nil {
		t.Fatalf("trigger: %v, want the element's fields left to the expansion", err)
	}
	if _, err := core.RenderRunTasks(def, json.RawMessage(`{}`)); !errors.Is(err, core.ErrBadParams) || !strings.Contains(err.Error(), `map has no entry for key "n"`) {
		t.Fatalf("trigger without the param: %v, want ErrBadParams naming it", err)
	}
	p, key, err := core.RenderElement("fe", def.Tasks[0], json.RawMessage(`{"n": 1}`), json.RawMessage(`{"file": "a.txt", "meta": {"size": 3}}`))
	if err != nil || key != "k-a.txt-1" || string(p) != `{"command":["echo","a.txt","3","1"]}` {
		t.Fatalf("element: params %s, key %q, %v", p, key, err)
	}
}
