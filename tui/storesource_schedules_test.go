package tui

import (
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/schedule"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// TestStoreSourceSchedules: against PostgreSQL, the Schedules screen's
// reads show a file-owned and a CLI schedule with their last tick and its
// run's state, the next fire times from the database's clock; pause,
// resume and trigger-now go through the store's calls, audited as the
// source's actor with the reason given.
func TestStoreSourceSchedules(t *testing.T) {
	t.Parallel()
	s, url := storetest.New(t)
	ctx := t.Context()
	file, err := core.ParseWorkflowFile([]byte("name: etl\ntasks:\n  - {name: a, handler: noop}\nschedules:\n  - {name: etl-minutely, cron: '* * * * *'}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := s.ApplyWorkflowFile(ctx, file.Definition, schedule.FromFile("etl", file.Schedules), "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateSchedule(ctx, schedule.Definition{Name: "by-hand", Workflow: "etl", Cron: "0 3 * * *", Timezone: "Asia/Tokyo"}, "test", ""); err != nil {
		t.Fatal(err)
	}
	// A minute ago, as far as etl-minutely knows: its due tick fires.
	db := storetest.DB(t, url)
	if _, err := db.ExecContext(ctx, `UPDATE schedules SET fired_through = now() - interval '61 seconds' WHERE name = 'etl-minutely'`); err != nil {
		t.Fatal(err)
	}
	if res, err := s.FireDueTicks(ctx, store.FireRequest{Actor: "scheduler-test"}); err != nil || len(res.Ticks) != 1 {
		t.Fatalf("fire: %+v, %v", res, err)
	}

	src := NewStoreSource(s, "ops@test")
	list, err := src.Schedules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Schedules) != 2 || list.Schedules[0].Name != "by-hand" || list.Schedules[1].Name != "etl-minutely" || list.Now.IsZero() {
		t.Fatalf("list: %+v", list)
	}
	m := newSchedulesModel(&shared{width: 120, height: 30, theme: newTheme(newRenderer(nil, true)), nav: newNavKeys()})
	m.setData(list)
	v := m.view(120, 27)
	for _, want := range []string{"by-hand", "Asia/Tokyo", "cli", "etl-minutely", "* * * * *", "fired", "RUNNING", "file"} {
		if !strings.Contains(v, want) {
			t.Fatalf("list view lacks %q:\n%s", want, v)
		}
	}
	next := nextFires(list.Schedules[1], list.Now, NextFiresShown)
	if len(next) != 5 || !next[0].After(list.Now) || next[0].Sub(list.Now) > time.Minute || next[1].Sub(next[0]) != time.Minute {
		t.Fatalf("next fires of a minutely schedule at %v: %v", list.Now, next)
	}

	for _, step := range []struct {
		what string
		do   func() error
	}{
		{"pause", func() error { _, err := src.PauseSchedule(ctx, "etl-minutely", "deploy freeze"); return err }},
		{"resume", func() error { _, err := src.ResumeSchedule(ctx, "etl-minutely", "freeze over"); return err }},
		{"trigger-now", func() error { _, err := src.TriggerScheduleNow(ctx, "etl-minutely", "backfill"); return err }},
	} {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.what, err)
		}
	}
	if changed, err := src.ResumeSchedule(ctx, "etl-minutely", "again"); err != nil || changed {
		t.Fatalf("resume of an active schedule: changed %v, %v; want false, nil (nothing changed, nothing audited)", changed, err)
	}
	var audit []string
	rows, err := db.QueryContext(ctx, `SELECT action || ' ' || actor || ' ' || reason FROM schedule_events WHERE schedule_name = 'etl-minutely' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var a string
		if err := rows.Scan(&a); err != nil {
			t.Fatal(err)
		}
		audit = append(audit, a)
	}
	rows.Close()
	want := []string{"create test workflow file of etl (version 1)", "pause ops@test deploy freeze", "resume ops@test freeze over", "trigger-now ops@test backfill"}
	if strings.Join(audit, "|") != strings.Join(want, "|") {
		t.Fatalf("audit:\n%q\nwant\n%q", audit, want)
	}

	d, err := src.Schedule(ctx, "etl-minutely")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Schedule.Ticks) != 2 || !d.Schedule.Ticks[0].Manual || d.Schedule.Ticks[0].RunID == nil || d.Schedule.Ticks[0].RunState != "RUNNING" || d.Schedule.Ticks[1].Manual {
		t.Fatalf("ticks: %+v", d.Schedule.Ticks)
	}
	m.name = "etl-minutely"
	m.setData(d)
	if v := m.view(120, 27); !strings.Contains(v, "manual") || !strings.Contains(v, d.Schedule.Ticks[0].RunID.String()[:8]) || !strings.Contains(v, "trigger-now: backfill") {
		t.Fatalf("detail view:\n%s", v)
	}
	if _, err := src.Schedule(ctx, "nope"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("an unknown schedule: %v", err)
	}
}
