package store_test

import (
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

func (f *fixture) createSchedule(spec schedule.Definition) store.Schedule {
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

// TestCreateScheduleRefusesBadInput: CreateSchedule refuses what
// schedule.Validate refuses (every field's case is in core/schedule's
// TestValidateRefusesBadInput), and what only the database knows: params
// the workflow's newest version's task keys cannot render from, an
// unknown workflow, a name taken (by either owner). Nothing refused is
// stored.
func TestCreateScheduleRefusesBadInput(t *testing.T) {
	t.Parallel()
	f := newScheduleFixture(t)
	f.apply(keyedWorkflow)
	f.apply("name: limited\ntasks:\n  - {name: a, handler: noop, concurrency: {key: \"'customer-' + params.customer\", limit: 2}}\n")
	f.createSchedule(schedule.Definition{Name: "taken", Workflow: "nightly-etl", Cron: "@daily"})
	if _, _, err := f.s.ApplySchedule(f.ctx, schedule.Definition{Name: "from-file", Workflow: "nightly-etl", Cron: "@daily", Owner: schedule.OwnerFile}, "file", ""); err != nil {
		t.Fatal(err)
	}
	ok := schedule.Definition{Name: "s", Workflow: "nightly-etl", Cron: "0 3 * * *"}
	with := func(mod func(*schedule.Definition)) schedule.Definition { s := ok; mod(&s); return s }
	cases := []struct {
		name string
		spec schedule.Definition
		is   error
		want string
	}{
		{"bad cron", with(func(s *schedule.Definition) { s.Cron = "0 25 * * *" }), schedule.ErrBadSchedule, `invalid schedule: cron "0 25 * * *": end of range (25) above maximum (23): 25`},
		{"params a key cannot render from", schedule.Definition{Name: "k", Workflow: "keyed", Cron: "@daily"}, core.ErrBadParams, ""},
		{"params a concurrency key cannot be evaluated over", schedule.Definition{Name: "c", Workflow: "limited", Cron: "@daily"}, core.ErrBadFlowKey, ""},
		{"unknown workflow", with(func(s *schedule.Definition) { s.Workflow = "nope" }), store.ErrNotFound, ""},
		{"name taken", with(func(s *schedule.Definition) { s.Name = "taken" }), store.ErrConflict, `conflict: schedule "taken" already exists`},
		{"name of the other owner", with(func(s *schedule.Definition) { s.Name = "from-file" }), store.ErrConflict, `conflict: schedule "from-file" already exists, owned by a workflow file's schedules: (a cli schedule cannot take its name)`},
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
	_, _, err := f.s.ApplySchedule(f.ctx, schedule.Definition{Name: "taken", Workflow: "nightly-etl", Cron: "@hourly", Owner: schedule.OwnerFile}, "file", "")
	if want := `conflict: schedule "taken" already exists, owned by the CLI (a file schedule cannot take its name)`; err == nil || err.Error() != want {
		t.Fatalf("file apply over a CLI schedule: %v, want %s", err, want)
	}
}
