package schedule_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core/schedule"
)

func utc(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v.UTC()
}

// TestNextFireTimesAcrossDST asserts the exact fire times of a daily 02:30
// and an hourly schedule in Europe/Berlin across the spring-forward
// (2026-03-29 02:00 CET -> 03:00 CEST) and fall-back (2026-10-25 03:00
// CEST -> 02:00 CET) changes.
func TestNextFireTimesAcrossDST(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, cron, from string
		want             []string // UTC
		wantLocal        []string // in Europe/Berlin
	}{
		{
			name: "daily 02:30 skips the missing wall time", cron: "30 2 * * *", from: "2026-03-27T12:00:00Z",
			want:      []string{"2026-03-28T01:30:00Z", "2026-03-30T00:30:00Z", "2026-03-31T00:30:00Z"},
			wantLocal: []string{"2026-03-28T02:30:00+01:00", "2026-03-30T02:30:00+02:00", "2026-03-31T02:30:00+02:00"},
		},
		{
			name: "daily 02:30 fires at both occurrences of the repeated hour", cron: "30 2 * * *", from: "2026-10-23T12:00:00Z",
			want:      []string{"2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-25T01:30:00Z", "2026-10-26T01:30:00Z"},
			wantLocal: []string{"2026-10-24T02:30:00+02:00", "2026-10-25T02:30:00+02:00", "2026-10-25T02:30:00+01:00", "2026-10-26T02:30:00+01:00"},
		},
		{
			name: "hourly across spring forward", cron: "0 * * * *", from: "2026-03-28T23:30:00Z",
			want:      []string{"2026-03-29T00:00:00Z", "2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z"},
			wantLocal: []string{"2026-03-29T01:00:00+01:00", "2026-03-29T03:00:00+02:00", "2026-03-29T04:00:00+02:00"},
		},
		{
			name: "hourly across fall back", cron: "@hourly", from: "2026-10-24T23:30:00Z",
			want:      []string{"2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z", "2026-10-25T02:00:00Z"},
			wantLocal: []string{"2026-10-25T02:00:00+02:00", "2026-10-25T02:00:00+01:00", "2026-10-25T03:00:00+01:00"},
		},
		{
			name: "seconds field", cron: "30 0 3 * * *", from: "2026-10-24T12:00:00Z",
			want:      []string{"2026-10-25T02:00:30Z", "2026-10-26T02:00:30Z"},
			wantLocal: []string{"2026-10-25T03:00:30+01:00", "2026-10-26T03:00:30+01:00"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			spec, err := schedule.Parse(c.cron, "Europe/Berlin")
			if err != nil {
				t.Fatal(err)
			}
			from := utc(t, c.from)
			got := schedule.NextFireTimes(schedule.Window{Spec: spec, After: from}, from, len(c.want))
			if len(got) != len(c.want) {
				t.Fatalf("got %d times, want %d", len(got), len(c.want))
			}
			for i := range got {
				if g := got[i].UTC().Format(time.RFC3339); g != c.want[i] {
					t.Errorf("fire %d: %s UTC, want %s", i, g, c.want[i])
				}
				if g := got[i].Format(time.RFC3339); g != c.wantLocal[i] {
					t.Errorf("fire %d: %s local, want %s", i, g, c.wantLocal[i])
				}
			}
		})
	}
}

