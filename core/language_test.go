package core_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core"
)

// languageYAML is the file, less what the second half adds
// (sleep, wait_for, child workflows).
const languageYAML = `
name: orders
defaults:
  handler: shell
  retry: {max_attempts: 3, initial_backoff: 1s, max_backoff: 1m}
  timeout: 5m
tasks:
  - name: split
    params: {command: [split]}
  - name: count
    depends_on: [split]
    for_each: upstream.split.chunks
    max_items: 500
    params: {command: [count, "{{ .Item }}"]}
  - name: merge
    depends_on: [count]
    timeout: 1m
  - name: big-order-review
    depends_on: [merge]
    handler: noop
    when: "upstream.merge.total > 1000 && params.region == 'eu'"
  - name: ship
    depends_on: [big-order-review, merge]
    trigger_rule: all_done
  - name: cleanup
    on_failure: true
`

func TestDefaultsAreMergedAndTheLanguageParses(t *testing.T) {
	t.Parallel()
	def, err := core.ParseDefinition([]byte(languageYAML))
	if err != nil {
		t.Fatalf("ParseDefinition: %v", err)
	}
	by := map[string]core.TaskDef{}
	for _, task := range def.Tasks {
		by[task.Name] = task
	}
	if h := by["split"].Handler; h != "shell" {
		t.Errorf("split's handler = %q, want the default shell", h)
	}
	if h := by["big-order-review"].Handler; h != "noop" {
		t.Errorf("big-order-review's handler = %q, want its own noop", h)
	}
	if d := by["merge"].TimeoutOrZero(); d != time.Minute {
		t.Errorf("merge's timeout = %v, want its own 1m", d)
	}
	if d := by["count"].TimeoutOrZero(); d != 5*time.Minute {
		t.Errorf("count's timeout = %v, want the default 5m", d)
	}
	if p := by["cleanup"].Policy(); p.MaxAttempts != 3 {
		t.Errorf("cleanup's attempts = %d, want the default's 3", p.MaxAttempts)
	}
	for name, want := range map[string]struct {
		kind  core.TaskKind
		plain bool
	}{
		"split": {core.KindTask, true}, "count": {core.KindForEach, false}, "merge": {core.KindTask, true},
		"big-order-review": {core.KindTask, false}, "ship": {core.KindTask, false}, "cleanup": {core.KindTask, false},
	} {
		if got := by[name]; got.Kind() != want.kind || got.Plain() != want.plain {
			t.Errorf("%s: kind %s, plain %v; want %s, %v", name, got.Kind(), got.Plain(), want.kind, want.plain)
		}
	}
	if by["count"].MaxItemsOrDefault() != 500 || by["merge"].MaxItemsOrDefault() != core.MaxItemsDefault {
		t.Error("max_items: want 500 as given, the default where not")
	}
	if !def.UsesLanguage() {
		t.Error("UsesLanguage() = false")
	}
	if plain, _ := core.ParseDefinition([]byte(validYAML)); plain.UsesLanguage() {
		t.Error("a file without the language UsesLanguage()")
	}
}

