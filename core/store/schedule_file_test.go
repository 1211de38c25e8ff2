package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/schedule"
	"github.com/flowforge/flowforge/core/store"
)

// applyFile parses a workflow file and applies it with its schedules.
func (f *fixture) applyFile(src string) ([]store.ScheduleChange, error) {
	f.t.Helper()
	file, err := core.ParseWorkflowFile([]byte(src))
	if err != nil {
		f.t.Fatalf("parse: %v", err)
	}
	_, _, changes, err := f.s.ApplyWorkflowFile(f.ctx, file.Definition, schedule.FromFile(file.Definition.Name, file.Schedules), "test")
	return changes, err
}

// TestConcurrentFilesRacingForOneScheduleNameOneWins: the files of eight
// workflows, applied at once, all declare schedule "shared": exactly one
// apply commits; each other one is refused naming the winner's workflow
// and stores nothing (no version, not its own schedule).
func TestConcurrentFilesRacingForOneScheduleNameOneWins(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const n = 8
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			src := fmt.Sprintf("name: wf-%d\ntasks:\n  - {name: a, handler: noop}\nschedules:\n  - {name: own-%d, cron: '@daily'}\n  - {name: shared, cron: '@hourly'}\n", i, i)
			_, errs[i] = f.applyFile(src)
		}()
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		if err == nil {
			if winner >= 0 {
				t.Fatalf("wf-%d and wf-%d both applied a schedule named shared", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatalf("no apply won: %v", errs)
	}
	want := fmt.Sprintf(`schedule "shared" is declared in the workflow file of wf-%d: rename it in one of the files (nothing applied)`, winner)
	for i, err := range errs {
		if i != winner && (!errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), want)) {
			t.Errorf("wf-%d: %v, want ErrConflict %q", i, err, want)
		}
	}
	if w, s := f.count(`SELECT count(*) FROM workflows`), f.count(`SELECT count(*) FROM schedules`); w != 1 || s != 2 {
		t.Fatalf("%d workflow versions and %d schedules stored, want the winner's 1 and 2", w, s)
	}
	if e := f.count(`SELECT count(*) FROM schedule_events`); e != 2 {
		t.Fatalf("%d audit rows, want the winner's 2 creates", e)
	}
}

// TestConcurrentAppliesOfOneFileAreSerialised: applies of one workflow's
// file with different crons, at once, all commit one after another: one
// creates the schedule, each other one updates it (or finds it unchanged),
// and every change has its audit row.
func TestConcurrentAppliesOfOneFileAreSerialised(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const n = 6
	changes := make([][]store.ScheduleChange, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			changes[i], errs[i] = f.applyFile(fmt.Sprintf("name: etl\ntasks:\n  - {name: a, handler: noop}\nschedules:\n  - {name: etl-at, cron: '%d 3 * * *'}\n", i))
		}()
	}
	close(start)
	wg.Wait()
	created, written := 0, 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("apply %d: %v", i, errs[i])
		}
		switch a := changes[i][0].Action; a {
		case "created":
			created++
			written++
		case "updated":
			written++
		case "unchanged":
		default:
			t.Fatalf("apply %d: action %q", i, a)
		}
	}
	if created != 1 {
		t.Fatalf("%d applies created the schedule, want 1", created)
	}
	if e := f.count(`SELECT count(*) FROM schedule_events`); e != written {
		t.Fatalf("%d audit rows for %d changes", e, written)
	}
	if w := f.count(`SELECT count(*) FROM workflows`); w != 1 {
		t.Fatalf("%d versions of one unchanged definition", w)
	}
}