// TestNextFireTimesAreTheTicksTheSchedulerFiresNext: the next fire times
// shown are those Due fires, counted from the last-fired point (After):
// an "@every" schedule's grid is its last-fired point's, whenever it is
// read; a cron expression's are its fire times after now; a tick whose
// jitter holds it back past now is still to come; a last-fired point far
// in the past (a scheduler down for days, or never set) costs no stepping
// through the ticks since.
func TestNextFireTimesAreTheTicksTheSchedulerFiresNext(t *testing.T) {
	t.Parallel()
	at := func(s string) time.Time { return utc(t, s) }
	// The jitter of the 11:00 tick of "j" (its run starts then), checked
	// to be within its bound and not 0 so that the cases below mean
	// something.
	j := schedule.Jitter("j", at("2026-05-01T11:00:00Z"), 30*time.Minute)
	if j <= time.Second || j >= 30*time.Minute {
		t.Fatalf("jitter %v: pick another name", j)
	}
	cases := []struct {
		name, cron, zone string
		jitter           time.Duration
		after, now       time.Time
		want             []string
	}{
		{name: "@every anchored at the last-fired point", cron: "@every 30s",
			after: at("2026-05-01T01:16:34.7Z"), now: at("2026-05-01T01:17:16.2Z"),
			want: []string{"2026-05-01T01:17:34Z", "2026-05-01T01:18:04Z", "2026-05-01T01:18:34Z"}},
		{name: "@every read at a tick: that tick is due now, not next", cron: "@every 30s",
			after: at("2026-05-01T01:17:04Z"), now: at("2026-05-01T01:17:34Z"),
			want: []string{"2026-05-01T01:18:04Z", "2026-05-01T01:18:34Z"}},
		{name: "@every never fired yet (created a second ago)", cron: "@every 1h",
			after: at("2026-05-01T10:00:00.5Z"), now: at("2026-05-01T10:00:01.5Z"),
			want: []string{"2026-05-01T11:00:00Z", "2026-05-01T12:00:00Z"}},
		{name: "@every 7s, scheduler down for ten days: on the grid of the last-fired point", cron: "@every 7s",
			after: at("2026-05-01T00:00:00Z"), now: at("2026-05-11T00:00:00Z"), // 864000 s: 123428 periods and 4 s
			want: []string{"2026-05-11T00:00:03Z", "2026-05-11T00:00:10Z"}},
		{name: "@every 1s from the zero time", cron: "@every 1s",
			after: time.Time{}, now: at("2026-05-01T12:00:00.5Z"),
			want: []string{"2026-05-01T12:00:01Z", "2026-05-01T12:00:02Z"}},
		{name: "cron: its fire times after now", cron: "*/15 * * * *",
			after: at("2026-05-01T10:00:00Z"), now: at("2026-05-01T10:07:00Z"),
			want: []string{"2026-05-01T10:15:00Z", "2026-05-01T10:30:00Z"}},
		{name: "cron in a zone", cron: "30 2 * * *", zone: "Europe/Berlin",
			after: at("2026-05-01T00:30:00Z"), now: at("2026-05-01T12:00:00Z"),
			want: []string{"2026-05-02T00:30:00Z", "2026-05-03T00:30:00Z"}},
		{name: "cron, last-fired point years back", cron: "0 3 * * *",
			after: at("2001-01-01T03:00:00Z"), now: at("2026-05-01T12:00:00Z"),
			want: []string{"2026-05-02T03:00:00Z", "2026-05-03T03:00:00Z"}},
		{name: "cron with seconds, last-fired point a week back", cron: "* * * * * *",
			after: at("2026-04-24T12:00:00Z"), now: at("2026-05-01T12:00:00.1Z"),
			want: []string{"2026-05-01T12:00:01Z", "2026-05-01T12:00:02Z"}},
		{name: "a tick held back by its jitter is still to come", cron: "@hourly", jitter: 30 * time.Minute,
			after: at("2026-05-01T10:00:00Z"), now: at("2026-05-01T11:00:00Z").Add(j / 2),
			want: []string{"2026-05-01T11:00:00Z", "2026-05-01T12:00:00Z"}},
		{name: "a tick whose jittered start has come is not", cron: "@hourly", jitter: 30 * time.Minute,
			after: at("2026-05-01T10:00:00Z"), now: at("2026-05-01T11:00:00Z").Add(j),
			want: []string{"2026-05-01T12:00:00Z", "2026-05-01T13:00:00Z"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			spec, err := schedule.Parse(c.cron, c.zone)
			if err != nil {
				t.Fatal(err)
			}
			w := schedule.Window{Name: "j", Spec: spec, After: c.after, Jitter: c.jitter}
			got := schedule.NextFireTimes(w, c.now, len(c.want))
			var gotS []string
			for _, g := range got {
				gotS = append(gotS, g.UTC().Format(time.RFC3339))
			}
			if strings.Join(gotS, " ") != strings.Join(c.want, " ") {
				t.Fatalf("next fire times %v, want %v", gotS, c.want)
			}
			if c.after.IsZero() {
				return // Due's jump is one Duration: a last-fired point (default now()) is never 292 years back
			}
			// The scheduler agrees: at the first one's jittered start,
			// Due fires it (it is on time); a moment before, nothing.
			first := got[0]
			start := first.Add(schedule.Jitter(w.Name, first, w.Jitter))
			if d := schedule.Due(w, start, time.Minute); len(d.Fire) == 0 || !d.Fire[len(d.Fire)-1].Equal(first) {
				t.Errorf("Due at %v fires %v, want %v last", start, d.Fire, first)
			}
			if d := schedule.Due(w, start.Add(-time.Millisecond), time.Minute); slices.ContainsFunc(d.Fire, first.Equal) {
				t.Errorf("Due fires %v before its start %v", first, start)
			}
		})
	}
	spec, _ := schedule.Parse("@daily", "")
	if got := schedule.NextFireTimes(schedule.Window{Spec: spec}, at("2026-05-01T00:00:00Z"), 0); got != nil {
		t.Fatalf("n = 0: %v", got)
	}
}

