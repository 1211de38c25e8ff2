package store_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/schedule"
	"github.com/flowforge/flowforge/core/store"
)

const scheduledWorkflow = `
name: nightly-etl
tasks:
  - {name: extract, handler: noop}
  - {name: load, handler: noop, depends_on: [extract]}
`

const keyedWorkflow = `
name: keyed
tasks:
  - {name: only, handler: noop, idempotency_key: "k-{{ .Params.day }}"}
`

// newScheduleFixture is a fixture with the nightly-etl workflow applied.
func newScheduleFixture(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t)
	f.apply(scheduledWorkflow)
	return f
}

func (f *fixture) createSchedule(spec store.ScheduleSpec) store.Schedule {
	f.t.Helper()
	sc, err := f.s.CreateSchedule(f.ctx, spec, "tester", "")
	if err != nil {
		f.t.Fatalf("create schedule %q: %v", spec.Name, err)
	}
	return sc
}

// backdateSchedule sets the schedule's last-fired point to the database's clock,
// truncated to the second, minus ago.
func (f *fixture) backdateSchedule(name string, ago time.Duration) time.Time {
	f.t.Helper()
	var at time.Time
	err := f.db.QueryRowContext(f.ctx, `UPDATE schedules SET fired_through = date_trunc('second', now()) - $2 * interval '1 millisecond'
	 WHERE name = $1 RETURNING fired_through`, name, ago.Milliseconds()).Scan(&at)
	if err != nil {
		f.t.Fatalf("backdate %s: %v", name, err)
	}
	return at
}

func (f *fixture) fire() store.FireResult {
	f.t.Helper()
	res, err := f.s.FireDueTicks(f.ctx, store.FireRequest{Actor: "tester"})
	if err != nil {
		f.t.Fatalf("fire due ticks: %v", err)
	}
	return res
}

// ticks returns the schedule's ticks (manual ones too), oldest first.
func (f *fixture) ticks(name string) []store.Tick {
	f.t.Helper()
	rows, err := f.db.QueryContext(f.ctx, `SELECT t.scheduled_at, t.outcome, t.run_id, COALESCE(t.reason, '') FROM schedule_ticks t
	  JOIN schedules s ON s.id = t.schedule_id WHERE s.name = $1 ORDER BY t.scheduled_at, t.id`, name)
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	var out []store.Tick
	for rows.Next() {
		var tk store.Tick
		var run uuid.NullUUID
		if err := rows.Scan(&tk.ScheduledAt, &tk.Outcome, &run, &tk.Reason); err != nil {
			f.t.Fatal(err)
		}
		if run.Valid {
			tk.RunID = &run.UUID
		}
		out = append(out, tk)
	}
	if err := rows.Err(); err != nil {
		f.t.Fatal(err)
	}
	return out
}

