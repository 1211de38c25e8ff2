package schedule_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/schedule"
)

// TestValidateRefusesBadInput: each bad field is refused with an error
// wrapping schedule.ErrBadSchedule (core.ErrBadParams for params) whose
// message names the field and the value, without the database.
func TestValidateRefusesBadInput(t *testing.T) {
	t.Parallel()
	ok := schedule.Definition{Name: "s", Workflow: "nightly-etl", Cron: "0 3 * * *"}
	with := func(mod func(*schedule.Definition)) schedule.Definition { s := ok; mod(&s); return s }
	cases := []struct {
		name string
		spec schedule.Definition
		is   error
		want string
	}{
		{"no name", with(func(s *schedule.Definition) { s.Name = "" }), schedule.ErrBadSchedule, `invalid schedule: schedule name is missing`},
		{"bad name", with(func(s *schedule.Definition) { s.Name = "Nightly!" }), schedule.ErrBadSchedule, `invalid schedule: schedule name "Nightly!" must match [a-z0-9][a-z0-9._-]*`},
		{"no workflow", with(func(s *schedule.Definition) { s.Workflow = "" }), schedule.ErrBadSchedule, `invalid schedule: workflow name is missing`},
		{"bad cron", with(func(s *schedule.Definition) { s.Cron = "0 25 * * *" }), schedule.ErrBadSchedule, `invalid schedule: cron "0 25 * * *": end of range (25) above maximum (23): 25`},
		{"unknown zone", with(func(s *schedule.Definition) { s.Timezone = "Europe/Atlantis" }), schedule.ErrBadSchedule, `invalid schedule: unknown time zone "Europe/Atlantis"`},
		{"bad overlap", with(func(s *schedule.Definition) { s.Overlap = "queue" }), schedule.ErrBadSchedule, `invalid schedule: overlap policy "queue": want skip, allow or cancel-previous`},
		{"bad catchup", with(func(s *schedule.Definition) { s.Catchup = "some" }), schedule.ErrBadSchedule, `invalid schedule: catch-up policy "some": want none, one or all`},
		{"catchup without window", with(func(s *schedule.Definition) { s.Catchup = schedule.CatchupAll }), schedule.ErrBadSchedule, `invalid schedule: catch-up all needs a catch-up window (how far back a missed tick may still fire)`},
		{"window without catch-up", with(func(s *schedule.Definition) { s.CatchupWindow = time.Hour }), schedule.ErrBadSchedule,
			`invalid schedule: a catch-up window (1h0m0s) applies only with catch-up one or all, and catch-up is none (set catch-up, or leave the window out)`},
		{"window with catch-up none", with(func(s *schedule.Definition) { s.Catchup = schedule.CatchupNone; s.CatchupWindow = time.Minute }), schedule.ErrBadSchedule,
			`invalid schedule: a catch-up window (1m0s) applies only with catch-up one or all, and catch-up is none (set catch-up, or leave the window out)`},
		{"negative window", with(func(s *schedule.Definition) { s.CatchupWindow = -time.Minute }), schedule.ErrBadSchedule, `invalid schedule: catch-up window -1m0s is negative`},
		{"negative jitter", with(func(s *schedule.Definition) { s.Jitter = -time.Second }), schedule.ErrBadSchedule, `invalid schedule: jitter -1s is negative`},
		{"jitter not below the gap", with(func(s *schedule.Definition) { s.Cron = "*/5 * * * *"; s.Jitter = 5 * time.Minute }), schedule.ErrBadSchedule,
			`invalid schedule: jitter 5m0s is not below the gap between the schedule's fire times (5m0s): ticks fire in order, so a larger jitter delays every later tick`},
		{"jitter above the smallest gap", with(func(s *schedule.Definition) { s.Cron = "0,10 * * * *"; s.Jitter = 20 * time.Minute }), schedule.ErrBadSchedule,
			`invalid schedule: jitter 20m0s is not below the gap between the schedule's fire times (10m0s): ticks fire in order, so a larger jitter delays every later tick`},
		{"@every below 1s", with(func(s *schedule.Definition) { s.Cron = "@every 1ms" }), schedule.ErrBadSchedule, `invalid schedule: cron "@every 1ms": an @every interval must be at least 1s, got 1ms`},
		{"cron that never fires", with(func(s *schedule.Definition) { s.Cron = "0 0 30 2 *" }), schedule.ErrBadSchedule, `invalid schedule: cron "0 0 30 2 *": never fires (no time matches it)`},
		{"bad owner", with(func(s *schedule.Definition) { s.Owner = "api" }), schedule.ErrBadSchedule, `invalid schedule: owner "api": want cli or file`},
		{"params not an object", with(func(s *schedule.Definition) { s.Params = json.RawMessage(`[1]`) }), core.ErrBadParams, `invalid params: want a JSON object, got an array`},
	}
	for _, c := range cases {
		_, err := schedule.Validate(c.spec)
		if !errors.Is(err, c.is) || err.Error() != c.want {
			t.Errorf("%s: %v, want %q wrapping %v", c.name, err, c.want, c.is)
		}
	}
}