func TestParseRefusals(t *testing.T) {
	t.Parallel()
	cases := []struct{ cron, zone, want string }{
		{"", "", `invalid schedule: cron expression is missing`},
		{"* * *", "", `invalid schedule: cron "* * *": expected 5 to 6 fields, found 3: [* * *]`},
		{"61 * * * *", "", `invalid schedule: cron "61 * * * *": end of range (61) above maximum (59): 61`},
		{"@weird", "", `invalid schedule: cron "@weird": unrecognized descriptor: @weird`},
		{"* * * * * * *", "UTC", `invalid schedule: cron "* * * * * * *": expected 5 to 6 fields, found 7: [* * * * * * *]`},
		{"CRON_TZ=Europe/Berlin 0 * * * *", "", `invalid schedule: cron "CRON_TZ=Europe/Berlin 0 * * * *": give the time zone with the timezone field, not in the expression`},
		{"* * * * *", "Mars/Olympus", `invalid schedule: unknown time zone "Mars/Olympus"`},
		{"* * * * *", "Local", `invalid schedule: time zone "Local": name an IANA zone such as Europe/Berlin`},
		{"@every -5m", "", `invalid schedule: cron "@every -5m": an @every interval must be at least 1s, got -5m0s`},
		{"@every 0s", "", `invalid schedule: cron "@every 0s": an @every interval must be at least 1s, got 0s`},
		{"@every 1ms", "", `invalid schedule: cron "@every 1ms": an @every interval must be at least 1s, got 1ms`},
		{"@every 1.5s", "", `invalid schedule: cron "@every 1.5s": an @every interval must be whole seconds, got 1.5s`},
		{"@every 7500ms", "", `invalid schedule: cron "@every 7500ms": an @every interval must be whole seconds, got 7.5s`},
		{"0 0 30 2 *", "", `invalid schedule: cron "0 0 30 2 *": never fires (no time matches it)`},
	}
	for _, c := range cases {
		_, err := schedule.Parse(c.cron, c.zone)
		if err == nil || err.Error() != c.want {
			t.Errorf("Parse(%q, %q) = %v, want %s", c.cron, c.zone, err, c.want)
		}
		if !errors.Is(err, schedule.ErrBadSchedule) {
			t.Errorf("Parse(%q, %q): %v does not wrap ErrBadSchedule", c.cron, c.zone, err)
		}
	}
	for _, c := range []struct {
		parse func() error
		want  string
	}{
		{func() error { _, err := schedule.ParseOverlap("sometimes"); return err }, `invalid schedule: overlap policy "sometimes": want skip, allow or cancel-previous`},
		{func() error { _, err := schedule.ParseCatchup("most"); return err }, `invalid schedule: catch-up policy "most": want none, one or all`},
	} {
		if err := c.parse(); err == nil || err.Error() != c.want {
			t.Errorf("got %v, want %s", err, c.want)
		}
	}
}

