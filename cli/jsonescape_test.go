package cli_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode"

	"github.com/flowforge/flowforge/core/store"
)

// TestJSONOutputEscapesC1AndBidiCharacters: stored text holding a C1 CSI
// (U+009B, which many terminals obey like ESC [), DEL and a right-to-left
// override (U+202E) reached the terminal raw through -o json, which
// encoding/json does not escape. Now every JSON output escapes them as
// \uXXXX: no raw byte of them is written, and the decoded value is the
// stored text unchanged.
func TestJSONOutputEscapesC1AndBidiCharacters(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const evil = "boom \u009b2J\u0085 \u202eexe.txt\u2066 \x7f"
	h.apply(twoStep)
	runID := h.trigger("twostep")
	a := h.claim(h.taskID(runID, "a"), "w-test")
	if _, ok, err := h.s.Finish(h.ctx, store.FinishRequest{ID: a.ID, Token: a.FencingToken, Outcome: store.OutcomeSucceeded,
		Result: json.RawMessage(`{"out": "x\u009b31m\u202ey"}`), WorkerID: "w-test"}); err != nil || !ok {
		t.Fatalf("finish a: ok=%v err=%v", ok, err)
	}
	h.advance()
	b := h.taskID(runID, "b")
	h.kill(b, evil)
	h.advance()

	cases := []struct {
		name string
		args []string
		// check finds the stored text in the decoded output.
		check func(t *testing.T, out string)
	}{
		{"run show", []string{"run", "show", runID.String(), "-o", "json"}, func(t *testing.T, out string) {
			if !strings.Contains(out, `"error": "boom \u009b2J\u0085 \u202eexe.txt\u2066 \u007f"`) {
				t.Errorf("the error is not escaped as \\uXXXX:\n%s", out)
			}
		}},
		{"task show (result)", []string{"task", "show", a.ID.String(), "-o", "json"}, func(t *testing.T, out string) {
			var v struct {
				Result struct {
					Out string `json:"out"`
				} `json:"result"`
			}
			if err := json.Unmarshal([]byte(out), &v); err != nil || v.Result.Out != "x\u009b31m\u202ey" {
				t.Errorf("decoded result %+v (err %v), want the stored text:\n%s", v, err, out)
			}
		}},
		{"task show (error)", []string{"task", "show", b.String(), "-o", "json"}, func(t *testing.T, out string) {
			var v struct {
				Error string `json:"error"`
			}
			if err := json.Unmarshal([]byte(out), &v); err != nil || v.Error != evil {
				t.Errorf("decoded error %q (err %v), want %q", v.Error, err, evil)
			}
		}},
		{"dead list", []string{"dead", "list", "-o", "json"}, func(t *testing.T, out string) {
			var v []struct {
				Error string `json:"error"`
			}
			if err := json.Unmarshal([]byte(out), &v); err != nil || len(v) != 1 || v[0].Error != evil {
				t.Errorf("decoded %+v (err %v), want one task with error %q", v, err, evil)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := h.must(c.args...).stdout
			for i, r := range out {
				if r == 0x7f || (r >= 0x80 && r < 0xa0) || unicode.Is(unicode.Bidi_Control, r) {
					t.Fatalf("raw %U at byte %d of the JSON output:\n%q", r, i, out)
				}
			}
			if !json.Valid([]byte(out)) {
				t.Fatalf("invalid JSON:\n%s", out)
			}
			c.check(t, out)
		})
	}
}
