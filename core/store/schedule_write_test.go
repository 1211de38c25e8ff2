package store_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/schedule"
	"github.com/flowforge/flowforge/core/store"
)

func TestScheduleOperatorActions(t *testing.T) {
	t.Parallel()
	f := newScheduleFixture(t)
	f.createSchedule(schedule.Definition{Name: "m", Workflow: "nightly-etl", Cron: "@every 10s", Params: json.RawMessage(`{"day":"mon"}`)})
	if _, err := f.s.PauseSchedule(f.ctx, "m", "tester", ""); !errors.Is(err, core.ErrBadReason) {
		t.Fatalf("pause without a reason: %v", err)
	}
	if changed, err := f.s.PauseSchedule(f.ctx, "m", "tester", "maintenance"); err != nil || !changed {
		t.Fatalf("pause: changed %v, %v", changed, err)
	}
	// Pausing again changes nothing (and audits nothing: see below).
	if changed, err := f.s.PauseSchedule(f.ctx, "m", "tester", "again"); err != nil || changed {
		t.Fatalf("second pause: changed %v, %v; want false, nil", changed, err)
	}
	f.backdateSchedule("m", 35*time.Second)
	if res := f.fire(); len(res.Ticks) != 0 {
		t.Fatalf("a paused schedule fired %+v", res.Ticks)
	}
	tick, err := f.s.TriggerScheduleNow(f.ctx, "m", "tester", "backfill monday")
	if err != nil {
		t.Fatal(err)
	}
	if !tick.Manual || tick.Outcome != store.TickFired || tick.RunID == nil || tick.RunState != string(core.RunRunning) {
		t.Fatalf("trigger-now tick %+v (want its run RUNNING)", tick)
	}
	var params string
	if err := f.db.QueryRowContext(f.ctx, `SELECT params::text FROM workflow_runs WHERE id = $1`, *tick.RunID).Scan(&params); err != nil || params != `{"day": "mon"}` {
		t.Fatalf("run params %s, %v", params, err)
	}
	if changed, err := f.s.ResumeSchedule(f.ctx, "m", "tester", "done"); err != nil || !changed {
		t.Fatalf("resume: changed %v, %v", changed, err)
	}
	// The ticks of the pause are not caught up.
	if res := f.fire(); len(res.Ticks) != 0 {
		t.Fatalf("resume caught up %+v", res.Ticks)
	}
	if changed, err := f.s.ResumeSchedule(f.ctx, "m", "tester", "again"); err != nil || changed {
		t.Fatalf("second resume: changed %v, %v; want false, nil", changed, err)
	}
	sc, err := f.s.GetSchedule(f.ctx, "m")
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.Ticks) != 1 || sc.Ticks[0].RunState != "RUNNING" || sc.ReadAt.IsZero() {
		t.Fatalf("show: ticks %+v read at %v", sc.Ticks, sc.ReadAt)
	}
	// Deleting the tick's run (the retention pruner) keeps the tick.
	if _, err := f.db.ExecContext(f.ctx, `DELETE FROM workflow_runs WHERE id = $1`, *tick.RunID); err != nil {
		t.Fatalf("delete the run of a tick: %v", err)
	}
	if sc, err = f.s.GetSchedule(f.ctx, "m"); err != nil || len(sc.Ticks) != 1 || sc.Ticks[0].RunState != "" {
		t.Fatalf("after the run was pruned: %+v, %v", sc.Ticks, err)
	}
	if err := f.s.DeleteSchedule(f.ctx, "m", "tester", "retired"); err != nil {
		t.Fatal(err)
	}
	if err := f.s.DeleteSchedule(f.ctx, "m", "tester", "retired"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := f.s.GetSchedule(f.ctx, "m"); err == nil || err.Error() != `schedule "m": not found` {
		t.Fatalf("get deleted: %v", err)
	}
	var actions []string
	rows, err := f.db.QueryContext(f.ctx, `SELECT action || ':' || actor || ':' || reason FROM schedule_events WHERE schedule_name = 'm' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var a string
		if err := rows.Scan(&a); err != nil {
			t.Fatal(err)
		}
		actions = append(actions, a)
	}
	want := []string{"create:tester:", "pause:tester:maintenance", "trigger-now:tester:backfill monday", "resume:tester:done", "delete:tester:retired"}
	if len(actions) != len(want) {
		t.Fatalf("audit %v, want %v", actions, want)
	}
	for i := range want {
		if actions[i] != want[i] {
			t.Fatalf("audit %v, want %v", actions, want)
		}
	}
}
