package cli_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestWorkflowShowPrintsEachTasksEffectiveRetryAndTimeout (issue 23,
// hazard 4): `workflow show` prints the retry policy and timeout the engine
// applies to each task, the defaults (3 attempts, backoff 1s to 1m, full
// jitter, no timeout) marked as such, in the table and in -o json; a
// backoff bound the file leaves out that follows from the other one says
// so.
func TestWorkflowShowPrintsEachTasksEffectiveRetryAndTimeout(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(`
name: eff
tasks:
  - {name: plain, handler: shell, params: {command: ["true"]}}
  - {name: set, handler: noop, retry: {max_attempts: 5, initial_backoff: 250ms, max_backoff: 2h}, timeout: 90s}
  - {name: slow, handler: noop, retry: {initial_backoff: 2m}}
`)
	out := h.must("workflow", "show", "eff").stdout
	wantLines(t, out, "show table lacks",
		"TASK   HANDLER  DEPENDS ON  MAX ATTEMPTS  BACKOFF INITIAL  BACKOFF MAX             TIMEOUT\n",
		"plain  shell    -           3 (default)   1s (default)     1m (default)            none (default)\n",
		"set    noop     -           5             250ms            2h                      1m30s\n",
		"slow   noop     -           3 (default)   2m               2m (= initial_backoff)  none (default)\n",
		"Retry n waits a random time in [0, min(max, initial × 2^(n-1))] (full jitter); (default): not set in the file.\n",
	)

	var v struct {
		Effective []map[string]any `json:"effective"`
		Events    []any            `json:"events"`
	}
	js := h.must("workflow", "show", "eff", "-o", "json").stdout
	if err := json.Unmarshal([]byte(js), &v); err != nil || len(v.Effective) != 3 {
		t.Fatalf("%v\n%s", err, js)
	}
	want := []map[string]any{
		{"task": "plain", "max_attempts": 3.0, "initial_backoff": "1s", "max_backoff": "1m0s", "jitter": "full", "timeout": nil,
			"defaulted": []any{"max_attempts", "initial_backoff", "max_backoff", "timeout"}},
		{"task": "set", "max_attempts": 5.0, "initial_backoff": "250ms", "max_backoff": "2h0m0s", "jitter": "full", "timeout": "1m30s", "defaulted": []any{}},
		{"task": "slow", "max_attempts": 3.0, "initial_backoff": "2m0s", "max_backoff": "2m0s", "jitter": "full", "timeout": nil,
			"defaulted": []any{"max_attempts", "max_backoff", "timeout"}},
	}
	for i := range want {
		for k, v := range map[string]any{"kind": "task", "trigger_rule": "all_success", "when": "", "for_each": "", "max_items": nil, "on_failure": false,
			"wait_timeout": nil, "on_timeout": nil} {
			want[i][k] = v
		}
		if !reflect.DeepEqual(v.Effective[i], want[i]) {
			t.Errorf("effective[%d] = %v, want %v", i, v.Effective[i], want[i])
		}
	}
	if v.Events == nil || len(v.Events) != 0 {
		t.Errorf("events = %v, want []", v.Events)
	}
}

// TestWorkflowShowPrintsHeldBlocks: `workflow show` says each task's sleep,
// wait_for or workflow block, the defaults the engine applies (a wait's
// timeout of a year, on_timeout fail, a child's params {}) marked as such,
// durations in days as a file may write them; -o json has the blocks in
// the definition (which apply takes back) and a wait's effective timeout
// and on_timeout.
func TestWorkflowShowPrintsHeldBlocks(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(shippingFile)
	h.apply(`
name: held
tasks:
  - {name: nap, sleep: {for: 36h}}
  - {name: until, sleep: {until: "params.at"}}
  - {name: approve, wait_for: {event: order.approved, key: "params.order_id", timeout: 7d, on_timeout: skip}}
  - {name: any, wait_for: {event: ping}}
  - {name: ship, workflow: {name: shipping, params: "{'order': params.order_id}"}}
  - {name: bare, workflow: {name: shipping}}
`)
	out := h.must("workflow", "show", "held").stdout
	wantLines(t, out, "show lacks",
		"nap: sleep for 1d12h\n",
		"until: sleep until params.at\n",
		"approve: wait_for event order.approved key params.order_id, timeout 7d, on_timeout skip\n",
		"any: wait_for event ping without a key, timeout 366d (default), on_timeout fail (default)\n",
		"ship: workflow shipping (its newest version when the task starts), params {'order': params.order_id}\n",
		"bare: workflow shipping (its newest version when the task starts), params {} (default)\n",
		"\nnap      -        -",
	)
	js := h.must("workflow", "show", "held", "-o", "json").stdout
	var v struct {
		Definition json.RawMessage `json:"definition"`
		Effective  []struct {
			Kind        string  `json:"kind"`
			WaitTimeout *string `json:"wait_timeout"`
			OnTimeout   *string `json:"on_timeout"`
		} `json:"effective"`
	}
	if err := json.Unmarshal([]byte(js), &v); err != nil || len(v.Effective) != 6 {
		t.Fatalf("%v\n%s", err, js)
	}
	kinds := []string{"sleep", "sleep", "wait", "wait", "workflow", "workflow"}
	for i, e := range v.Effective {
		if e.Kind != kinds[i] || (e.Kind == "wait") != (e.WaitTimeout != nil && e.OnTimeout != nil) {
			t.Errorf("effective[%d] = %+v, want kind %s with a wait's timeout only for a wait", i, e, kinds[i])
		}
	}
	if e := v.Effective[3]; *e.WaitTimeout != "8784h0m0s" || *e.OnTimeout != "fail" {
		t.Errorf("the defaulted wait's effective timeout %s, on_timeout %s; want 8784h0m0s, fail", *e.WaitTimeout, *e.OnTimeout)
	}
	for _, want := range []string{`"sleep": {`, `"for": "36h0m0s"`, `"until": "params.at"`, `"on_timeout": "skip"`, `"key": null`, `"params": null`} {
		if !strings.Contains(string(v.Definition), want) {
			t.Errorf("the definition lacks %s:\n%s", want, v.Definition)
		}
	}
	if r := h.ffIn(string(v.Definition), "workflow", "apply", "-f", "-"); r.code != 0 {
		t.Errorf("apply of the shown definition: %s", r)
	}
}

// TestWorkflowShowPrintsFlowControl: workflow show prints each task's
// concurrency key, rate limit and priority (the default marked for a task
// with flow control) and the workflow's run-level concurrency with its
// strategy (it printed none of them: found by a new-user trial).
func TestWorkflowShowPrintsFlowControl(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(`
name: payments
concurrency: {key: "params.tenant", limit: 2}
tasks:
  - {name: charge, handler: noop, concurrency: {key: "'customer-' + params.customer", limit: 5}, priority: 3}
  - {name: notify, handler: noop, depends_on: [charge], rate_limit: {key: mail-api, limit: 100, per: 1m}}
  - {name: plain, handler: noop}
`)
	out := h.must("workflow", "show", "payments").stdout
	wantLines(t, out, "show lacks",
		"runs: concurrency key params.tenant, limit 2 open runs, strategy queue (default)\n",
		"charge: concurrency key 'customer-' + params.customer, limit 5\n",
		"charge: priority 3\n",
		"notify: rate_limit key mail-api, 100 per 1m\n",
		"notify: priority 2 (default)\n",
	)
	if strings.Contains(out, "plain: priority") {
		t.Errorf("a task without flow control shows a priority:\n%s", out)
	}
}