// TestParseDefinitionRefusesBadLanguage: each bad file is refused with an
// error that names the task and says what is wrong (the store's
// TestWorkflowApplyRefusesBadLanguageAndStoresNothing checks that apply
// stores nothing).
func TestParseDefinitionRefusesBadLanguage(t *testing.T) {
	t.Parallel()
	const head = "name: w\ntasks:\n  - {name: a, handler: noop}\n"
	for _, tc := range []struct{ name, tasks, err string }{
		{"expression that does not compile", `  - {name: b, handler: noop, depends_on: [a], when: "upstream.a.x >"}`,
			`task "b": when: expression does not compile: 1:15: Syntax error`},
		{"upstream that is not upstream", `  - {name: b, handler: noop, when: "upstream.a.ok"}`,
			`task "b": when: expression does not compile: 1:9: upstream "a" is not a task this one depends on (it may read: none)`},
		{"upstream that does not exist", `  - {name: b, handler: noop, depends_on: [a], when: "upstream.zz.ok"}`,
			`upstream "zz" is not a task this one depends on (it may read: a)`},
		{"non-boolean when", `  - {name: b, handler: noop, depends_on: [a], when: "size(params.x) + 1"}`,
			`task "b": when: expression does not compile: 1:1: gives int, want bool`},
		{"max_items above the limit", `  - {name: b, handler: noop, for_each: "params.xs", max_items: 100001}`,
			`task "b": max_items must be between 1 and 100000, got 100001`},
		{"max_items zero", `  - {name: b, handler: noop, for_each: "params.xs", max_items: 0}`,
			`task "b": max_items must be between 1 and 100000, got 0`},
		{"max_items without for_each", `  - {name: b, handler: noop, max_items: 3}`,
			`task "b": max_items needs for_each`},
		{"unknown trigger rule", `  - {name: b, handler: noop, depends_on: [a], trigger_rule: any_success}`,
			`task "b": unknown trigger_rule "any_success" (want all_success, all_done, one_success or none_failed)`},
		{"trigger rule without depends_on", `  - {name: b, handler: noop, trigger_rule: all_done}`,
			`task "b": trigger_rule needs depends_on`},
		{"on_failure with depends_on", `  - {name: b, handler: noop, depends_on: [a], on_failure: true}`,
			`task "b": an on_failure task takes no depends_on`},
		{"a task depending on on_failure", "  - {name: b, handler: noop, on_failure: true}\n  - {name: c, handler: noop, depends_on: [b]}",
			`task "c": depends on on_failure task "b"`},
		{"for_each that is not a list", `  - {name: b, handler: noop, depends_on: [a], for_each: "'a,b'"}`,
			`task "b": for_each: expression does not compile: 1:1: gives string, want list`},
		{"for_each of a boolean", `  - {name: b, handler: noop, for_each: "params.n > 1"}`,
			`task "b": for_each: expression does not compile: 1:1: gives bool, want list`},
		{".Item without for_each", `  - {name: b, handler: noop, params: {f: "{{ .Item }}"}}`,
			`task "b": params.f: .Item is the element of a for_each task`},
		{"unknown task field", `  - {name: b, handler: noop, for_eachh: "params.xs"}`,
			`task "b": for_eachh: unknown field "for_eachh"`},
		{"on_failure with for_each", `  - {name: b, handler: noop, on_failure: true, for_each: "params.xs"}`,
			`task "b": an on_failure task cannot have for_each`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := core.ParseDefinition([]byte(head + tc.tasks + "\n"))
			if !errors.Is(err, core.ErrBadWorkflow) || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("ParseDefinition: %v\nwant an ErrBadWorkflow containing %q", err, tc.err)
			}
		})
	}
}

func TestDefaultsRefuseFieldsThatCannotBeDefaulted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ file, err string }{
		{"name: w\ndefaults: {depends_on: [a]}\ntasks:\n  - {name: a, handler: noop}\n", `defaults: unknown field "depends_on"`},
		{"name: w\ndefaults: {timeout: 10}\ntasks:\n  - {name: a, handler: noop}\n", `defaults: `},
		{"name: w\ndefaults: {when: 'true'}\ntasks:\n  - {name: a, handler: noop}\n", `defaults: unknown field "when"`},
		{"name: w\ndefaults: {retry: {max_attempts: 0}}\ntasks:\n  - {name: a, handler: noop}\n", `task "a": retry.max_attempts must be between 1 and 1000, got 0`},
	} {
		_, err := core.ParseDefinition([]byte(tc.file))
		if !errors.Is(err, core.ErrBadWorkflow) || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("ParseDefinition(%q): %v, want %q", tc.file, err, tc.err)
		}
	}
}
