package e2e

import (
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core/schedule"
	"github.com/flowforge/flowforge/daemon/failpoint"
	"github.com/flowforge/flowforge/e2e/harness"
)

const scheduledWorkflowYAML = `
name: ticking
tasks:
  - {name: only, handler: noop}
`

// scheduleTicks returns the ticks of schedule name (all cron ticks: no
// test here triggers one by hand), oldest first,
// failing the test when a tick's run is missing or does not carry the
// tick's idempotency key, or when the runs are not one per tick.
func scheduleTicks(t *testing.T, db *sql.DB, name string) []time.Time {
	t.Helper()
	rows, err := db.Query(`SELECT t.scheduled_at, r.idempotency_key FROM schedule_ticks t JOIN schedules s ON s.id = t.schedule_id
	  LEFT JOIN workflow_runs r ON r.id = t.run_id WHERE s.name = $1 ORDER BY t.scheduled_at, t.id`, name)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []time.Time
	for rows.Next() {
		var at time.Time
		var key sql.NullString
		if err := rows.Scan(&at, &key); err != nil {
			t.Fatal(err)
		}
		if want := schedule.IdempotencyKey(name, at); key.String != want {
			t.Fatalf("tick %v: run key %q, want %q", at, key.String, want)
		}
		out = append(out, at)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if runs := harness.QueryInt(t, db, `SELECT count(*) FROM workflow_runs WHERE idempotency_key LIKE 'schedule:' || $1 || ':%'`, name); runs != len(out) {
		t.Fatalf("schedule %s: %d runs for %d ticks", name, runs, len(out))
	}
	return out
}

// assertEveryTickOnce checks that ticks (oldest first) are the schedule's
// consecutive fire times from first on, each once.
func assertEveryTickOnce(t *testing.T, spec *schedule.Spec, first time.Time, ticks []time.Time) {
	t.Helper()
	want := first
	for i, at := range ticks {
		if !at.Equal(want) {
			t.Fatalf("tick %d at %s, want %s (each fire time once, none missing): %v", i, at.UTC().Format(time.RFC3339), want.UTC().Format(time.RFC3339), ticks)
		}
		want = spec.Next(want)
	}
}

// createTicking creates the every-second schedule name of workflow
// "ticking" (overlap allow: its runs stay open, no worker runs) and returns
// its spec and its first fire time (after its creation, on the database's
// clock).
func createTicking(t *testing.T, s *harness.Stack, db *sql.DB, name string) (*schedule.Spec, time.Time) {
	t.Helper()
	s.MustCLI(t, "schedule", "create", name, "--workflow", "ticking", "--cron", "* * * * * *", "--overlap", "allow")
	var created time.Time
	if err := db.QueryRow(`SELECT created_at FROM schedules WHERE name = $1`, name).Scan(&created); err != nil {
		t.Fatal(err)
	}
	spec, err := schedule.Parse("* * * * * *", "UTC")
	if err != nil {
		t.Fatal(err)
	}
	return spec, spec.Next(created)
}

// TestTwoSchedulersFireEachTickOnce: mode 68. Two scheduler processes
// sweep every 20ms over four every-second schedules (they race for every
// tick): each fire time of each schedule has one tick row and one run, and
// none is missing.
func TestTwoSchedulersFireEachTickOnce(t *testing.T) {
	t.Parallel()
	const schedules = 4
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	s.Apply(t, scheduledWorkflowYAML)
	specs := make([]*schedule.Spec, schedules)
	firsts := make([]time.Time, schedules)
	for i := range schedules {
		specs[i], firsts[i] = createTicking(t, s, db, fmt.Sprintf("ticking-%d", i))
	}
	a := s.Daemon(t, "scheduler-a", "scheduler", "--id", "scheduler-a", "--sweep-interval", "20ms")
	b := s.Daemon(t, "scheduler-b", "scheduler", "--id", "scheduler-b", "--sweep-interval", "20ms")
	harness.Eventually(t, 60*time.Second, "eight ticks of each schedule", func() (bool, error) {
		n := harness.QueryInt(t, db, `SELECT min(n) FROM (SELECT count(*) AS n FROM schedules s LEFT JOIN schedule_ticks t ON t.schedule_id = s.id GROUP BY s.id) x`)
		return n >= 8, fmt.Errorf("the least ticked schedule has %d ticks", n)
	})
	a.Kill()
	b.Kill()
	for i := range schedules {
		assertEveryTickOnce(t, specs[i], firsts[i], scheduleTicks(t, db, fmt.Sprintf("ticking-%d", i)))
	}
}

// TestASchedulerKilledMidTickFiresItOnceAfterRestart: mode 69. The
// scheduler dies (failpoint scheduler.exit-mid-tick: os.Exit inside the
// tick's transaction, after its tick row was inserted and before its run
// was created and committed). Nothing of that tick was written; the
// restarted scheduler fires it, once, and every later tick once.
func TestASchedulerKilledMidTickFiresItOnceAfterRestart(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	s.Apply(t, scheduledWorkflowYAML)
	spec, first := createTicking(t, s, db, "ticking")
	victim := s.DaemonEnv(t, "scheduler-victim", "scheduler", []string{failpoint.EnvVar + "=" + string(failpoint.SchedulerExitMidTick)},
		"--id", "victim", "--sweep-interval", "100ms")
	code, err := victim.Wait(60 * time.Second)
	if err != nil || code != failpoint.ExitCode {
		t.Fatalf("victim: exit %d (%v), want the failpoint's %d", code, err, failpoint.ExitCode)
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM schedule_ticks`) + harness.QueryInt(t, db, `SELECT count(*) FROM workflow_runs`); n != 0 {
		t.Fatalf("the dead scheduler left %d ticks and runs; its tick must die with it", n)
	}
	rescuer := s.Daemon(t, "scheduler-rescuer", "scheduler", "--id", "rescuer", "--sweep-interval", "100ms")
	harness.Eventually(t, 60*time.Second, "three ticks", func() (bool, error) {
		n := harness.QueryInt(t, db, `SELECT count(*) FROM schedule_ticks`)
		return n >= 3, fmt.Errorf("%d ticks", n)
	})
	rescuer.Kill()
	ticks := scheduleTicks(t, db, "ticking")
	assertEveryTickOnce(t, spec, first, ticks)
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM schedule_ticks WHERE actor <> 'rescuer'`); n != 0 {
		t.Fatalf("%d ticks recorded by the dead scheduler", n)
	}
}

// TestASchedulerDownForTwoHoursAppliesEachCatchupPolicy: mode 70 with a
// real scheduler process. Three hourly schedules, one per catch-up policy,
// were last fired 2h30m ago on the database's clock (the schedules'
// last-fired point is backdated in SQL: no scheduler ran for two hours and
// a half, and the process clock plays no part); the scheduler that starts
// then fires every missed tick within the window (all), the latest one
// (one), or none (none), each once, and moves each schedule past them.
func TestASchedulerDownForTwoHoursAppliesEachCatchupPolicy(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	s.Apply(t, scheduledWorkflowYAML)
	policies := []struct {
		name  string
		fired []time.Duration // after the backdated point
	}{
		{"none", nil},
		{"one", []time.Duration{2 * time.Hour}},
		{"all", []time.Duration{time.Hour, 2 * time.Hour}},
	}
	from := map[string]time.Time{}
	for _, p := range policies {
		args := []string{"schedule", "create", "missed-" + p.name, "--workflow", "ticking", "--cron", "@every 1h", "--overlap", "allow", "--catchup", p.name}
		if p.name != "none" {
			args = append(args, "--catchup-window", "3h") // none takes no window
		}
		s.MustCLI(t, args...)
		var at time.Time
		if err := db.QueryRow(`UPDATE schedules SET fired_through = date_trunc('second', now()) - interval '150 minutes'
		  WHERE name = $1 RETURNING fired_through`, "missed-"+p.name).Scan(&at); err != nil {
			t.Fatal(err)
		}
		from[p.name] = at
	}
	sched := s.Daemon(t, "scheduler", "scheduler", "--id", "late", "--sweep-interval", "100ms")
	harness.Eventually(t, 60*time.Second, "every schedule decided past its missed ticks", func() (bool, error) {
		n := harness.QueryInt(t, db, `SELECT count(*) FROM schedules WHERE fired_through < now() - interval '31 minutes'`)
		return n == 0, fmt.Errorf("%d schedules not past their missed ticks", n)
	})
	sched.Kill()
	for _, p := range policies {
		ticks := scheduleTicks(t, db, "missed-"+p.name)
		if len(ticks) != len(p.fired) {
			t.Fatalf("catch-up %s: %d ticks %v, want %d", p.name, len(ticks), ticks, len(p.fired))
		}
		for i, at := range ticks {
			if want := from[p.name].Add(p.fired[i]); !at.Equal(want) {
				t.Errorf("catch-up %s: tick %d at %s, want %s", p.name, i, at.UTC().Format(time.RFC3339), want.UTC().Format(time.RFC3339))
			}
		}
	}
}
