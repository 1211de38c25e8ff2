package tui

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core/schedule"
	"github.com/flowforge/flowforge/core/store"
)

// fakeSchedules is the fake's schedules and the actions done on them
// ("pause nightly-etl: reason").
type fakeSchedules struct {
	list    []store.Schedule
	actions []string
	err     error // fails every action when set
}

// schedules returns the fake's schedules world, making it on first use.
// The caller holds f.mu.
func (f *fakeSource) schedules() *fakeSchedules {
	if f.sched != nil {
		return f.sched
	}
	runID := func(n int) *uuid.UUID { u := id(n); return &u }
	tick := func(n int, at time.Duration, outcome store.TickOutcome, run *uuid.UUID, state, reason, actor string) store.Tick {
		return store.Tick{ID: int64(n), ScheduledAt: t0.Add(-at), FiredAt: t0.Add(-at + 40*time.Millisecond), Outcome: outcome, RunID: run, RunState: state, Reason: reason, Actor: actor}
	}
	nightly := store.Schedule{ID: 1, Definition: schedule.Definition{Name: "nightly-report", Workflow: "nightly-report", Cron: "30 2 * * *", Timezone: "Europe/Berlin",
		Params: []byte(`{"date":"today"}`), Overlap: schedule.OverlapSkip, Catchup: schedule.CatchupOne, CatchupWindow: time.Hour, Owner: schedule.OwnerFile},
		CatchupWindowMS: 3600000, CreatedAt: t0.Add(-72 * time.Hour), FiredThrough: t0.Add(-10*time.Hour - 30*time.Minute)} // its last tick
	for i := range 10 {
		day := time.Duration(i) * 24 * time.Hour
		// 02:30 Berlin is 01:30 UTC in winter; t0 is 12:00 UTC.
		at := 10*time.Hour + 30*time.Minute + day
		switch {
		case i == 0:
			nightly.Ticks = append(nightly.Ticks, tick(100-i, at, store.TickFired, runID(1), "RUNNING", "", "scheduler-host1-1-aaaa"))
		case i == 1:
			nightly.Ticks = append(nightly.Ticks, tick(100-i, at, store.TickSkipped, nil, "", "the previous run 2f1e3d5b is RUNNING (overlap skip)", "scheduler-host1-1-aaaa"))
		case i == 2:
			nightly.Ticks = append(nightly.Ticks, tick(100-i, at, store.TickFailed, nil, "", "params: render idempotency_key of task \"load\"\x1b[2J", "scheduler-host1-1-aaaa"))
		default:
			nightly.Ticks = append(nightly.Ticks, tick(100-i, at, store.TickFired, runID(10+i), "SUCCEEDED", "", "scheduler-host1-1-aaaa"))
		}
	}
	hourly := store.Schedule{ID: 2, Definition: schedule.Definition{Name: "wordcount-hourly", Workflow: "wordcount", Cron: "@hourly", Timezone: "UTC",
		Params: []byte(`{}`), Overlap: schedule.OverlapAllow, Catchup: schedule.CatchupNone, Jitter: 30 * time.Second, Owner: schedule.OwnerCLI},
		JitterMS: 30000, CreatedAt: t0.Add(-5 * time.Hour), FiredThrough: t0} // its 12:00 tick decided as the screen reads
	hourly.Ticks = []store.Tick{tick(50, 20*time.Minute, store.TickFailed, nil, "", "workflow \"wordcount\" not found", "scheduler-host1-1-aaaa")}
	billing := store.Schedule{ID: 3, Definition: schedule.Definition{Name: "billing-5min", Workflow: "billing-sync", Cron: "*/5 * * * *", Timezone: "America/New_York",
		Params: []byte(`{}`), Overlap: schedule.OverlapCancelPrevious, Catchup: schedule.CatchupNone, Paused: true, Owner: schedule.OwnerCLI},
		CreatedAt: t0.Add(-time.Hour), FiredThrough: t0.Add(-time.Hour)}
	billing.Ticks = []store.Tick{}
	f.sched = &fakeSchedules{list: []store.Schedule{billing, nightly, hourly}}
	return f.sched
}

