package cli_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// hostileText holds, between plain words, an escape sequence (ESC), DEL,
// every C1 control (U+0080-U+009F; U+009B is a one-byte CSI that many
// terminals obey like ESC [), every bidirectional formatting character
// (ALM, LRM, RLM, the embeddings and overrides U+202A-U+202E, the isolates
// U+2066-U+2069) and the line and paragraph separators.
func hostileText() string {
	var b strings.Builder
	b.WriteString("boom \x1b[2J \x7f ")
	for r := rune(0x80); r < 0xa0; r++ {
		b.WriteRune(r)
	}
	b.WriteString(" \u061c\u200e\u200f \u202aa\u202bb\u202cc\u202dd\u202eexe.txt \u2066e\u2067f\u2068g\u2069 \u2028\u2029 end")
	return b.String()
}

// hostileRun is a run of two root tasks whose stored text is hostileText:
// ok SUCCEEDED with it in its result; bad claimed by a worker whose id
// holds it (an older binary did not check ids) and DEAD with it as its
// error. The workflow's description holds it too.
type hostileRun struct {
	run, ok, bad uuid.UUID
	text, worker string
}

func newHostileRun(h *harness) hostileRun {
	h.t.Helper()
	text := hostileText()
	hr := hostileRun{text: text, worker: "w-" + text}
	// YAML's double-quoted escapes include Go's \xNN and \uNNNN.
	h.apply("name: evil-wf\ndescription: " + strconv.QuoteToASCII(text) + "\ntasks:\n  - {name: ok, handler: noop}\n  - {name: bad, handler: fail}\n")
	hr.run = h.trigger("evil-wf")
	hr.ok, hr.bad = h.taskID(hr.run, "ok"), h.taskID(hr.run, "bad")
	result, err := json.Marshal(map[string]string{"out": text})
	if err != nil {
		h.t.Fatal(err)
	}
	c := h.claim(hr.ok, "w-test")
	if _, ok := storetest.Finish(h.t, h.s, store.FinishRequest{ID: c.ID, Token: c.FencingToken, Outcome: store.OutcomeSucceeded,
		Result: result, WorkerID: "w-test"}); !ok {
		h.t.Fatal("finish ok: lease lost")
	}
	c = h.claim(hr.bad, hr.worker)
	if st, ok := storetest.Finish(h.t, h.s, store.FinishRequest{ID: c.ID, Token: c.FencingToken, Outcome: store.OutcomeFailed,
		Error: text, Permanent: true, WorkerID: hr.worker}); !ok || st != core.TaskDead {
		h.t.Fatalf("finish bad: %s ok=%v", st, ok)
	}
	h.advance()
	return hr
}

// rawControls returns the control characters (C0, DEL, C1), bidi
// formatting characters and line separators in out, by Unicode's tables
// (not core.TerminalControl, the definition under test), but the newlines
// that end lines.
func rawControls(out string) []rune {
	var raw []rune
	for _, r := range out {
		if r != '\n' && (unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || r == 0x2028 || r == 0x2029) {
			raw = append(raw, r)
		}
	}
	return raw
}

// TestTablesShowNoRawControlOrBidiCharacters feeds every C1 control, ESC,
// DEL, every bidi override, embedding and isolate, and the line separators
// through a task's error and worker id and a workflow's description: none
// reaches the terminal raw through the table output of run show, task
// show, dead list and workflow show; each is shown as a visible
// placeholder.
func TestTablesShowNoRawControlOrBidiCharacters(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	hr := newHostileRun(h)
	every := []string{`\x1b[2J`, `\x7f`, `\u0080`, `\u009b`, `\u202e`, `\u2069`, `\u2029`}
	for _, tc := range []struct {
		name string
		args []string
		want []string // placeholders shown (dead list cuts its ERROR cell short)
	}{
		{"run show", []string{"run", "show", hr.run.String()}, every},
		{"task show", []string{"task", "show", hr.bad.String()}, every},
		{"dead list", []string{"dead", "list"}, every[:3]},
		{"workflow show", []string{"workflow", "show", "evil-wf"}, every},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := h.must(tc.args...).stdout
			if !utf8.ValidString(out) {
				t.Fatalf("output is not UTF-8: %q", out)
			}
			if raw := rawControls(out); len(raw) > 0 {
				t.Errorf("raw %U in the table:\n%q", raw, out)
			}
			for _, want := range tc.want {
				if !strings.Contains(out, want) {
					t.Errorf("no %s placeholder in the table:\n%s", want, out)
				}
			}
		})
	}
}

