package core_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core"
)

// issueYAML is the issue's whole file: defaults, for_each, when, sleep,
// wait_for, trigger_rule, a child workflow, on_failure.
const issueYAML = `
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
    max_items: 10000
  - name: merge
    depends_on: [count]
  - name: big-order-review
    depends_on: [merge]
    when: "upstream.merge.total > 1000 && params.region == 'eu'"
  - name: cool-off
    depends_on: [merge]
    sleep: {for: 24h}
  - name: approval
    depends_on: [big-order-review]
    wait_for: {event: order.approved, key: "params.order_id", timeout: 7d}
  - name: ship
    depends_on: [approval, cool-off]
    trigger_rule: all_done
    workflow: {name: shipping, params: "{'order': params.order_id}"}
  - name: cleanup
    on_failure: true
`

// TestTheIssuesFileParsesWithItsHeldTasks: the held tasks take their
// kinds, no handler from the defaults (only its retry policy), and their
// durations in days.
func TestTheIssuesFileParsesWithItsHeldTasks(t *testing.T) {
	t.Parallel()
	def, err := core.ParseDefinition([]byte(issueYAML))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	byName := map[string]core.TaskDef{}
	for _, task := range def.Tasks {
		byName[task.Name] = task
	}
	for name, kind := range map[string]core.TaskKind{"cool-off": core.KindSleep, "approval": core.KindWait, "ship": core.KindWorkflow, "count": core.KindForEach, "merge": core.KindTask} {
		task := byName[name]
		if task.Kind() != kind {
			t.Errorf("%s: kind %s, want %s", name, task.Kind(), kind)
		}
		if held := kind.Held() && kind != core.KindForEach; held && (task.Handler != "" || task.Timeout != nil || (task.Retry != nil) != (kind == core.KindWait)) {
			t.Errorf("%s: handler %q, timeout %v, retry %v: want no handler nor timeout from the defaults, their retry on a wait only", name, task.Handler, task.Timeout, task.Retry)
		}
	}
	if got := byName["approval"].WaitFor.WaitTimeout(); got != 7*24*time.Hour {
		t.Errorf("approval's timeout %s, want 168h", got)
	}
	if !def.HoldsTasks() || !def.UsesLanguage() {
		t.Error("the definition does not say it holds tasks")
	}
}

