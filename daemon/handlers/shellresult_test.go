package handlers_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/daemon/handlers"
)

// TestShellReturnsTheJSONItWritesToTheResultFile: what a command writes to
// $FLOWFORGE_RESULT_FILE is its result (an object with the exit code and
// the tails beside its own fields), an element sees its item in
// FLOWFORGE_ITEM, and a file that holds no JSON fails the task
// permanently.
func TestShellReturnsTheJSONItWritesToTheResultFile(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, script, item string
		want               map[string]any // fields of the result
		raw                string         // the whole result, when not an object
		permanent          string         // the error, when the task fails
	}{
		{"an object with the tails beside", `echo hi; echo '{"chunks": ["a", "b"], "stdout": "mine"}' > "$FLOWFORGE_RESULT_FILE"`, "",
			map[string]any{"chunks": []any{"a", "b"}, "exit_code": 0.0, "stdout": "mine", "stderr": ""}, "", ""},
		{"a list as written", `printf '[1, 2, 3]' > "$FLOWFORGE_RESULT_FILE"`, "", nil, `[1,2,3]`, ""},
		{"no file: the tails", `echo hi`, "", map[string]any{"exit_code": 0.0, "stdout": "hi\n"}, "", ""},
		{"a string item as itself", `printf '{"got": "%s"}' "$FLOWFORGE_ITEM" > "$FLOWFORGE_RESULT_FILE"`, `"chunk-1"`,
			map[string]any{"got": "chunk-1"}, "", ""},
		{"an object item as JSON", `printf '%s' "$FLOWFORGE_ITEM" > "$FLOWFORGE_RESULT_FILE"`, `{"k":1}`,
			map[string]any{"k": 1.0}, "", ""},
		{"no JSON", `echo 'not json' > "$FLOWFORGE_RESULT_FILE"`, "", nil, "", "$FLOWFORGE_RESULT_FILE holds no JSON value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cmd, _ := json.Marshal([]string{"sh", "-c", tc.script})
			tk := task(`{"command": `+string(cmd)+`}`, 1)
			if tc.item != "" {
				tk.Item = json.RawMessage(tc.item)
			}
			out, err := handlers.Shell(context.Background(), tk)
			if tc.permanent != "" {
				if !core.IsPermanent(err) || !strings.Contains(err.Error(), tc.permanent) {
					t.Fatalf("err = %v, want a permanent error containing %q", err, tc.permanent)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.raw != "" {
				if string(out) != tc.raw {
					t.Fatalf("result %s, want %s", out, tc.raw)
				}
				return
			}
			var got map[string]any
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("result %s: %v", out, err)
			}
			for k, v := range tc.want {
				gj, _ := json.Marshal(got[k])
				wj, _ := json.Marshal(v)
				if string(gj) != string(wj) {
					t.Errorf("result[%q] = %s, want %s (result %s)", k, gj, wj, out)
				}
			}
		})
	}
}