// TestJSONOutputEscapesC1AndBidiCharacters: stored text holding a C1 CSI
// (U+009B, which many terminals obey like ESC [), DEL and a right-to-left
// override (U+202E) reached the terminal raw through -o json, which
// encoding/json does not escape. Now every JSON output escapes them (and
// every other C1 control and bidi character) as \uXXXX: no raw byte of
// them is written, and the decoded value is the stored text unchanged.
func TestJSONOutputEscapesC1AndBidiCharacters(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	hr := newHostileRun(h)
	type task struct {
		ID       uuid.UUID `json:"id"`
		Error    string    `json:"error"`
		WorkerID string    `json:"worker_id"`
	}
	cases := []struct {
		name string
		args []string
		// check finds the stored text in the decoded output.
		check func(t *testing.T, out string)
	}{
		{"run show", []string{"run", "show", hr.run.String(), "-o", "json"}, func(t *testing.T, out string) {
			if !strings.Contains(out, `\u009b`) || !strings.Contains(out, `\u202eexe.txt`) {
				t.Errorf("the error is not escaped as \\uXXXX:\n%s", out)
			}
			v := decode[struct{ Tasks []task }](t, out)
			for _, tk := range v.Tasks {
				if tk.ID == hr.bad && (tk.Error != hr.text || tk.WorkerID != hr.worker) {
					t.Errorf("decoded task %+v, want the stored error and worker id", tk)
				}
			}
		}},
		{"task show (result)", []string{"task", "show", hr.ok.String(), "-o", "json"}, func(t *testing.T, out string) {
			v := decode[struct {
				Result struct {
					Out string `json:"out"`
				} `json:"result"`
			}](t, out)
			if v.Result.Out != hr.text {
				t.Errorf("decoded result %q, want the stored text", v.Result.Out)
			}
		}},
		{"task show (error, worker, history)", []string{"task", "show", hr.bad.String(), "-o", "json"}, func(t *testing.T, out string) {
			v := decode[struct {
				task
				Events   []core.TaskEvent `json:"events"`
				Attempts []core.Attempt   `json:"attempts"`
			}](t, out)
			if v.Error != hr.text || v.WorkerID != hr.worker {
				t.Errorf("decoded error %q worker %q, want the stored ones", v.Error, v.WorkerID)
			}
			if len(v.Attempts) != 1 || *v.Attempts[0].WorkerID != hr.worker || *v.Attempts[0].Error != hr.text {
				t.Errorf("decoded attempts %+v, want one by the stored worker with the stored error", v.Attempts)
			}
			if last := v.Events[len(v.Events)-1]; last.Actor != hr.worker || *last.Reason != hr.text {
				t.Errorf("decoded last event %+v, want the stored actor and reason", last)
			}
		}},
		{"dead list", []string{"dead", "list", "-o", "json"}, func(t *testing.T, out string) {
			v := decode[[]task](t, out)
			if len(v) != 1 || v[0].Error != hr.text || v[0].WorkerID != hr.worker {
				t.Errorf("decoded %+v, want one task with the stored error and worker id", v)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := h.must(c.args...).stdout
			if raw := rawControls(out); len(raw) > 0 {
				t.Fatalf("raw %U in the JSON output:\n%q", raw, out)
			}
			if !json.Valid([]byte(out)) {
				t.Fatalf("invalid JSON:\n%s", out)
			}
			c.check(t, out)
		})
	}
}
