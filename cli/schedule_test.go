package cli_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

const scheduledYAML = `
name: report
tasks:
  - {name: only, handler: noop}
`

func TestScheduleCommands(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(scheduledYAML)
	r := h.must("schedule", "create", "nightly", "--workflow", "report", "--cron", "30 2 * * *", "--timezone", "Europe/Berlin",
		"--param", "region=eu", "--catchup", "one", "--catchup-window", "1d", "--jitter", "90s", "-o", "json")
	var created struct {
		Name            string            `json:"name"`
		Workflow        string            `json:"workflow"`
		Timezone        string            `json:"timezone"`
		Params          map[string]string `json:"params"`
		Overlap         string            `json:"overlap"`
		Catchup         string            `json:"catchup"`
		CatchupWindowMS int64             `json:"catchup_window_ms"`
		JitterMS        int64             `json:"jitter_ms"`
		Owner           string            `json:"owner"`
		NextFireAt      *time.Time        `json:"next_fire_at"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &created); err != nil {
		t.Fatalf("create -o json: %v\n%s", err, r.stdout)
	}
	if created.Name != "nightly" || created.Workflow != "report" || created.Timezone != "Europe/Berlin" || created.Params["region"] != "eu" ||
		created.Overlap != "skip" || created.Catchup != "one" || created.CatchupWindowMS != 86400000 || created.JitterMS != 90000 || created.Owner != "cli" || created.NextFireAt == nil {
		t.Fatalf("created %+v\n%s", created, r.stdout)
	}
	if loc, _ := time.LoadLocation("Europe/Berlin"); created.NextFireAt.In(loc).Format("15:04") != "02:30" {
		t.Fatalf("next fire %v is not 02:30 in Berlin", created.NextFireAt)
	}

	r = h.must("schedule", "show", "nightly", "-o", "json")
	var shown struct {
		NextFireTimes []struct{ Local, UTC string } `json:"next_fire_times"`
		Ticks         []json.RawMessage             `json:"ticks"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &shown); err != nil {
		t.Fatal(err)
	}
	if len(shown.NextFireTimes) != 5 || !strings.Contains(shown.NextFireTimes[0].Local, "T02:30:00+0") || !strings.HasSuffix(shown.NextFireTimes[0].UTC, "Z") || len(shown.Ticks) != 0 {
		t.Fatalf("show: %s", r.stdout)
	}
	r = h.must("schedule", "show", "nightly")
	for _, want := range []string{"cron:     30 2 * * * (Europe/Berlin)", "catch-up: one within 24h0m0s", "next fire times (Europe/Berlin / UTC):", "last ticks:\n  - (none yet)"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("show lacks %q:\n%s", want, r.stdout)
		}
	}

	r = h.must("schedule", "trigger-now", "nightly", "--reason", "backfill", "-o", "json")
	var tick struct {
		Schedule string `json:"schedule"`
		Manual   bool   `json:"manual"`
		Outcome  string `json:"outcome"`
		RunID    string `json:"run_id"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &tick); err != nil || tick.Schedule != "nightly" || !tick.Manual || tick.Outcome != "fired" || tick.RunID == "" {
		t.Fatalf("trigger-now: %v %s", err, r.stdout)
	}
	r = h.must("schedule", "show", "nightly")
	if !strings.Contains(r.stdout, tick.RunID) || !strings.Contains(r.stdout, "RUNNING") {
		t.Fatalf("show does not list the manual tick's run:\n%s", r.stdout)
	}

	// Its workflow paused with mode drop: the tick is printed, dropped, and
	// the exit code is run trigger's for a dropped trigger.
	h.must("workflow", "pause", "report", "--reason", "flood", "--mode", "drop")
	r = h.ff("schedule", "trigger-now", "nightly", "--reason", "again", "-o", "json")
	expect(t, r, 3, "schedule nightly: no run was started: its workflow is paused with mode drop (the tick is recorded dropped)")
	var dropped struct {
		Outcome string  `json:"outcome"`
		RunID   *string `json:"run_id"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &dropped); err != nil || dropped.Outcome != "dropped" || dropped.RunID != nil {
		t.Fatalf("trigger-now of a drop-paused workflow: %v %s", err, r.stdout)
	}
	h.must("workflow", "resume", "report", "--reason", "dry")

	h.must("schedule", "pause", "nightly", "--reason", "source down")
	r = h.must("schedule", "list", "-o", "json")
	var list []struct {
		Name       string            `json:"name"`
		Paused     bool              `json:"paused"`
		NextFireAt *time.Time        `json:"next_fire_at"`
		Ticks      []json.RawMessage `json:"ticks"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 1 || !list[0].Paused || list[0].NextFireAt != nil || len(list[0].Ticks) != 1 {
		t.Fatalf("list: %v %s", err, r.stdout)
	}
	r = h.must("schedule", "list")
	if !strings.Contains(r.stdout, "nightly") || !strings.Contains(r.stdout, "yes") {
		t.Fatalf("list table:\n%s", r.stdout)
	}
	// A paused schedule fires no tick: show gives no next fire time, as
	// the dashboard does (schedule.ShownFireTimes decides for both).
	r = h.must("schedule", "show", "nightly", "-o", "json")
	shown.NextFireTimes = nil
	if err := json.Unmarshal([]byte(r.stdout), &shown); err != nil || len(shown.NextFireTimes) != 0 || !strings.Contains(r.stdout, `"next_fire_times": []`) {
		t.Fatalf("show -o json of a paused schedule: %v %s", err, r.stdout)
	}
	if r := h.must("schedule", "show", "nightly"); !strings.Contains(r.stdout, "next fire times (Europe/Berlin / UTC):\n  - (paused)\n") {
		t.Fatalf("show of a paused schedule:\n%s", r.stdout)
	}
	// Pausing a paused schedule (resuming an active one) changes nothing:
	// it says so, exit 0, and audits nothing (the count below).
	if r := h.must("schedule", "pause", "nightly", "--reason", "again"); r.stdout != "schedule nightly is already paused; nothing changed\n" {
		t.Fatalf("second pause: %q", r.stdout)
	}
	if r := h.must("schedule", "pause", "nightly", "--reason", "again", "-o", "json"); !strings.Contains(r.stdout, `"changed": false`) {
		t.Fatalf("second pause -o json: %q", r.stdout)
	}
	h.must("schedule", "resume", "nightly", "--reason", "source back")
	if r := h.must("schedule", "resume", "nightly", "--reason", "again"); r.stdout != "schedule nightly is not paused; nothing to resume\n" {
		t.Fatalf("second resume: %q", r.stdout)
	}
	r = h.must("schedule", "delete", "nightly", "--reason", "retired", "-o", "json")
	if strings.TrimSpace(r.stdout) != "{\n  \"deleted\": true,\n  \"schedule\": \"nightly\"\n}" {
		t.Fatalf("delete -o json: %q", r.stdout)
	}
	expect(t, h.ff("schedule", "show", "nightly"), 1, `ffctl: schedule "nightly": not found`)
	var audits int
	if err := h.db.QueryRow(`SELECT count(*) FROM schedule_events WHERE schedule_name = 'nightly' AND actor LIKE 'cli:%'`).Scan(&audits); err != nil || audits != 6 { // create, two trigger-nows, pause, resume, delete
		t.Fatalf("%d audit rows (%v), want 6", audits, err)
	}
}

func TestScheduleCreateRefusesBadInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(scheduledYAML)
	h.apply(`
name: keyed
tasks:
  - {name: only, handler: noop, idempotency_key: "k-{{ .Params.day }}"}
`)
	base := []string{"schedule", "create", "s", "--workflow", "report"}
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"schedule", "create", "s", "--cron", "@daily"}, 2, "ffctl: --workflow is required"},
		{append(base, "--cron", "* * *"), 2, `ffctl: invalid schedule: cron "* * *": expected 5 to 6 fields, found 3: [* * *]`},
		{append(base, "--cron", "@daily", "--timezone", "Moon/Base"), 2, `ffctl: invalid schedule: unknown time zone "Moon/Base"`},
		{append(base, "--cron", "@every -5m"), 2, `ffctl: invalid schedule: cron "@every -5m": an @every interval must be at least 1s, got -5m0s`},
		{append(base, "--cron", "@every 1ms"), 2, `ffctl: invalid schedule: cron "@every 1ms": an @every interval must be at least 1s, got 1ms`},
		{append(base, "--cron", "@every 1.5s"), 2, `ffctl: invalid schedule: cron "@every 1.5s": an @every interval must be whole seconds, got 1.5s`},
		{append(base, "--cron", "0 0 30 2 *"), 2, `ffctl: invalid schedule: cron "0 0 30 2 *": never fires (no time matches it)`},
		{append(base, "--cron", "*/5 * * * *", "--jitter", "10m"), 2, `ffctl: invalid schedule: jitter 10m0s is not below the gap between the schedule's fire times (5m0s): ticks fire in order, so a larger jitter delays every later tick`},
		{append(base, "--cron", "@daily", "--overlap", "queue"), 2, `ffctl: invalid schedule: overlap policy "queue": want skip, allow or cancel-previous`},
		{append(base, "--cron", "@daily", "--catchup", "all"), 2, `ffctl: invalid schedule: catch-up all needs a catch-up window (how far back a missed tick may still fire)`},
		{append(base, "--cron", "@daily", "--catchup-window", "1h"), 2, `ffctl: invalid schedule: a catch-up window (1h0m0s) applies only with catch-up one or all, and catch-up is none (set catch-up, or leave the window out)`},
		{append(base, "--cron", "@daily", "--catchup", "none", "--catchup-window", "1d"), 2, `ffctl: invalid schedule: a catch-up window (24h0m0s) applies only with catch-up one or all, and catch-up is none (set catch-up, or leave the window out)`},
		{append(base, "--cron", "@daily", "--catchup", "one", "--catchup-window", "soon"), 2, `ffctl: --catchup-window "soon": want a duration such as 3d, 1d12h, 90m or 1h30m`},
		{append(base, "--cron", "@daily", "--jitter", "-5m"), 2, `ffctl: --jitter "-5m": want a duration such as 3d, 1d12h, 90m or 1h30m`},
		{append(base, "--cron", "@daily", "--param", "novalue"), 2, `ffctl: --param "novalue": want key=value`},
		{[]string{"schedule", "create", "Bad Name", "--workflow", "report", "--cron", "@daily"}, 2, `ffctl: invalid schedule: schedule name "Bad Name" must match [a-z0-9][a-z0-9._-]*`},
		{[]string{"schedule", "create", "s", "--workflow", "nope", "--cron", "@daily"}, 1, `not found`},
		{[]string{"schedule", "create", "s", "--workflow", "keyed", "--cron", "@daily"}, 2, `invalid params`},
		{[]string{"schedule", "pause", "s"}, 2, "ffctl: --reason is required: say why the schedule is paused (it is audited)"},
		{[]string{"schedule", "show"}, 2, "ffctl: schedule show takes one schedule name"},
	}
	for _, c := range cases {
		expect(t, h.ff(c.args...), c.code, c.want)
	}
	var n int
	if err := h.db.QueryRow(`SELECT count(*) FROM schedules`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d schedules stored (%v)", n, err)
	}
}