func TestJitterIsDeterministicAndBounded(t *testing.T) {
	t.Parallel()
	tick := utc(t, "2026-01-01T00:00:00Z")
	if j := schedule.Jitter("a", tick, 0); j != 0 {
		t.Fatalf("jitter with max 0 = %v", j)
	}
	distinct := map[time.Duration]bool{}
	for i := range 50 {
		at := tick.Add(time.Duration(i) * time.Hour)
		j := schedule.Jitter("nightly", at, time.Minute)
		if j != schedule.Jitter("nightly", at, time.Minute) {
			t.Fatal("jitter differs between calls")
		}
		if j < 0 || j >= time.Minute {
			t.Fatalf("jitter %v outside [0, 1m)", j)
		}
		distinct[j] = true
	}
	if len(distinct) < 10 {
		t.Fatalf("only %d distinct jitters over 50 ticks", len(distinct))
	}
}

// TestDueAppliesTheCatchupPolicy: an hourly schedule whose scheduler was
// down from 10:00 to 12:10 (ticks 11:00 and 12:00 missed, 12:00 by 10
// minutes, beyond the 1 minute grace).
func TestDueAppliesTheCatchupPolicy(t *testing.T) {
	t.Parallel()
	spec, err := schedule.Parse("0 * * * *", "UTC")
	if err != nil {
		t.Fatal(err)
	}
	after := utc(t, "2026-05-01T10:00:00Z")
	now := utc(t, "2026-05-01T12:10:00Z")
	cases := []struct {
		name    string
		catchup schedule.Catchup
		window  time.Duration
		fire    []string
		missed  int
	}{
		{"none fires nothing", schedule.CatchupNone, 0, nil, 2},
		{"one fires the latest", schedule.CatchupOne, 3 * time.Hour, []string{"2026-05-01T12:00:00Z"}, 1},
		{"all fires both, oldest first", schedule.CatchupAll, 3 * time.Hour, []string{"2026-05-01T11:00:00Z", "2026-05-01T12:00:00Z"}, 0},
		{"all within a window of 1h fires the last", schedule.CatchupAll, time.Hour, []string{"2026-05-01T12:00:00Z"}, 1},
		{"one with a window too short fires nothing", schedule.CatchupOne, 5 * time.Minute, nil, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := schedule.Due(schedule.Window{Name: "s", Spec: spec, After: after, Catchup: c.catchup, CatchupWindow: c.window}, now, time.Minute)
			var got []string
			for _, f := range d.Fire {
				got = append(got, f.UTC().Format(time.RFC3339))
			}
			if len(got) != len(c.fire) {
				t.Fatalf("fire %v, want %v", got, c.fire)
			}
			for i := range got {
				if got[i] != c.fire[i] {
					t.Fatalf("fire %v, want %v", got, c.fire)
				}
			}
			if d.Missed != c.missed {
				t.Errorf("missed %d, want %d", d.Missed, c.missed)
			}
			if want := utc(t, "2026-05-01T12:00:00Z"); !d.Through.Equal(want) {
				t.Errorf("through %v, want %v", d.Through, want)
			}
		})
	}
}

func TestDueOnTimeAndNotYet(t *testing.T) {
	t.Parallel()
	spec, _ := schedule.Parse("0 * * * *", "UTC")
	after := utc(t, "2026-05-01T10:00:00Z")
	// 20s after 11:00: on time, fires whatever the policy.
	d := schedule.Due(schedule.Window{Name: "s", Spec: spec, After: after, Catchup: schedule.CatchupNone}, utc(t, "2026-05-01T11:00:20Z"), time.Minute)
	if len(d.Fire) != 1 || !d.Fire[0].Equal(utc(t, "2026-05-01T11:00:00Z")) || d.Missed != 0 {
		t.Fatalf("on time: %+v", d)
	}
	// 10:59: nothing due, the last-fired point stays.
	d = schedule.Due(schedule.Window{Name: "s", Spec: spec, After: after}, utc(t, "2026-05-01T10:59:00Z"), time.Minute)
	if len(d.Fire) != 0 || !d.Through.Equal(after) {
		t.Fatalf("not yet: %+v", d)
	}
	// With jitter the tick waits for its own delay.
	j := schedule.Jitter("s", utc(t, "2026-05-01T11:00:00Z"), 30*time.Minute)
	w := schedule.Window{Name: "s", Spec: spec, After: after, Jitter: 30 * time.Minute}
	if j > 0 {
		if d := schedule.Due(w, utc(t, "2026-05-01T11:00:00Z").Add(j-time.Second), time.Minute); len(d.Fire) != 0 {
			t.Fatalf("fired before its jitter %v: %+v", j, d)
		}
	}
	if d := schedule.Due(w, utc(t, "2026-05-01T11:00:00Z").Add(j), time.Minute); len(d.Fire) != 1 {
		t.Fatalf("not fired at its jitter %v: %+v", j, d)
	}
}

