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
	for _, want := range []string{
		"TASK   HANDLER  DEPENDS ON  MAX ATTEMPTS  BACKOFF INITIAL  BACKOFF MAX             TIMEOUT\n",
		"plain  shell    -           3 (default)   1s (default)     1m (default)            none (default)\n",
		"set    noop     -           5             250ms            2h                      1m30s\n",
		"slow   noop     -           3 (default)   2m               2m (= initial_backoff)  none (default)\n",
		"Retry n waits a random time in [0, min(max, initial × 2^(n-1))] (full jitter); (default): not set in the file.\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("show table lacks %q:\n%s", want, out)
		}
	}

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
		for k, v := range map[string]any{"kind": "task", "trigger_rule": "all_success", "when": "", "for_each": "", "max_items": nil, "on_failure": false} {
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