// TestScheduleNextFireOfAnEveryScheduleCountsFromItsLastFiredPoint: an
// "@every 1h" schedule fires on the grid of its last-fired point, as the
// scheduler counts it: created now, an hour from its creation; last fired
// 20 minutes ago (its last-fired point set in SQL), 40 minutes from now;
// last fired 1h20m ago (a tick missed while no scheduler ran), 40 minutes
// from now too. Create, list and show say so (not an hour from when they
// read it).
func TestScheduleNextFireOfAnEveryScheduleCountsFromItsLastFiredPoint(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(scheduledYAML)
	var created struct {
		FiredThrough time.Time  `json:"fired_through"`
		NextFireAt   *time.Time `json:"next_fire_at"`
	}
	r := h.must("schedule", "create", "hourly", "--workflow", "report", "--cron", "@every 1h", "-o", "json")
	if err := json.Unmarshal([]byte(r.stdout), &created); err != nil || created.NextFireAt == nil {
		t.Fatalf("create -o json: %v\n%s", err, r.stdout)
	}
	if want := created.FiredThrough.Truncate(time.Second).Add(time.Hour); !created.NextFireAt.Equal(want) {
		t.Fatalf("create: next fire %v, want %v (an hour after its creation, %v)", created.NextFireAt, want, created.FiredThrough)
	}
	for _, c := range []struct {
		ago   string        // the last fire, before the database's now
		first time.Duration // the next fire, after the last
	}{
		{"20 minutes", time.Hour},
		{"80 minutes", 2 * time.Hour},
	} {
		var fired time.Time
		if err := h.db.QueryRow(`UPDATE schedules SET fired_through = date_trunc('second', now()) - $1::interval
		  WHERE name = 'hourly' RETURNING fired_through`, c.ago).Scan(&fired); err != nil {
			t.Fatal(err)
		}
		want := []time.Time{fired.Add(c.first), fired.Add(c.first + time.Hour)}

		r = h.must("schedule", "list", "-o", "json")
		var list []struct {
			NextFireAt *time.Time `json:"next_fire_at"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 1 || list[0].NextFireAt == nil {
			t.Fatalf("list -o json: %v\n%s", err, r.stdout)
		}
		if !list[0].NextFireAt.Equal(want[0]) {
			t.Errorf("last fired %s ago: list: next fire %v, want %v (%v after its last fire at %v)", c.ago, list[0].NextFireAt, want[0], c.first, fired)
		}
		r = h.must("schedule", "show", "hourly", "-o", "json")
		var shown struct {
			NextFireTimes []struct{ UTC string } `json:"next_fire_times"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &shown); err != nil || len(shown.NextFireTimes) != 5 {
			t.Fatalf("show -o json: %v\n%s", err, r.stdout)
		}
		for i, w := range want {
			if got := shown.NextFireTimes[i].UTC; got != w.UTC().Format(time.RFC3339) {
				t.Errorf("last fired %s ago: show: fire time %d is %s, want %s (on the hourly grid of its last fire at %v)", c.ago, i, got, w.UTC().Format(time.RFC3339), fired)
			}
		}
	}
}

// TestScheduleTriggerNowReportsItsRunsState: the tick trigger-now prints
// carries the state of the run it created as it stands after the trigger
// (RUNNING: the trigger writes it so), as `schedule show` and `run list` give it; "" would say the
// run was pruned.
func TestScheduleTriggerNowReportsItsRunsState(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(scheduledYAML)
	h.must("schedule", "create", "nightly", "--workflow", "report", "--cron", "30 2 * * *")
	r := h.must("schedule", "trigger-now", "nightly", "--reason", "backfill", "-o", "json")
	var tick struct {
		Outcome  string     `json:"outcome"`
		RunID    *uuid.UUID `json:"run_id"`
		RunState string     `json:"run_state"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &tick); err != nil || tick.Outcome != "fired" || tick.RunID == nil {
		t.Fatalf("trigger-now -o json: %v\n%s", err, r.stdout)
	}
	if got := h.run(*tick.RunID).State; tick.RunState != "RUNNING" || tick.RunState != string(got) {
		t.Fatalf("trigger-now: run_state %q, want RUNNING (the run is %s)\n%s", tick.RunState, got, r.stdout)
	}
}