func (f *fakeSource) findSchedule(name string) (*store.Schedule, error) {
	for i, sc := range f.schedules().list {
		if sc.Name == name {
			return &f.schedules().list[i], nil
		}
	}
	return nil, fmt.Errorf("schedule %q: %w", name, store.ErrNotFound)
}

func (f *fakeSource) Schedules(context.Context) (SchedulesData, error) {
	if err := f.fail(); err != nil {
		return SchedulesData{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []store.Schedule{}
	for _, sc := range f.schedules().list {
		sc.Ticks = sc.Ticks[:min(len(sc.Ticks), 1)]
		out = append(out, sc)
	}
	return SchedulesData{Now: t0, Schedules: out}, nil
}

func (f *fakeSource) Schedule(_ context.Context, name string) (ScheduleData, error) {
	if err := f.fail(); err != nil {
		return ScheduleData{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	sc, err := f.findSchedule(name)
	if err != nil {
		return ScheduleData{}, err
	}
	return ScheduleData{Now: t0, Schedule: *sc}, nil
}

func (f *fakeSource) act(action, name, reason string, do func(sc *store.Schedule) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs := f.schedules()
	fs.actions = append(fs.actions, action+" "+name+": "+reason)
	if fs.err != nil {
		return fs.err
	}
	sc, err := f.findSchedule(name)
	if err != nil {
		return err
	}
	return do(sc)
}

func (f *fakeSource) PauseSchedule(_ context.Context, name, reason string) (bool, error) {
	changed := false
	err := f.act("pause", name, reason, func(sc *store.Schedule) error { changed = !sc.Paused; sc.Paused = true; return nil })
	return changed, err
}

func (f *fakeSource) ResumeSchedule(_ context.Context, name, reason string) (bool, error) {
	changed := false
	err := f.act("resume", name, reason, func(sc *store.Schedule) error { changed = sc.Paused; sc.Paused = false; return nil })
	return changed, err
}

func (f *fakeSource) TriggerScheduleNow(_ context.Context, name, reason string) (store.Tick, error) {
	var t store.Tick
	err := f.act("trigger-now", name, reason, func(sc *store.Schedule) error {
		run := id(77)
		t = store.Tick{ID: 999, ScheduledAt: t0, FiredAt: t0, Manual: true, Outcome: store.TickFired, RunID: &run, RunState: "PENDING", Reason: "trigger-now: " + reason, Actor: "cli:ops"}
		sc.Ticks = append([]store.Tick{t}, sc.Ticks...)
		return nil
	})
	return t, err
}

// TestSchedulesScreenListsAndShowsADetail: the list has each schedule's
// next fire (from the database's clock), paused state, last tick and its
// run's state, owner; enter shows the next five fire times in the
// schedule's zone and the last ten ticks; enter on a tick opens its run;
// esc goes back to the list.
func TestSchedulesScreenListsAndShowsADetail(t *testing.T) {
	t.Parallel()
	f := newFake()
	h := newHarness(t, f, Options{})
	h.size(120, 30)
	h.keys("8")
	v := h.view()
	for _, want := range []string{"[8 Schedules]", "3 schedules · 1 paused",
		// nightly-report: 02:30 Berlin is 01:30 UTC, t0 is 12:00 UTC: in 13h30m.
		"nightly-report       nightly-report       30 2 * * *         Europe/Berlin 13h30m no     fired 10h29m  RUNNING   file",
		"!wordcount-hourly     wordcount            @hourly            UTC            1h00m no     failed 19m59s -         cli",
		"billing-5min         billing-sync         */5 * * * *        America/New_…      - PAUSED -             -         cli"} {
		if !strings.Contains(v, want) {
			t.Fatalf("list lacks %q:\n%s", want, v)
		}
	}
	h.keys("down", "enter")
	if h.m.cur != scrSchedules {
		t.Fatalf("enter left the screen for %d", h.m.cur)
	}
	v = h.view()
	for _, want := range []string{"schedule nightly-report  active",
		"workflow nightly-report · cron 30 2 * * * · Europe/Berlin · owner file",
		"declared in the workflow file of nightly-report (changed there) · overlap skip · catch-up one within 1h00m",
		"Tue 2026-12-01 02:30:00 CET  in 13h30m", "Sat 2026-12-05 02:30:00 CET  in 4d13h",
		"last 10 ticks, newest first",
		"11-30 02:30:00", "fired", "RUNNING", "skipped", "the previous run 2f1e3d5b is RUNNING",
		"11-21 02:30:00"} {
		if !strings.Contains(v, want) {
			t.Fatalf("detail lacks %q:\n%s", want, v)
		}
	}
	if strings.Contains(v, "Sun 2026-12-06") {
		t.Fatalf("detail shows more than five fire times:\n%s", v)
	}
	if strings.Contains(v, "\x1b[2J") {
		t.Fatal("a tick's reason drives the terminal")
	}
	// The third tick (failed) has no run: enter does nothing; the first's
	// opens its run.
	h.keys("down", "down", "enter")
	if h.m.cur != scrSchedules {
		t.Fatal("enter on a tick without a run left the screen")
	}
	h.keys("g", "enter")
	if h.m.cur != scrRun || h.m.run.id != id(1).String() {
		t.Fatalf("enter on the first tick: screen %d run %q, want the Run screen on %s", h.m.cur, h.m.run.id, id(1))
	}
	// esc goes back to the schedule whose tick opened the run (it went to
	// the Runs list: a trial finding); the Run screen reached by its tab
	// still goes back to the Runs list.
	h.keys("esc")
	if h.m.cur != scrSchedules || h.m.screens[scrSchedules].(*schedulesModel).name != "nightly-report" {
		t.Fatalf("esc from a tick's run: screen %d, want the Schedules screen on nightly-report", h.m.cur)
	}
	h.keys("2", "esc")
	if h.m.cur != scrRuns {
		t.Fatalf("esc from the Run tab: screen %d, want the Runs list", h.m.cur)
	}
	h.keys("8", "esc")
	if v := h.view(); !strings.Contains(v, "3 schedules") {
		t.Fatalf("esc did not return to the list:\n%s", v)
	}
	// A schedule deleted while shown: the detail says so (not a failed
	// refresh), offers no action, and esc goes back.
	h.keys("enter")
	f.mu.Lock()
	f.sched.list = append(f.sched.list[:1], f.sched.list[2:]...) // nightly-report, under the cursor
	f.mu.Unlock()
	h.send(refreshMsg{})
	v = h.view()
	if !strings.Contains(v, "schedule nightly-report no longer exists (deleted, or removed from its workflow file)") || strings.Contains(v, "refresh failed") {
		t.Fatalf("detail of a deleted schedule:\n%s", v)
	}
	h.keys("p")
	if h.m.screens[scrSchedules].capturing() {
		t.Fatal("p on a deleted schedule opened the prompt")
	}
	// Only esc is offered (the key bar offered p, r, t and enter, which did
	// nothing or opened a run from the stale tick list: a trial finding).
	if ks := h.m.screens[scrSchedules].keys(); len(ks) != 1 || ks[0].Help().Key != keyBack.Help().Key {
		t.Fatalf("a deleted schedule's detail offers %d keys, want esc alone", len(ks))
	}
	h.keys("g", "enter")
	if h.m.cur != scrSchedules {
		t.Fatalf("enter on a deleted schedule's stale tick opened screen %d", h.m.cur)
	}
	h.keys("esc")
	if v := h.view(); !strings.Contains(v, "2 schedules") {
		t.Fatalf("esc from a deleted schedule:\n%s", v)
	}
}

// TestAPausedScheduleShowsNoNextFireTimes: a paused schedule fires no
// tick, so its list row and its detail show no next fire time, as `ffctl
// schedule list` and `show` do (schedule.ShownFireTimes decides for both);
// once resumed its next fire times are shown.
func TestAPausedScheduleShowsNoNextFireTimes(t *testing.T) {
	t.Parallel()
	f := newFake()
	h := newHarness(t, f, Options{})
	h.size(120, 30)
	h.keys("8")
	if v := h.view(); !strings.Contains(v, "billing-5min         billing-sync         */5 * * * *        America/New_…      - PAUSED") {
		t.Fatalf("the paused schedule's row shows a next fire:\n%s", v)
	}
	h.keys("enter") // billing-5min, paused, is first
	v := h.view()
	if !strings.Contains(v, "schedule billing-5min  PAUSED") || !strings.Contains(v, "next fire times (paused: none fires until resumed)\n  none\n") {
		t.Fatalf("the paused schedule's detail:\n%s", v)
	}
	if strings.Contains(v, "07:05:00 EST") {
		t.Fatalf("the paused schedule's detail shows a fire time:\n%s", v)
	}
	f.mu.Lock()
	f.sched.list[0].Paused = false
	f.mu.Unlock()
	h.send(refreshMsg{})
	if v := h.view(); !strings.Contains(v, "Mon 2026-11-30 07:05:00 EST  in 5m00s") {
		t.Fatalf("the resumed schedule's detail lacks its next fire time:\n%s", v)
	}
}

// TestSchedulesScreenActionsAskForAReason: p, r and t each ask for a
// reason and run the store's action with it; a pause of a paused
// schedule (or a resume of an active one) is refused without asking;
// read-only offers none.
func TestSchedulesScreenActionsAskForAReason(t *testing.T) {
	t.Parallel()
	f := newFake()
	h := newHarness(t, f, Options{})
	h.size(120, 30)
	h.keys("8", "down", "p")
	if !strings.Contains(h.view(), "Pause schedule nightly-report (it fires no tick until resumed)?") {
		t.Fatalf("p did not ask:\n%s", h.view())
	}
	h.keys("enter")
	if !strings.Contains(h.view(), "a reason is required") || len(f.schedules().actions) != 0 {
		t.Fatalf("an empty reason was not refused: %v", f.schedules().actions)
	}
	h.keys("text:deploy freeze", "enter")
	if got := f.schedules().actions; len(got) != 1 || got[0] != "pause nightly-report: deploy freeze" {
		t.Fatalf("actions %q", got)
	}
	v := h.view()
	if !strings.Contains(v, "schedule nightly-report: paused") || !strings.Contains(v, "3 schedules · 2 paused") {
		t.Fatalf("after pause:\n%s", v)
	}
	h.keys("p")
	if h.m.screens[scrSchedules].capturing() || !strings.Contains(h.view(), "schedule nightly-report is already paused") {
		t.Fatalf("pause of a paused schedule:\n%s", h.view())
	}
	// From the detail: resume, then trigger now.
	h.keys("enter", "r", "text:freeze over", "enter", "t", "text:backfill", "enter")
	got := f.schedules().actions
	if len(got) != 3 || got[1] != "resume nightly-report: freeze over" || got[2] != "trigger-now nightly-report: backfill" {
		t.Fatalf("actions %q", got)
	}
	v = h.view()
	if !strings.Contains(v, "schedule nightly-report: triggered run "+id(77).String()) || !strings.Contains(v, "manual 13:00") {
		t.Fatalf("after trigger-now:\n%s", v)
	}
	h.keys("r")
	if !strings.Contains(h.view(), "schedule nightly-report is not paused") {
		t.Fatalf("resume of an active schedule:\n%s", h.view())
	}
	// A refused action says why.
	f.schedules().err = fmt.Errorf("schedule %q: %w", "nightly-report", store.ErrNotFound)
	h.keys("p", "text:again", "enter")
	if !strings.Contains(h.view(), `schedule nightly-report: pause: schedule "nightly-report": not found`) {
		t.Fatalf("a refused pause:\n%s", h.view())
	}

	ro := newHarness(t, newFake(), Options{ReadOnly: true})
	ro.keys("8", "down", "p", "r", "t")
	if ro.m.screens[scrSchedules].capturing() || len(ro.f.schedules().actions) != 0 || strings.Contains(ro.view(), "trigger now") {
		t.Fatalf("read-only: an action was offered or done:\n%s", ro.view())
	}
}

func TestGoldenSchedules(t *testing.T) {
	t.Parallel()
	for _, sz := range []struct{ w, h int }{{80, 24}, {120, 30}} {
		for _, tc := range []struct {
			name string
			keys []string
		}{
			{"list", []string{"8"}},
			{"detail", []string{"8", "down", "enter"}},
			{"pause_prompt", []string{"8", "down", "p", "text:deploy freeze"}},
		} {
			t.Run(fmt.Sprintf("%s_%dx%d", tc.name, sz.w, sz.h), func(t *testing.T) {
				h := newHarness(t, newFake(), Options{})
				h.size(sz.w, sz.h)
				h.keys(tc.keys...)
				h.golden()
			})
		}
	}
}
