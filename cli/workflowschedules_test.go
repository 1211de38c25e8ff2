package cli_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core/schedule"
	"github.com/flowforge/flowforge/core/store"
)

const etlFile = `name: etl
tasks:
  - {name: load, handler: noop, idempotency_key: "load-{{ .Params.date }}"}
schedules:
  - name: etl-nightly
    cron: "30 2 * * *"
    timezone: Europe/Berlin
    params: {date: today}
    catchup: one
    catchup_window: 1h
  - name: etl-hourly
    cron: "@hourly"
    params: {date: now}
    overlap: allow
    jitter: 30s
`

// expectOut asserts exit 0 and that stdout contains every piece of want.
func expectOut(t *testing.T, r result, want ...string) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit code %d, want 0\n%s", r.code, r)
	}
	for _, w := range want {
		if !strings.Contains(r.stdout, w) {
			t.Fatalf("stdout does not contain %q\n%s", w, r)
		}
	}
}

// scheduleRows is name -> "workflow owner cron zone paused" of every
// schedule, and the number of schedule_events rows.
func (h *harness) scheduleRows() (map[string]string, int) {
	h.t.Helper()
	rows, err := h.db.QueryContext(h.ctx, `SELECT name, workflow_name || ' ' || owner || ' ' || cron || ' ' || timezone || ' ' || paused::text FROM schedules`)
	if err != nil {
		h.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var n, v string
		if err := rows.Scan(&n, &v); err != nil {
			h.t.Fatal(err)
		}
		out[n] = v
	}
	var events int
	if err := h.db.QueryRowContext(h.ctx, `SELECT count(*) FROM schedule_events`).Scan(&events); err != nil {
		h.t.Fatal(err)
	}
	return out, events
}

// TestWorkflowApplyOwnsTheFilesSchedules: a file's schedules: are created
// with it, left alone when unchanged, updated when changed (keeping an
// operator's pause), deleted when no longer in the file; each change is
// audited and printed.
func TestWorkflowApplyOwnsTheFilesSchedules(t *testing.T) {
	t.Parallel()
	h := newHarness(t)

	r := h.ffIn(etlFile, "workflow", "apply", "-f", "-")
	expectOut(t, r, "workflow etl: stored version 1 (1 tasks)\nschedule etl-nightly: created\nschedule etl-hourly: created\n")
	sc, err := h.s.GetSchedule(h.ctx, "etl-nightly")
	if err != nil {
		t.Fatal(err)
	}
	if sc.Owner != schedule.OwnerFile || sc.Workflow != "etl" || sc.Timezone != "Europe/Berlin" || sc.CatchupWindowMS != 3600000 ||
		string(sc.Catchup) != "one" || string(sc.Overlap) != "skip" || string(sc.Params) != `{"date": "today"}` {
		t.Fatalf("etl-nightly stored as %+v", sc)
	}
	if hr, _ := h.s.GetSchedule(h.ctx, "etl-hourly"); hr.JitterMS != 30000 || string(hr.Overlap) != "allow" || hr.Timezone != "UTC" {
		t.Fatalf("etl-hourly stored as %+v", hr)
	}
	_, events := h.scheduleRows()
	if events != 2 {
		t.Fatalf("%d schedule events after the first apply, want 2 (two creates)", events)
	}

	// Unchanged: nothing written, not even an audit row.
	r = h.ffIn(etlFile, "workflow", "apply", "-f", "-", "-o", "json")
	expectOut(t, r)
	type change struct{ Name, Action string }
	if got := decode[struct {
		Version   int
		Schedules []change
	}](t, r.stdout); got.Version != 1 || len(got.Schedules) != 2 || got.Schedules[0] != (change{"etl-nightly", "unchanged"}) || got.Schedules[1] != (change{"etl-hourly", "unchanged"}) {
		t.Fatalf("json: %+v", got)
	}
	if _, n := h.scheduleRows(); n != 2 {
		t.Fatalf("an unchanged apply wrote %d schedule events", n-2)
	}

	// An operator pauses the nightly one (allowed: it is operational);
	// a changed cron keeps the pause and makes no new version.
	if _, err := h.s.PauseSchedule(h.ctx, "etl-nightly", "ops", "maintenance"); err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(etlFile, `"30 2 * * *"`, `"45 3 * * *"`, 1)
	r = h.ffIn(changed, "workflow", "apply", "-f", "-")
	expectOut(t, r, "workflow etl: unchanged (version 1)\nschedule etl-nightly: updated\nschedule etl-hourly: unchanged\n")
	rows, _ := h.scheduleRows()
	if rows["etl-nightly"] != "etl file 45 3 * * * Europe/Berlin true" {
		t.Fatalf("etl-nightly after the update: %q (want the new cron, still paused)", rows["etl-nightly"])
	}

	// Gone from the file: deleted, audited with why.
	only := etlFile[:strings.Index(etlFile, "  - name: etl-hourly")]
	r = h.ffIn(strings.Replace(only, `"30 2 * * *"`, `"45 3 * * *"`, 1), "workflow", "apply", "-f", "-")
	expectOut(t, r, "schedule etl-nightly: unchanged\nschedule etl-hourly: deleted\n")
	if rows, _ := h.scheduleRows(); len(rows) != 1 || rows["etl-hourly"] != "" {
		t.Fatalf("schedules after removing etl-hourly from the file: %v", rows)
	}
	var why string
	if err := h.db.QueryRowContext(h.ctx, `SELECT reason FROM schedule_events WHERE schedule_name = 'etl-hourly' AND action = 'delete'`).Scan(&why); err != nil {
		t.Fatal(err)
	}
	if why != "workflow file of etl (version 1): no longer in the file" {
		t.Fatalf("delete audited with reason %q", why)
	}

	// A file without schedules: deletes the last one.
	r = h.ffIn("name: etl\ntasks:\n  - {name: load, handler: noop, idempotency_key: \"load-{{ .Params.date }}\"}\n", "workflow", "apply", "-f", "-")
	expectOut(t, r, "workflow etl: unchanged (version 1)\nschedule etl-nightly: deleted\n")
}

