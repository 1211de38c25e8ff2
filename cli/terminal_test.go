package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// ttyRun runs ffctl as if its streams were a terminal (tty) or not, with
// the environment variables of vars.
func ttyRun(t *testing.T, url, stdin string, tty bool, vars map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	env := &Env{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errOut,
		terminal: func(any) bool { return tty },
		getenv:   func(k string) string { return vars[k] }}
	code := env.run(t.Context(), append([]string{"ffctl", "--database-url", url}, args...))
	return code, out.String(), errOut.String()
}

// deadTask makes a DEAD task in a fresh database and returns the database
// URL, the store and the task's id.
func deadTask(t *testing.T) (string, *store.Store, uuid.UUID) {
	t.Helper()
	ctx := t.Context()
	s, url := storetest.New(t)
	storetest.Apply(t, s, "name: solo\ntasks:\n  - {name: only, handler: fail}\n")
	run, err := s.GetRun(ctx, storetest.Trigger(t, s, "solo", ""))
	if err != nil {
		t.Fatal(err)
	}
	id := run.Tasks[0].ID
	_, tok, _ := s.TaskStateOf(ctx, id)
	c, ok := storetest.Claim(t, s, id, tok, "w", time.Minute)
	if !ok {
		t.Fatal("claim lost")
	}
	if st, _ := storetest.Finish(t, s, store.FinishRequest{ID: id, Token: c.FencingToken, Outcome: store.OutcomeFailed, Error: "x", Permanent: true}); st != core.TaskDead {
		t.Fatalf("finish: %s", st)
	}
	return url, s, id
}

