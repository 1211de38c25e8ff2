package cli_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// strand makes the harness's task a stranded READY task: no outbox row,
// READY for an hour. It returns the task and its fencing token.
func (h *harness) strand(run uuid.UUID) (uuid.UUID, int64) {
	h.t.Helper()
	id := h.taskID(run, "a")
	var tok int64
	if err := h.db.QueryRowContext(h.ctx, `
WITH d AS (DELETE FROM outbox WHERE task_run_id = $1)
UPDATE task_runs SET ready_at = now() - interval '1 hour' WHERE id = $1 RETURNING fencing_token`, id).Scan(&tok); err != nil {
		h.t.Fatal(err)
	}
	return id, tok
}

// strandedAge reads a stranded task's age of 3600 to 3609 s (the strand
// set it an hour back; the doctor may run seconds later on a loaded
// machine) as 3600 s, so that the lines compare exactly otherwise.
func strandedAge(out string) string {
	return regexp.MustCompile(`READY for 360[0-9]s`).ReplaceAllString(out, "READY for 3600s")
}

// TestDoctorReportsRepairsAndThenFindsNothing: mode 123 through ffctl. A
// stranded READY task is one line with its ids (exit 1), the same finding
// in -o json; --repair --reason fixes it (exit 0, audited with the
// reason), and the next run finds nothing (exit 0).
func TestDoctorReportsRepairsAndThenFindsNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply("name: one\ntasks:\n  - {name: a, handler: noop}\n")
	run := h.trigger("one")
	id, tok := h.strand(run)
	line := fmt.Sprintf("stranded_ready run=%s task=%s token=%d: READY for 3600s (attempt 1) with no dispatch pending nor confirmed in the last 302s: nothing will start it\n", run, id, tok)
	r := h.ff("doctor")
	if r.code != 1 || strandedAge(r.stdout) != line {
		t.Fatalf("doctor: %s\nwant exit 1 and stdout %q", r, line)
	}
	r = h.ff("doctor", "-o", "json")
	var rep struct {
		Clean    bool `json:"clean"`
		Findings []struct {
			Kind       string    `json:"kind"`
			RunID      uuid.UUID `json:"run_id"`
			TaskRunID  uuid.UUID `json:"task_run_id"`
			Token      int64     `json:"fencing_token"`
			Repairable bool      `json:"repairable"`
		} `json:"findings"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 1 {
		t.Fatalf("doctor -o json: %v\n%s", err, r)
	}
	if rep.Clean || len(rep.Findings) != 1 || rep.Findings[0].Kind != "stranded_ready" || rep.Findings[0].RunID != run ||
		rep.Findings[0].TaskRunID != id || rep.Findings[0].Token != tok || !rep.Findings[0].Repairable {
		t.Fatalf("doctor -o json: %+v", rep)
	}
	r = h.ff("doctor", "--repair", "--reason", "restored from backup")
	want := fmt.Sprintf("repaired: %s  dispatch 1 written with fencing token %d\n", line, tok)
	if r.code != 0 || strandedAge(r.stdout) != want {
		t.Fatalf("doctor --repair: %s\nwant exit 0 and stdout %q", r, want)
	}
	var n int
	if err := h.db.QueryRowContext(h.ctx, `SELECT count(*) FROM doctor_repairs WHERE task_run_id = $1 AND reason = 'restored from backup' AND actor LIKE 'cli:%'`, id).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d audit rows of the repair (%v), want 1", n, err)
	}
	r = h.ff("doctor")
	if r.code != 0 || r.stdout != "doctor: nothing found\n" {
		t.Fatalf("doctor after the repair: %s", r)
	}
}

// TestDoctorRepairLeavesWhatIsAPersonsToDo: a quarantined row is not
// repaired: --repair says what to do about it and exits 1.
func TestDoctorRepairLeavesWhatIsAPersonsToDo(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply("name: one\ntasks:\n  - {name: a, handler: noop}\n")
	run := h.trigger("one")
	var q int64
	if err := h.db.QueryRowContext(h.ctx, `UPDATE outbox SET quarantined_at = now() - interval '1 hour', quarantine_reason = 'too large' RETURNING id`).Scan(&q); err != nil {
		t.Fatal(err)
	}
	r := h.ff("doctor", "--repair", "--reason", "check")
	want := fmt.Sprintf("left to a person: quarantined_outbox run=%s task=%s outbox=%d token=1: quarantined 3600s ago: too large\n"+
		"  the broker refuses the message: fix the cause, then ffctl outbox retry ID --reason R, or ffctl outbox drop ID --reason R\n", run, h.taskID(run, "a"), q)
	if r.code != 1 || r.stdout != want {
		t.Fatalf("doctor --repair: %s\nwant exit 1 and stdout %q", r, want)
	}
}

// TestDoctorBadInputIsRefusedAndWritesNothing: each bad invocation exits
// 2 with its message and changes nothing (a stranded task stays so).
func TestDoctorBadInputIsRefusedAndWritesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply("name: one\ntasks:\n  - {name: a, handler: noop}\n")
	h.strand(h.trigger("one"))
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"repair without reason", []string{"--repair"}, "--reason is required: say why the repair (it is audited)"},
		{"repair blank reason", []string{"--repair", "--reason", " "}, "--reason is required: say why the repair (it is audited)"},
		{"repair NUL reason", []string{"--repair", "--reason", "a\x00b"}, "NUL"},
		{"reason without repair", []string{"--reason", "x"}, "--reason goes with --repair"},
		{"bad output", []string{"-o", "yaml"}, `-o "yaml": want table or json`},
		{"argument", []string{"now"}, `doctor takes no arguments, got "now"`},
		{"zero sweep", []string{"--sweep-interval", "0s"}, "--sweep-interval must be positive, got 0s"},
		{"negative full sweep", []string{"--full-sweep-interval", "-1s"}, "--full-sweep-interval must be positive, got -1s"},
		{"zero redispatch", []string{"--redispatch-after", "0s"}, "--redispatch-after must be positive, got 0s"},
		{"zero clock offset", []string{"--clock-offset-max", "0s"}, "--clock-offset-max must be positive, got 0s"},
		{"zero limit", []string{"--limit", "0"}, "--limit 0: must be between 1 and 10000"},
		{"malformed duration", []string{"--sweep-interval", "soon"}, "invalid value \"soon\" for flag --sweep-interval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := h.snapshot()
			r := h.ff(append([]string{"doctor"}, tc.args...)...)
			expect(t, r, 2, tc.want)
			if r.stdout != "" {
				t.Fatalf("stdout %q on bad input, want nothing", r.stdout)
			}
			h.assertUnchanged(before)
		})
	}
	var n int
	if err := h.db.QueryRowContext(h.ctx, `SELECT count(*) FROM doctor_repairs`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d audit rows after refused repairs (%v)", n, err)
	}
	if r := h.ff("doctor"); r.code != 1 || !strings.HasPrefix(r.stdout, "stranded_ready ") {
		t.Fatalf("the stranded task after the refusals: %s", r)
	}
}