// TestAnApplyThatChangesTheCronStartsTheScheduleAfresh: a schedule behind
// its last-fired point (backdated in SQL, as after a while without a
// change) is applied again, by the workflow file's path and by
// ApplySchedule. A new cron or zone starts it afresh from the apply (on the
// database's clock): the next pass fires no tick of the new cron before the
// apply, whatever the catch-up policy. Any other change keeps its
// last-fired point.
func TestAnApplyThatChangesTheCronStartsTheScheduleAfresh(t *testing.T) {
	t.Parallel()
	def, err := core.ParseWorkflowFile([]byte(scheduledWorkflow))
	if err != nil {
		t.Fatal(err)
	}
	paths := []struct {
		name  string
		apply func(f *fixture, spec schedule.Definition) error
	}{
		{"workflow file", func(f *fixture, spec schedule.Definition) error {
			_, _, _, err := f.s.ApplyWorkflowFile(f.ctx, def.Definition, []schedule.Definition{spec}, "test")
			return err
		}},
		{"ApplySchedule", func(f *fixture, spec schedule.Definition) error {
			_, _, err := f.s.ApplySchedule(f.ctx, spec, "test", "")
			return err
		}},
	}
	base := schedule.Definition{Name: "s", Workflow: "nightly-etl", Overlap: schedule.OverlapAllow, Owner: schedule.OwnerFile}
	with := func(mod func(*schedule.Definition)) schedule.Definition { s := base; mod(&s); return s }
	all := func(cron, zone string, window time.Duration) schedule.Definition {
		return with(func(s *schedule.Definition) {
			s.Cron, s.Timezone, s.Catchup, s.CatchupWindow = cron, zone, schedule.CatchupAll, window
		})
	}
	cron := func(expr string) schedule.Definition { return with(func(s *schedule.Definition) { s.Cron = expr }) }
	cases := []struct {
		name     string
		old, new schedule.Definition
		ago      time.Duration // the last-fired point, before the apply
		afresh   bool
	}{
		{"yearly to every 5s", cron("@yearly"), cron("*/5 * * * * *"), 50 * time.Second, true},
		{"yearly to every 5s, catch-up all", all("@yearly", "", 10*time.Minute), all("*/5 * * * * *", "", 10*time.Minute), 75 * time.Second, true},
		{"another zone, catch-up all", all("0 * * * *", "", 3*time.Hour), all("0 * * * *", "Asia/Kolkata", 3*time.Hour), 2 * time.Hour, true}, // :00 UTC to :30 UTC
		{"params", cron("*/5 * * * * *"), with(func(s *schedule.Definition) { s.Cron, s.Params = "*/5 * * * * *", json.RawMessage(`{"k":"v"}`) }), 50 * time.Second, false},
		{"overlap and jitter", cron("@hourly"), with(func(s *schedule.Definition) {
			s.Cron, s.Overlap, s.Jitter = "@hourly", schedule.OverlapSkip, time.Minute
		}), 2 * time.Hour, false},
		{"catch-up policy", cron("@every 10s"), all("@every 10s", "UTC", time.Hour), 5 * time.Minute, false},
	}
	for _, p := range paths {
		for _, c := range cases {
			t.Run(p.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				f := newScheduleFixture(t)
				if err := p.apply(f, c.old); err != nil {
					t.Fatal(err)
				}
				backdated := f.backdateSchedule("s", c.ago)
				var before time.Time
				if err := f.db.QueryRowContext(f.ctx, `SELECT now()`).Scan(&before); err != nil {
					t.Fatal(err)
				}
				if err := p.apply(f, c.new); err != nil {
					t.Fatal(err)
				}
				if n := f.count(`SELECT count(*) FROM schedule_events WHERE action = 'update'`); n != 1 {
					t.Fatalf("%d updates audited, want the apply's 1", n)
				}
				through := f.firedThrough("s")
				if !c.afresh {
					if !through.Equal(backdated) {
						t.Fatalf("last-fired point %v after the apply, want it kept at %v", through, backdated)
					}
					return
				}
				f.fire()
				var past []time.Time
				for _, tk := range f.ticks("s") {
					if !tk.ScheduledAt.After(before) {
						past = append(past, tk.ScheduledAt)
					}
				}
				if len(past) > 0 {
					t.Errorf("the pass after the apply fired %d ticks from before it (%v ... %v)", len(past), past[0], past[len(past)-1])
				}
				if through.Before(before) {
					t.Errorf("last-fired point %v after the apply, want the apply's clock (at or after %v)", through, before)
				}
			})
		}
	}
}

// firedThrough is the schedule's last-fired point.
func (f *fixture) firedThrough(name string) time.Time {
	f.t.Helper()
	var at time.Time
	if err := f.db.QueryRowContext(f.ctx, `SELECT fired_through FROM schedules WHERE name = $1`, name).Scan(&at); err != nil {
		f.t.Fatalf("read fired_through of %s: %v", name, err)
	}
	return at
}