func TestDueBoundsACatchupPerPass(t *testing.T) {
	t.Parallel()
	spec, _ := schedule.Parse("* * * * * *", "UTC") // every second
	after := utc(t, "2026-05-01T10:00:00Z")
	now := after.Add(time.Hour)
	w := schedule.Window{Name: "s", Spec: spec, After: after, Catchup: schedule.CatchupAll, CatchupWindow: 2 * time.Hour}
	d := schedule.Due(w, now, time.Minute)
	if len(d.Fire) != schedule.MaxTicksPerPass || !d.Fire[0].Equal(after.Add(time.Second)) || !d.Through.Equal(d.Fire[len(d.Fire)-1]) {
		t.Fatalf("first pass: %d ticks, first %v, through %v", len(d.Fire), d.Fire[0], d.Through)
	}
	w.After = d.Through
	d2 := schedule.Due(w, now, time.Minute)
	if !d2.Fire[0].Equal(d.Through.Add(time.Second)) {
		t.Fatalf("second pass starts at %v, want %v", d2.Fire[0], d.Through.Add(time.Second))
	}
}

// TestMinGap asserts the smallest gap between the next fire times.
func TestMinGap(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cron string
		want time.Duration
	}{
		{"*/5 * * * *", 5 * time.Minute},
		{"0,10 * * * *", 10 * time.Minute},
		{"@every 90s", 90 * time.Second},
		{"@daily", 24 * time.Hour},
	} {
		spec, err := schedule.Parse(c.cron, "UTC")
		if err != nil {
			t.Fatal(err)
		}
		if got := spec.MinGap(10); got != c.want {
			t.Errorf("MinGap(%q) = %v, want %v", c.cron, got, c.want)
		}
	}
}

// TestDueNeverCallsAJitterDelayedTickMissed: a schedule firing every 5
// minutes with jitter 4m (above the grace of 1m) seen by a pass every
// second for two hours fires every tick on time: none is missed.
func TestDueNeverCallsAJitterDelayedTickMissed(t *testing.T) {
	t.Parallel()
	for _, jitter := range []time.Duration{4 * time.Minute, 12 * time.Minute} {
		spec, _ := schedule.Parse("*/5 * * * *", "UTC")
		w := schedule.Window{Name: "jittery", Spec: spec, After: utc(t, "2026-05-01T10:00:00Z"), Jitter: jitter}
		fired, missed := 0, 0
		for now := w.After; now.Before(utc(t, "2026-05-01T12:00:00Z")); now = now.Add(time.Second) {
			d := schedule.Due(w, now, time.Minute)
			fired, missed = fired+len(d.Fire), missed+d.Missed
			w.After = d.Through
		}
		if missed != 0 || fired < 20 {
			t.Errorf("jitter %v: %d fired, %d missed; want none missed", jitter, fired, missed)
		}
	}
}

// TestAPausedScheduleShowsNoFireTimes: ShownFireTimes, what `ffctl
// schedule` and the dashboard show, is NextFireTimes for an active
// schedule and nothing for a paused one.
func TestAPausedScheduleShowsNoFireTimes(t *testing.T) {
	t.Parallel()
	spec, err := schedule.Parse("*/5 * * * *", "UTC")
	if err != nil {
		t.Fatal(err)
	}
	now := utc(t, "2026-05-01T12:01:00Z")
	w := schedule.Window{Name: "s", Spec: spec, After: now.Add(-time.Hour)}
	if got, want := schedule.ShownFireTimes(w, false, now, 3), schedule.NextFireTimes(w, now, 3); len(got) != 3 || !slices.Equal(got, want) {
		t.Fatalf("active: %v, want NextFireTimes' %v", got, want)
	}
	if got := schedule.ShownFireTimes(w, true, now, 3); got != nil {
		t.Fatalf("paused: %v, want none", got)
	}
}
