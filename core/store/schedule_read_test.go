package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core/schedule"
	"github.com/flowforge/flowforge/core/store"
)

func TestListSchedules(t *testing.T) {
	t.Parallel()
	f := newScheduleFixture(t)
	f.createSchedule(schedule.Definition{Name: "b", Workflow: "nightly-etl", Cron: "@every 10s", Timezone: "Europe/Berlin"})
	f.createSchedule(schedule.Definition{Name: "a", Workflow: "nightly-etl", Cron: "0 3 * * *", Catchup: schedule.CatchupOne, CatchupWindow: time.Hour, Jitter: time.Minute})
	f.backdateSchedule("b", 15*time.Second)
	f.fire()
	list, err := f.s.ListSchedules(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "a" || list[1].Name != "b" {
		t.Fatalf("list %+v", list)
	}
	a, b := list[0], list[1]
	if a.Timezone != "UTC" || a.Overlap != schedule.OverlapSkip || a.Catchup != schedule.CatchupOne || a.CatchupWindowMS != 3600000 || a.JitterMS != 60000 || a.Owner != schedule.OwnerCLI || len(a.Ticks) != 0 {
		t.Fatalf("a: %+v", a)
	}
	if b.Timezone != "Europe/Berlin" || len(b.Ticks) != 1 || b.Ticks[0].Outcome != store.TickFired {
		t.Fatalf("b: %+v", b)
	}
}

func TestGetScheduleShowsTheLastTenTicksNewestFirst(t *testing.T) {
	t.Parallel()
	f := newScheduleFixture(t)
	f.createSchedule(schedule.Definition{Name: "s", Workflow: "nightly-etl", Cron: "* * * * * *", Overlap: schedule.OverlapAllow})
	f.backdateSchedule("s", 15*time.Second)
	if res := f.fire(); len(res.Ticks) < 15 {
		t.Fatalf("%d ticks fired, want at least 15", len(res.Ticks))
	}
	sc, err := f.s.GetSchedule(f.ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.Ticks) != store.ScheduleTicksShown {
		t.Fatalf("%d ticks shown, want %d", len(sc.Ticks), store.ScheduleTicksShown)
	}
	for i := 1; i < len(sc.Ticks); i++ {
		if !sc.Ticks[i].ScheduledAt.Before(sc.Ticks[i-1].ScheduledAt) || sc.Ticks[i].RunState != "RUNNING" {
			t.Fatalf("tick %d: %+v after %+v", i, sc.Ticks[i], sc.Ticks[i-1])
		}
	}
	if _, err := f.s.TriggerScheduleNow(f.ctx, "nope", "tester", "why"); err == nil || err.Error() != `schedule "nope": not found` {
		t.Fatalf("trigger-now of an unknown schedule: %v", err)
	}
	if _, err := f.s.PauseSchedule(f.ctx, "nope", "tester", "why"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("pause of an unknown schedule: %v", err)
	}
}
