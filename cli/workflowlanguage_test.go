package cli_test

import (
	"encoding/json"
	"testing"
)

// languageFile uses defaults and each field of the workflow language.
const languageFile = `
name: orders
defaults:
  handler: noop
  retry: {max_attempts: 4}
  timeout: 5m
tasks:
  - {name: split}
  - {name: count, depends_on: [split], for_each: upstream.split.chunks, max_items: 50}
  - {name: merge, depends_on: [count], timeout: 1m}
  - {name: review, depends_on: [merge], when: "upstream.merge.total > 1000"}
  - {name: ship, depends_on: [review, merge], trigger_rule: all_done}
  - {name: cleanup, on_failure: true}
`

// TestWorkflowShowPrintsTheEffectiveTasksOfAFileWithDefaults: the
// defaults are merged into every task at apply (a task's own field wins),
// so the table shows each task's effective handler, attempts and timeout,
// and says each task's when, trigger rule, on_failure and for_each; -o
// json has them in effective and the file's defaults in the definition.
func TestWorkflowShowPrintsTheEffectiveTasksOfAFileWithDefaults(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(languageFile)
	out := h.must("workflow", "show", "orders").stdout
	wantLines(t, out, "show lacks",
		"split    noop     -               4             1s (default)     1m (default)  5m\n",
		"merge    noop     [count]         4             1s (default)     1m (default)  1m\n",
		"count: for_each upstream.split.chunks (at most 50 elements)\n",
		"review: when upstream.merge.total > 1000\n",
		"ship: trigger_rule all_done\n",
		"cleanup: on_failure: runs only when the run fails\n",
	)
	var v struct {
		Definition struct {
			Defaults struct {
				Handler string `json:"handler"`
			} `json:"defaults"`
		} `json:"definition"`
		Effective []struct {
			Task        string  `json:"task"`
			Kind        string  `json:"kind"`
			TriggerRule string  `json:"trigger_rule"`
			When        string  `json:"when"`
			ForEach     string  `json:"for_each"`
			MaxItems    *int    `json:"max_items"`
			OnFailure   bool    `json:"on_failure"`
			Timeout     *string `json:"timeout"`
		} `json:"effective"`
	}
	if err := json.Unmarshal([]byte(h.must("workflow", "show", "orders", "-o", "json").stdout), &v); err != nil || len(v.Effective) != 6 {
		t.Fatalf("show -o json: %v %+v", err, v)
	}
	if v.Definition.Defaults.Handler != "noop" {
		t.Errorf("definition.defaults = %+v", v.Definition.Defaults)
	}
	e := v.Effective
	if e[1].Kind != "for_each" || e[1].ForEach != "upstream.split.chunks" || e[1].MaxItems == nil || *e[1].MaxItems != 50 ||
		e[3].When != "upstream.merge.total > 1000" || e[4].TriggerRule != "all_done" || !e[5].OnFailure || *e[2].Timeout != "1m0s" {
		t.Errorf("effective: %+v", e)
	}
	// The JSON's definition is a file apply takes back.
	var show struct {
		Definition json.RawMessage `json:"definition"`
	}
	_ = json.Unmarshal([]byte(h.must("workflow", "show", "orders", "-o", "json").stdout), &show)
	if r := h.ffIn(string(show.Definition), "workflow", "apply", "-f", "-"); r.code != 0 {
		t.Fatalf("apply of the shown definition: %+v", r)
	}
}

// TestWorkflowApplyRefusesBadLanguageAndStoresNothing: each bad use of the
// language is refused at apply (exit 2) with the task and what is wrong,
// and nothing is stored.
func TestWorkflowApplyRefusesBadLanguageAndStoresNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const head = "name: bad\ntasks:\n  - {name: a, handler: noop}\n"
	for _, c := range []struct{ name, tasks, want string }{
		{"an expression that does not compile", `  - {name: b, handler: noop, depends_on: [a], when: "upstream.a.x >"}`,
			`-: invalid workflow: task "b": when: expression does not compile: 1:15: Syntax error`},
		{"upstream.x that is not upstream", `  - {name: b, handler: noop, when: "upstream.a.ok"}`,
			`-: invalid workflow: task "b": when: expression does not compile: 1:9: upstream "a" is not a task this one depends on (it may read: none)`},
		{"a non-boolean when", `  - {name: b, handler: noop, depends_on: [a], when: "upstream.a.n + 1"}`,
			`-: invalid workflow: task "b": when: expression does not compile: 1:1: gives int, want bool`},
		{"max_items out of range", `  - {name: b, handler: noop, for_each: "params.xs", max_items: 100001}`,
			`-: invalid workflow: task "b": max_items must be between 1 and 100000, got 100001`},
		{"an unknown trigger_rule", `  - {name: b, handler: noop, depends_on: [a], trigger_rule: sometimes}`,
			`-: invalid workflow: task "b": unknown trigger_rule "sometimes" (want all_success, all_done, one_success or none_failed)`},
		{"on_failure with depends_on", `  - {name: b, handler: noop, depends_on: [a], on_failure: true}`,
			`-: invalid workflow: task "b": an on_failure task takes no depends_on`},
		{"for_each with no list", `  - {name: b, handler: noop, depends_on: [a], for_each: "upstream.a.n > 1"}`,
			`-: invalid workflow: task "b": for_each: expression does not compile: 1:1: gives bool, want list`},
		{"an unknown task field", `  - {name: b, handler: noop, whenn: "true"}`,
			`-: invalid workflow: task "b": whenn: unknown field "whenn"`},
		{"an unknown defaults field", "  - {name: b, handler: noop}\ndefaults: {depends_on: [a]}",
			`-: invalid workflow: defaults: unknown field "depends_on"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := h.snapshot()
			r := h.ffIn(head+c.tasks+"\n", "workflow", "apply", "-f", "-")
			expect(t, r, 2, c.want)
			h.assertUnchanged(before)
		})
	}
}