func TestParseDefinitionRefusesBadHeldTasks(t *testing.T) {
	t.Parallel()
	head := "name: w\ntasks:\n  - {name: up, handler: noop}\n"
	for _, tc := range []struct{ task, err string }{
		{"{name: s, sleep: {}}", "sleep takes exactly one of for (a duration) and until"},
		{"{name: s, sleep: 8s}", `task "s": sleep: takes a mapping {for: DURATION} (e.g. sleep: {for: 8s}) or {until: EXPRESSION}, not the string "8s"`},
		{"{name: s, sleep: [8s]}", `task "s": sleep: takes a mapping {for: DURATION} (e.g. sleep: {for: 8s}) or {until: EXPRESSION}, not a list`},
		{"{name: s, wait_for: order-approved}", `task "s": wait_for: takes a mapping {event: NAME, key: EXPRESSION, timeout: DURATION, on_timeout: fail|skip} (e.g. wait_for: {event: order-approved}), not the string "order-approved"`},
		{"{name: s, wait_for: 3}", `wait_for: takes a mapping {event: NAME, key: EXPRESSION, timeout: DURATION, on_timeout: fail|skip} (e.g. wait_for: {event: order-approved}), not the number 3`},
		{"{name: s, sleep: {for: 1s, until: 'now'}}", "sleep takes exactly one of for"},
		{"{name: s, sleep: {for: 0s}}", "sleep.for must be positive"},
		{"{name: s, sleep: {for: 400d}}", "sleep.for must be positive and at most 8784h0m0s, got 9600h0m0s"},
		{"{name: s, sleep: {for: 1w}}", `unparseable duration "1w"`},
		{"{name: s, handler: noop, sleep: {for: 1s}}", "a sleep task takes no handler"},
		{"{name: s, sleep: {for: 1s}, params: {a: 1}}", "a sleep task takes no params"},
		{"{name: s, sleep: {until: '1 + 2'}}", "sleep.until: expression does not compile: 1:1: gives int, want timestamp"},
		{"{name: s, sleep: {for: 1s}, for_each: '[1]', handler: noop}", "a task is one of sleep, wait_for, workflow and for_each, not several"},
		{"{name: s, sleep: {for: 1s}, wait_for: {event: e}}", "not several"},
		{"{name: s, sleep: {for: 1s}, on_failure: true}", "an on_failure task cannot be a sleep task"},
		{"{name: s, wait_for: {event: Order Approved}}", `wait_for.event: invalid event: event name "Order Approved" must match`},
		{"{name: s, wait_for: {event: e, timeout: -1s}}", "wait_for.timeout must be positive"},
		{"{name: s, wait_for: {event: e, on_timeout: ignore}}", `wait_for.on_timeout must be "fail" or "skip", got "ignore"`},
		{"{name: s, wait_for: {event: e, key: 'upstream.nope.id'}}", `wait_for.key: expression does not compile: 1:9: upstream "nope" is not a task this one depends on`},
		{"{name: s, wait_for: {event: e, key: '[1]'}}", "gives list(int), want string (or int)"},
		{"{name: s, wait_for: {event: e}, idempotency_key: k}", "a wait task takes no idempotency_key"},
		{"{name: s, wait_for: {event: e}, timeout: 1s}", "a wait task takes no timeout: give it in wait_for"},
		{"{name: s, sleep: {for: 5s}, timeout: 1s}", "a sleep task takes no timeout"},
		{"{name: s, sleep: {for: 5s}, retry: {max_attempts: 2}}", "a sleep task takes no retry"},
		{"{name: s, workflow: {name: child}, retry: {max_attempts: 5}}", "a workflow task takes no retry"},
		{"{name: s, wait_for: {event: e}, retry: {max_attempts: 2}}", ""},
		{"{name: s, workflow: {name: 'Bad Name'}}", "workflow.name: invalid workflow: workflow name"},
		{"{name: s, workflow: {name: child, params: 'params.x'}, depends_on: [up]}", ""},
		{"{name: s, workflow: {name: child, params: '1'}}", "workflow.params: expression does not compile: 1:1: gives int, want map"},
		// Constants are evaluated at apply: the same failure in every run.
		{`{name: s, sleep: {until: 'timestamp("notatime")'}}`, "sleep.until: expression failed"},
		{`{name: s, sleep: {until: '"2020-13-45"'}}`, `sleep.until: expression failed: "2020-13-45": "2020-13-45" is not an RFC 3339 timestamp`},
		{`{name: s, sleep: {until: '"2020-01-02T03:04:05Z"'}}`, ""},
		{`{name: s, wait_for: {event: e, key: '"a\u0000b"'}}`, "wait_for.key: invalid event: the key must be UTF-8 without NUL"},
		{`{name: s, wait_for: {event: e, key: '"k-" + string(1)'}}`, ""},
		{`{name: s, workflow: {name: child, params: "{1: 'a'}"}}`, "workflow.params: expression failed"},
	} {
		_, err := core.ParseDefinition([]byte(head + "  - " + tc.task + "\n"))
		if tc.err == "" {
			if err != nil {
				t.Errorf("%s: %v, want it accepted (a dynamic value is checked when it runs)", tc.task, err)
			}
			continue
		}
		if !errors.Is(err, core.ErrBadWorkflow) || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s:\n got %v\nwant ErrBadWorkflow containing %q", tc.task, err, tc.err)
		}
	}
}

func TestParseDurationTakesDays(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  bool
	}{
		{"30s", 30 * time.Second, false},
		{"7d", 7 * 24 * time.Hour, false},
		{"1d12h", 36 * time.Hour, false},
		{"0d", 0, false},
		{"1.5d", 0, true},
		{"d", 0, true},
		{"-1d", 0, true},
		{"1d-1h", 0, true},
		{"99999999d", 0, true},
		{"soon", 0, true},
	} {
		got, err := core.ParseDuration(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseDuration(%q) = %s, %v; want %s (error %v)", tc.in, got, err, tc.want, tc.err)
		}
	}
}