func TestRequeuePromptsForTheReasonOnATerminal(t *testing.T) {
	t.Parallel()
	url, s, id := deadTask(t)
	code, out, errOut := ttyRun(t, url, "the API is back\n", true, nil, "dead", "requeue", id.String())
	if code != 0 || out != "requeued "+id.String()+"\n" {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "Reason for the requeue (recorded in the audit trail): ") {
		t.Fatalf("no prompt: %q", errOut)
	}
	d, err := s.GetTask(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if ev := d.Events[len(d.Events)-1]; ev.Reason == nil || *ev.Reason != "the API is back" || ev.ToState != "PENDING" {
		t.Fatalf("audit row: %+v", ev)
	}
}

func TestRequeueAnEmptyPromptedReasonIsRefused(t *testing.T) {
	t.Parallel()
	url, s, id := deadTask(t)
	code, _, errOut := ttyRun(t, url, "\n", true, nil, "dead", "requeue", id.String())
	if code != ExitBadUsage || !strings.Contains(errOut, "--reason is required") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if st, _, _ := s.TaskStateOf(t.Context(), id); st != core.TaskDead {
		t.Fatalf("task is %s", st)
	}
}

func TestRequeueAllAsksForConfirmationOnATerminal(t *testing.T) {
	t.Parallel()
	url, s, id := deadTask(t)
	// "n" (or anything but y/yes): nothing changes, exit 1.
	code, out, errOut := ttyRun(t, url, "n\n", true, nil, "dead", "requeue", "--all", "--workflow", "solo", "--reason", "r")
	if code != ExitFailed || out != "" || !strings.Contains(errOut, "Requeue 1 DEAD task(s) of workflow solo? [y/N] ") || !strings.Contains(errOut, "requeue cancelled: nothing changed") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if st, _, _ := s.TaskStateOf(t.Context(), id); st != core.TaskDead {
		t.Fatalf("task is %s after a declined confirmation", st)
	}
	// The reason is prompted first, then the confirmation.
	code, out, errOut = ttyRun(t, url, "disk freed\nyes\n", true, nil, "dead", "requeue", "--all")
	if code != 0 || out != "requeued "+id.String()+"\n" || !strings.Contains(errOut, "Reason for the requeue") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if st, _, _ := s.TaskStateOf(t.Context(), id); st != core.TaskPending {
		t.Fatalf("task is %s after a confirmed requeue", st)
	}
}

func TestTablesAreColouredOnlyOnATerminalWithoutNoColor(t *testing.T) {
	t.Parallel()
	url, _, _ := deadTask(t)
	_, plain, _ := ttyRun(t, url, "", false, nil, "dead", "list")
	_, coloured, _ := ttyRun(t, url, "", true, nil, "dead", "list")
	_, noColor, _ := ttyRun(t, url, "", true, map[string]string{"NO_COLOR": "1"}, "dead", "list")
	if strings.Contains(plain, "\x1b[") || strings.Contains(noColor, "\x1b[") {
		t.Fatalf("escape codes off a terminal or under NO_COLOR:\n%q\n%q", plain, noColor)
	}
	if !strings.Contains(coloured, "\x1b[") || !strings.Contains(coloured, "DEAD") {
		t.Fatalf("no colour on a terminal: %q", coloured)
	}
	if noColor != plain {
		t.Fatalf("NO_COLOR output differs from piped output:\n%s\n%s", noColor, plain)
	}
	// Colour does not move the columns.
	if stripANSI(coloured) != plain {
		t.Fatalf("coloured table, once stripped, differs:\n%s\n%s", stripANSI(coloured), plain)
	}
}

func stripANSI(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == 0x1b && i+1 < len(s) && s[i+1] == '[' {
			j := i + 2
			for j < len(s) && (s[j] < 0x40 || s[j] > 0x7e) {
				j++
			}
			i = j
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func TestUseColor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		tty     bool
		noColor string
		want    bool
	}{{true, "", true}, {true, "1", false}, {true, "0", false}, {false, "", false}} {
		if got := useColor(tc.tty, tc.noColor); got != tc.want {
			t.Errorf("useColor(%v, %q) = %v", tc.tty, tc.noColor, got)
		}
	}
}

func TestTableAlignsWideAndColouredCells(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	tb := newTable(&b, newColours(true), "NAME", "STATE", "NOTE")
	tb.row("日本", "RUNNING", "x")
	tb.row("a", "DEAD", "longer note")
	if err := tb.flush(); err != nil {
		t.Fatal(err)
	}
	want := "NAME  STATE    NOTE\n日本  RUNNING  x\na     DEAD     longer note\n"
	if got := stripANSI(b.String()); got != want {
		t.Fatalf("table:\n%q\nwant\n%q", got, want)
	}
}

func TestRunWaitShowsProgressOnATerminal(t *testing.T) {
	t.Parallel()
	url, s, id := deadTask(t)
	d, err := s.GetTask(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Advance(t.Context(), nil, 10, "test"); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := ttyRun(t, url, "", true, nil, "run", "wait", d.RunID.String())
	if code != ExitFailed || !strings.Contains(errOut, "run "+d.RunID.String()[:8]+": FAILED, 1/1 tasks done (DEAD 1)") {
		t.Fatalf("exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	// Piped: no progress at all.
	_, _, errOut = ttyRun(t, url, "", false, nil, "run", "wait", d.RunID.String())
	if strings.Contains(errOut, "tasks done") {
		t.Fatalf("progress shown when piped: %q", errOut)
	}
}

// TestRunCancelPromptsForTheReasonOnATerminal: like a requeue, a cancel
// without --reason asks for it on a terminal and audits the answer; off a
// terminal it is a usage error (issue 11: it was cancelled silently with
// "cancelled by operator").
func TestRunCancelPromptsForTheReasonOnATerminal(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, url := storetest.New(t)
	storetest.Apply(t, s, "name: two\ntasks:\n  - {name: a, handler: noop}\n  - {name: b, handler: noop}\n")
	runID := storetest.Trigger(t, s, "two", "")
	code, out, errOut := ttyRun(t, url, "", false, nil, "run", "cancel", runID.String())
	if code != ExitBadUsage || out != "" || !strings.Contains(errOut, "--reason is required: say why the run is cancelled") {
		t.Fatalf("cancel without a reason off a terminal: exit %d\n%s\n%s", code, out, errOut)
	}
	if r, err := s.GetRun(ctx, runID); err != nil || r.CancelRequestedAt != nil {
		t.Fatalf("a refused cancel touched the run: %+v %v", r, err)
	}
	code, out, errOut = ttyRun(t, url, "wrong input file\n", true, nil, "run", "cancel", runID.String()[:8])
	if code != 0 || !strings.Contains(out, "cancellation requested") || !strings.Contains(errOut, "Reason for the cancel (recorded in the audit trail): ") {
		t.Fatalf("cancel on a terminal: exit %d\n%s\n%s", code, out, errOut)
	}
	r, err := s.GetRun(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.GetTask(ctx, r.Tasks[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if ev := d.Events[len(d.Events)-1]; ev.Reason == nil || *ev.Reason != "run cancelled: wrong input file" || ev.ToState != "CANCELLED" {
		t.Fatalf("audit row: %+v", ev)
	}
}
