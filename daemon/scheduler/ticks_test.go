package scheduler

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flowforge/flowforge/core/schedule"
	"github.com/flowforge/flowforge/daemon/logtest"
)

// newTicksRig is a pass rig whose scheduler fires schedule ticks and logs
// (JSON) to the buffer returned, with the schedule spec created.
func newTicksRig(t *testing.T, spec schedule.Definition) (*passRig, *logtest.Buffer) {
	t.Helper()
	logs := &logtest.Buffer{}
	r := newPassRig(t, func(c *Config) {
		c.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	})
	r.s.cfg.Schedules = r.st
	if _, err := r.st.CreateSchedule(context.Background(), spec, "test", ""); err != nil {
		t.Fatal(err)
	}
	return r, logs
}

// TestAPassFiresTheDueScheduleTicks: a pass fires a due tick (counted,
// logged), and with overlap skip the next one is skipped while the first
// run is open; a scheduler without Schedules fires nothing.
func TestAPassFiresTheDueScheduleTicks(t *testing.T) {
	t.Parallel()
	r, logs := newTicksRig(t, schedule.Definition{Name: "s", Workflow: "chain", Cron: "@every 10s", Overlap: schedule.OverlapSkip})
	backdate := func(seconds int) {
		t.Helper()
		if _, err := r.db.Exec(`UPDATE schedules SET fired_through = date_trunc('second', now()) - $1 * interval '1 second'`, seconds); err != nil {
			t.Fatal(err)
		}
	}
	backdate(15)
	r.pass()
	if got := testutil.ToFloat64(r.metrics.ScheduleTicks.WithLabelValues("fired")); got != 1 {
		t.Fatalf("fired ticks %v, want 1", got)
	}
	if !strings.Contains(logs.String(), `"msg":"scheduler: fired schedule tick","schedule":"s","workflow":"chain"`) {
		t.Fatalf("no log line for the tick:\n%s", logs.String())
	}
	backdate(12)
	r.pass()
	if got := testutil.ToFloat64(r.metrics.ScheduleTicks.WithLabelValues("skipped")); got != 1 {
		t.Fatalf("skipped ticks %v, want 1", got)
	}
	// Without Schedules nothing fires.
	r.s.cfg.Schedules = nil
	backdate(18)
	r.pass()
	var n int
	if err := r.db.QueryRow(`SELECT count(*) FROM schedule_ticks`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d ticks (%v), want 2", n, err)
	}
}

// TestTheDroppedTicksLogNamesTheScheduleAndTheirTimes: missed ticks a
// catch-up none schedule drops are logged with the schedule's name, their
// count and the first and last of them (the database's clock: the
// last-fired point is backdated in SQL).
func TestTheDroppedTicksLogNamesTheScheduleAndTheirTimes(t *testing.T) {
	t.Parallel()
	r, logs := newTicksRig(t, schedule.Definition{Name: "every10", Workflow: "chain", Cron: "@every 10s", Overlap: schedule.OverlapAllow})
	// Ticks at T-85s, -75s, -65s are more than the grace (1m) late.
	var from time.Time
	if err := r.db.QueryRow(`UPDATE schedules SET fired_through = date_trunc('second', now()) - interval '95 seconds' RETURNING fired_through`).Scan(&from); err != nil {
		t.Fatal(err)
	}
	r.pass()
	first, last := from.Add(10*time.Second).UTC().Format(time.RFC3339), from.Add(30*time.Second).UTC().Format(time.RFC3339)
	want := `"msg":"scheduler: dropped missed schedule ticks (catch-up policy)","schedule":"every10","count":3,"first_missed":"` + first + `","last_missed":"` + last + `"`
	if !strings.Contains(logs.String(), want) {
		t.Fatalf("no log line %s:\n%s", want, logs.String())
	}
}