func TestCreateScheduleRefusesBadInput(t *testing.T) {
	t.Parallel()
	f := newScheduleFixture(t)
	f.apply(keyedWorkflow)
	f.createSchedule(store.ScheduleSpec{Name: "taken", Workflow: "nightly-etl", Cron: "@daily"})
	if _, _, err := f.s.ApplySchedule(f.ctx, store.ScheduleSpec{Name: "from-file", Workflow: "nightly-etl", Cron: "@daily", Owner: store.ScheduleOwnerFile}, "file", ""); err != nil {
		t.Fatal(err)
	}
	ok := store.ScheduleSpec{Name: "s", Workflow: "nightly-etl", Cron: "0 3 * * *"}
	with := func(mod func(*store.ScheduleSpec)) store.ScheduleSpec { s := ok; mod(&s); return s }
	cases := []struct {
		name string
		spec store.ScheduleSpec
		is   error
		want string
	}{
		{"no name", with(func(s *store.ScheduleSpec) { s.Name = "" }), schedule.ErrBadSchedule, `invalid schedule: schedule name is missing`},
		{"bad name", with(func(s *store.ScheduleSpec) { s.Name = "Nightly!" }), schedule.ErrBadSchedule, `invalid schedule: schedule name "Nightly!" must match [a-z0-9][a-z0-9._-]*`},
		{"bad cron", with(func(s *store.ScheduleSpec) { s.Cron = "0 25 * * *" }), schedule.ErrBadSchedule, `invalid schedule: cron "0 25 * * *": end of range (25) above maximum (23): 25`},
		{"unknown zone", with(func(s *store.ScheduleSpec) { s.Timezone = "Europe/Atlantis" }), schedule.ErrBadSchedule, `invalid schedule: unknown time zone "Europe/Atlantis"`},
		{"bad overlap", with(func(s *store.ScheduleSpec) { s.Overlap = "queue" }), schedule.ErrBadSchedule, `invalid schedule: overlap policy "queue": want skip, allow or cancel-previous`},
		{"bad catchup", with(func(s *store.ScheduleSpec) { s.Catchup = "some" }), schedule.ErrBadSchedule, `invalid schedule: catch-up policy "some": want none, one or all`},
		{"catchup without window", with(func(s *store.ScheduleSpec) { s.Catchup = schedule.CatchupAll }), schedule.ErrBadSchedule, `invalid schedule: catch-up all needs a catch-up window (how far back a missed tick may still fire)`},
		{"window without catch-up", with(func(s *store.ScheduleSpec) { s.CatchupWindow = time.Hour }), schedule.ErrBadSchedule,
			`invalid schedule: a catch-up window (1h0m0s) applies only with catch-up one or all, and catch-up is none (set catch-up, or leave the window out)`},
		{"window with catch-up none", with(func(s *store.ScheduleSpec) { s.Catchup = schedule.CatchupNone; s.CatchupWindow = time.Minute }), schedule.ErrBadSchedule,
			`invalid schedule: a catch-up window (1m0s) applies only with catch-up one or all, and catch-up is none (set catch-up, or leave the window out)`},
		{"negative window", with(func(s *store.ScheduleSpec) { s.CatchupWindow = -time.Minute }), schedule.ErrBadSchedule, `invalid schedule: catch-up window -1m0s is negative`},
		{"negative jitter", with(func(s *store.ScheduleSpec) { s.Jitter = -time.Second }), schedule.ErrBadSchedule, `invalid schedule: jitter -1s is negative`},
		{"jitter not below the gap", with(func(s *store.ScheduleSpec) { s.Cron = "*/5 * * * *"; s.Jitter = 5 * time.Minute }), schedule.ErrBadSchedule,
			`invalid schedule: jitter 5m0s is not below the gap between the schedule's fire times (5m0s): ticks fire in order, so a larger jitter delays every later tick`},
		{"jitter above the smallest gap", with(func(s *store.ScheduleSpec) { s.Cron = "0,10 * * * *"; s.Jitter = 20 * time.Minute }), schedule.ErrBadSchedule,
			`invalid schedule: jitter 20m0s is not below the gap between the schedule's fire times (10m0s): ticks fire in order, so a larger jitter delays every later tick`},
		{"@every below 1s", with(func(s *store.ScheduleSpec) { s.Cron = "@every 1ms" }), schedule.ErrBadSchedule, `invalid schedule: cron "@every 1ms": an @every interval must be at least 1s, got 1ms`},
		{"cron that never fires", with(func(s *store.ScheduleSpec) { s.Cron = "0 0 30 2 *" }), schedule.ErrBadSchedule, `invalid schedule: cron "0 0 30 2 *": never fires (no time matches it)`},
		{"bad owner", with(func(s *store.ScheduleSpec) { s.Owner = "api" }), schedule.ErrBadSchedule, `invalid schedule: owner "api": want cli or file`},
		{"params not an object", with(func(s *store.ScheduleSpec) { s.Params = json.RawMessage(`[1]`) }), core.ErrBadParams, `invalid params: want a JSON object, got an array`},
		{"params a key cannot render from", store.ScheduleSpec{Name: "k", Workflow: "keyed", Cron: "@daily"}, core.ErrBadParams, ""},
		{"unknown workflow", with(func(s *store.ScheduleSpec) { s.Workflow = "nope" }), store.ErrNotFound, ""},
		{"name taken", with(func(s *store.ScheduleSpec) { s.Name = "taken" }), store.ErrConflict, `conflict: schedule "taken" already exists`},
		{"name of the other owner", with(func(s *store.ScheduleSpec) { s.Name = "from-file" }), store.ErrConflict, `conflict: schedule "from-file" already exists, owned by a workflow file's schedules: (a cli schedule cannot take its name)`},
	}
	for _, c := range cases {
		_, err := f.s.CreateSchedule(f.ctx, c.spec, "tester", "")
		if !errors.Is(err, c.is) {
			t.Errorf("%s: %v, want %v", c.name, err, c.is)
			continue
		}
		if c.want != "" && err.Error() != c.want {
			t.Errorf("%s: %q, want %q", c.name, err, c.want)
		}
	}
	if n := f.count(`SELECT count(*) FROM schedules`); n != 2 {
		t.Fatalf("%d schedules stored, want the 2 good ones", n)
	}
	// The file owner cannot take over a CLI schedule either.
	_, _, err := f.s.ApplySchedule(f.ctx, store.ScheduleSpec{Name: "taken", Workflow: "nightly-etl", Cron: "@hourly", Owner: store.ScheduleOwnerFile}, "file", "")
	if want := `conflict: schedule "taken" already exists, owned by the CLI (a file schedule cannot take its name)`; err == nil || err.Error() != want {
		t.Fatalf("file apply over a CLI schedule: %v, want %s", err, want)
	}
}