// TestWorkflowApplyRefusesAScheduleNameItDoesNotOwn: a name held by a
// CLI schedule or another workflow's file is refused, naming it, and
// nothing of the apply is written (not the new version, not the other
// schedules).
func TestWorkflowApplyRefusesAScheduleNameItDoesNotOwn(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply("name: other\ntasks:\n  - {name: a, handler: noop}\nschedules:\n  - {name: other-daily, cron: '@daily'}\n")
	if _, err := h.s.CreateSchedule(h.ctx, schedule.Definition{Name: "by-hand", Workflow: "other", Cron: "@hourly"}, "ops", ""); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, clash, want string }{
		{"cli-owned", "by-hand", `schedule "by-hand" already exists, created with ffctl schedule create: rename it in the file or delete that one first (nothing applied)`},
		{"other file", "other-daily", `schedule "other-daily" is declared in the workflow file of other: rename it in one of the files (nothing applied)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := h.snapshot()
			rowsBefore, eventsBefore := h.scheduleRows()
			src := "name: etl\ntasks:\n  - {name: a, handler: noop}\nschedules:\n  - {name: etl-fresh, cron: '@daily'}\n  - {name: " + c.clash + ", cron: '@weekly'}\n"
			r := h.ffIn(src, "workflow", "apply", "-f", "-")
			expect(t, r, 1, c.want)
			h.assertUnchanged(before)
			rows, events := h.scheduleRows()
			if len(rows) != len(rowsBefore) || events != eventsBefore || rows[c.clash] != rowsBefore[c.clash] {
				t.Fatalf("schedules changed: %v (%d events), before %v (%d)", rows, events, rowsBefore, eventsBefore)
			}
		})
	}
}

// TestWorkflowApplyRefusesBadSchedules: a bad entry is refused before
// anything is written (exit 2), naming the schedule and what is wrong.
func TestWorkflowApplyRefusesBadSchedules(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const head = "name: etl\ntasks:\n  - {name: load, handler: noop, idempotency_key: \"load-{{ .Params.date }}\"}\nschedules:\n"
	for _, c := range []struct{ name, entries, want string }{
		{"bad cron", "  - {name: n1, cron: '61 * * * *', params: {date: x}}\n",
			`-: schedule "n1": invalid schedule: cron "61 * * * *": end of range (61) above maximum (59): 61`},
		{"@every below 1s", "  - {name: n10, cron: '@every 0s', params: {date: x}}\n",
			`-: schedule "n10": invalid schedule: cron "@every 0s": an @every interval must be at least 1s, got 0s`},
		{"never fires", "  - {name: n11, cron: '0 0 30 2 *', params: {date: x}}\n",
			`-: schedule "n11": invalid schedule: cron "0 0 30 2 *": never fires (no time matches it)`},
		{"jitter not below the gap", "  - {name: n12, cron: '@hourly', jitter: 2h, params: {date: x}}\n",
			`-: schedule "n12": invalid schedule: jitter 2h0m0s is not below the gap between the schedule's fire times (1h0m0s): ticks fire in order, so a larger jitter delays every later tick`},
		{"unknown zone", "  - {name: n2, cron: '@daily', timezone: Mars/Olympus, params: {date: x}}\n",
			`-: schedule "n2": invalid schedule: unknown time zone "Mars/Olympus"`},
		{"unknown field", "  - {name: n3, cronn: '@daily'}\n",
			`-: invalid workflow: schedule "n3": unknown field "cronn"`},
		{"missing cron", "  - {name: n4, params: {date: x}}\n",
			`-: schedule "n4": invalid schedule: cron expression is missing`},
		{"bad duration", "  - {name: n5, cron: '@daily', jitter: 10, params: {date: x}}\n",
			`-: invalid workflow: schedule "n5": jitter: want a duration string such as "30s" or "5m", got 10`},
		{"catch-up without window", "  - {name: n6, cron: '@daily', catchup: all, params: {date: x}}\n",
			`-: schedule "n6": invalid schedule: catch-up all needs a catch-up window (how far back a missed tick may still fire)`},
		{"window without catch-up", "  - {name: n13, cron: '@daily', catchup_window: 1h, params: {date: x}}\n",
			`-: schedule "n13": invalid schedule: a catch-up window (1h0m0s) applies only with catch-up one or all, and catch-up is none (set catch-up, or leave the window out)`},
		{"window with catch-up none", "  - {name: n14, cron: '@daily', catchup: none, catchup_window: 1h, params: {date: x}}\n",
			`-: schedule "n14": invalid schedule: a catch-up window (1h0m0s) applies only with catch-up one or all, and catch-up is none (set catch-up, or leave the window out)`},
		{"bad overlap", "  - {name: n7, cron: '@daily', overlap: queue, params: {date: x}}\n",
			`-: schedule "n7": invalid schedule: overlap policy "queue": want skip, allow or cancel-previous`},
		{"params the key cannot render from", "  - {name: n8, cron: '@daily'}\n",
			`-: schedule "n8": invalid params: render idempotency_key of task "load"`},
		{"no name", "  - {cron: '@daily'}\n",
			`-: invalid workflow: schedules[0]: schedule name is missing`},
		{"bad name", "  - {name: Nightly, cron: '@daily'}\n",
			`-: invalid workflow: schedule "Nightly": schedule name "Nightly" must match [a-z0-9][a-z0-9._-]*`},
		{"twice", "  - {name: n9, cron: '@daily', params: {date: x}}\n  - {name: n9, cron: '@hourly', params: {date: x}}\n",
			`-: invalid workflow: schedule "n9" is declared twice`},
		{"not a list", "  nightly: {cron: '@daily'}\n",
			`-: invalid workflow: schedules: want a list of schedules (name, cron, ...)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := h.snapshot()
			r := h.ffIn(head+c.entries, "workflow", "apply", "-f", "-")
			expect(t, r, 2, c.want)
			h.assertUnchanged(before)
			if rows, events := h.scheduleRows(); len(rows) != 0 || events != 0 {
				t.Fatalf("schedules written: %v, %d events", rows, events)
			}
		})
	}
}

// TestFileOwnedScheduleIsPausedButNotDeletedByHand: pause and resume of a
// file-owned schedule are allowed (operational); delete is refused, saying
// where to remove it, and deletes nothing.
func TestFileOwnedScheduleIsPausedButNotDeletedByHand(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(etlFile)
	before, events := h.scheduleRows()
	r := h.ff("schedule", "delete", "etl-nightly", "--reason", "cleanup")
	expect(t, r, 1, `schedule "etl-nightly" is declared in the workflow file of etl; remove it there`)
	if after, n := h.scheduleRows(); len(after) != len(before) || n != events {
		t.Fatalf("the refused ffctl schedule delete wrote: %v (%d events)", after, n)
	}
	expectOut(t, h.ff("schedule", "pause", "etl-hourly", "--reason", "maintenance"))
	expectOut(t, h.ff("schedule", "resume", "etl-hourly", "--reason", "done"))
	err := h.s.DeleteSchedule(h.ctx, "etl-nightly", "ops", "cleanup")
	if !errors.Is(err, store.ErrConflict) || err.Error() != `conflict: schedule "etl-nightly" is declared in the workflow file of etl; remove it there` {
		t.Fatalf("delete of a file-owned schedule: %v", err)
	}
	if _, err := h.s.GetSchedule(h.ctx, "etl-nightly"); err != nil {
		t.Fatalf("the refused delete deleted it: %v", err)
	}
	if _, err := h.s.PauseSchedule(h.ctx, "etl-nightly", "ops", "maintenance"); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if _, err := h.s.ResumeSchedule(h.ctx, "etl-nightly", "ops", "done"); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if _, err := h.s.TriggerScheduleNow(h.ctx, "etl-nightly", "ops", "backfill"); err != nil {
		t.Fatalf("trigger-now: %v", err)
	}
}

// TestWorkflowApplyWarnsOfCLISchedulesTheNewVersionBreaks: a new version
// whose task key needs a param that a schedule created with `ffctl
// schedule create` does not pass is stored (exit 0) with a warning naming
// the schedule (plain and in -o json's warnings): every tick of it would
// record failed (a trial finding: the apply said nothing). Schedules whose
// params fit, and those of other workflows, are not named.
func TestWorkflowApplyWarnsOfCLISchedulesTheNewVersionBreaks(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply("name: quick\ntasks:\n  - {name: a, handler: noop}\n")
	h.apply("name: other\ntasks:\n  - {name: a, handler: noop}\n")
	h.must("schedule", "create", "bare", "--workflow", "quick", "--cron", "@hourly")
	h.must("schedule", "create", "dated", "--workflow", "quick", "--cron", "@daily", "--param", "date=today")
	h.must("schedule", "create", "elsewhere", "--workflow", "other", "--cron", "@hourly")

	r := h.ffIn("name: quick\ntasks:\n  - {name: a, handler: noop, idempotency_key: \"a-{{ .Params.date }}\"}\n", "workflow", "apply", "-f", "-")
	expect(t, r, 0, "warning: schedule bare: its params do not fit version 2:", "every tick will record failed")
	if strings.Contains(r.stderr, "schedule dated") || strings.Contains(r.stderr, "elsewhere") {
		t.Fatalf("a schedule whose params fit, or of another workflow, was named:\n%s", r)
	}
	r = h.ffIn("name: quick\ntasks:\n  - {name: a, handler: noop, idempotency_key: \"b-{{ .Params.date }}\"}\n", "workflow", "apply", "-f", "-", "-o", "json")
	out := decode[struct {
		Version  int      `json:"version"`
		Warnings []string `json:"warnings"`
	}](t, r.stdout)
	var named []string // the schedule warnings (no worker runs here: the handler warning is there too)
	for _, w := range out.Warnings {
		if strings.HasPrefix(w, "schedule ") {
			named = append(named, w)
		}
	}
	if r.code != 0 || out.Version != 3 || len(named) != 1 || !strings.HasPrefix(named[0], "schedule bare: its params do not fit version 3:") {
		t.Fatalf("json apply: %+v\n%s", out, r)
	}
}