// TestValidateFillsTheDefaults: an accepted definition comes back with
// every default spelt out (what the store stores) and every given field
// as given.
func TestValidateFillsTheDefaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		in, want schedule.Definition
	}{
		{"bare",
			schedule.Definition{Name: "s", Workflow: "w", Cron: "@daily"},
			schedule.Definition{Name: "s", Workflow: "w", Cron: "@daily", Timezone: "UTC", Params: json.RawMessage(`{}`),
				Overlap: schedule.OverlapSkip, Catchup: schedule.CatchupNone, Owner: schedule.OwnerCLI}},
		{"every field given",
			schedule.Definition{Name: "s", Workflow: "w", Cron: "*/5 * * * *", Timezone: "Europe/Berlin", Params: json.RawMessage(`{"k":"v"}`),
				Overlap: schedule.OverlapAllow, Catchup: schedule.CatchupOne, CatchupWindow: time.Hour, Jitter: time.Minute, Paused: true, Owner: schedule.OwnerFile},
			schedule.Definition{Name: "s", Workflow: "w", Cron: "*/5 * * * *", Timezone: "Europe/Berlin", Params: json.RawMessage(`{"k":"v"}`),
				Overlap: schedule.OverlapAllow, Catchup: schedule.CatchupOne, CatchupWindow: time.Hour, Jitter: time.Minute, Paused: true, Owner: schedule.OwnerFile}},
		{"jitter just below the gap",
			schedule.Definition{Name: "s", Workflow: "w", Cron: "*/5 * * * *", Jitter: 5*time.Minute - time.Second},
			schedule.Definition{Name: "s", Workflow: "w", Cron: "*/5 * * * *", Timezone: "UTC", Params: json.RawMessage(`{}`), Jitter: 5*time.Minute - time.Second,
				Overlap: schedule.OverlapSkip, Catchup: schedule.CatchupNone, Owner: schedule.OwnerCLI}},
	} {
		got, err := schedule.Validate(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

// TestValidateFileNamesTheScheduleItRefuses: a file's schedule must be of
// the file's workflow, owned by the file, valid, and every task key of
// the file's definition must render from its params; the error names it.
// The accepted ones come back checked, in order.
func TestValidateFileNamesTheScheduleItRefuses(t *testing.T) {
	t.Parallel()
	file, err := core.ParseWorkflowFile([]byte(`
name: etl
tasks:
  - {name: load, handler: noop, idempotency_key: "load-{{ .Params.day }}"}
schedules:
  - {name: nightly, cron: "30 2 * * *", timezone: Europe/Berlin, params: {day: today}, catchup: one, catchup_window: 1h}
  - {name: hourly, cron: "@hourly", params: {day: now}, overlap: allow, jitter: 30s}
`))
	if err != nil {
		t.Fatal(err)
	}
	specs := schedule.FromFile("etl", file.Schedules)
	want := []schedule.Definition{
		{Name: "nightly", Workflow: "etl", Cron: "30 2 * * *", Timezone: "Europe/Berlin", Params: json.RawMessage(`{"day":"today"}`),
			Overlap: schedule.OverlapSkip, Catchup: schedule.CatchupOne, CatchupWindow: time.Hour, Owner: schedule.OwnerFile},
		{Name: "hourly", Workflow: "etl", Cron: "@hourly", Timezone: "UTC", Params: json.RawMessage(`{"day":"now"}`),
			Overlap: schedule.OverlapAllow, Catchup: schedule.CatchupNone, Jitter: 30 * time.Second, Owner: schedule.OwnerFile},
	}
	got, err := schedule.ValidateFile(file.Definition, specs)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ValidateFile = %+v, %v; want %+v", got, err, want)
	}
	with := func(mod func(*schedule.Definition)) []schedule.Definition {
		s := append([]schedule.Definition{}, specs...)
		mod(&s[1])
		return s
	}
	for _, tc := range []struct {
		name  string
		specs []schedule.Definition
		is    error
		want  string
	}{
		{"another workflow", with(func(s *schedule.Definition) { s.Workflow = "other" }), schedule.ErrBadSchedule,
			`schedule "hourly": invalid schedule: workflow "other" is not the file's ("etl")`},
		{"owned by the CLI", with(func(s *schedule.Definition) { s.Owner = schedule.OwnerCLI }), schedule.ErrBadSchedule,
			`schedule "hourly": invalid schedule: owner "cli", want file`},
		{"a bad field", with(func(s *schedule.Definition) { s.Cron = "@every 1ms" }), schedule.ErrBadSchedule,
			`schedule "hourly": invalid schedule: cron "@every 1ms": an @every interval must be at least 1s, got 1ms`},
		{"params the task key cannot render from", with(func(s *schedule.Definition) { s.Params = nil }), core.ErrBadParams,
			`schedule "hourly": invalid params: render idempotency_key of task "load": template: idempotency_key:1:15: executing "idempotency_key" at <.Params.day>: map has no entry for key "day"`},
	} {
		got, err := schedule.ValidateFile(file.Definition, tc.specs)
		if !errors.Is(err, tc.is) || err.Error() != tc.want || got != nil {
			t.Errorf("%s: %v, %v; want %q wrapping %v", tc.name, got, err, tc.want, tc.is)
		}
	}
}

// TestIdempotencyKey: a tick's run key names the schedule and the tick's
// time in UTC, to the second, whatever the zone the time is in.
func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 3, 29, 3, 30, 0, 0, berlin)
	if got, want := schedule.IdempotencyKey("nightly", at), "schedule:nightly:2026-03-29T01:30:00Z"; got != want {
		t.Fatalf("IdempotencyKey = %q, want %q", got, want)
	}
}
