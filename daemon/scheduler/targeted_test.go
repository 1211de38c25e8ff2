package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
	"github.com/flowforge/flowforge/daemon"
)

// runUntilCleanup runs the rig's scheduler until the test ends and returns
// once its listener is connected and the full sweep that asked for is done:
// from then on only notifications and ticks make it pass.
func (r *passRig) runUntilCleanup() {
	r.t.Helper()
	r.s.signals.reconnectSwept = make(chan struct{}, 1)
	r.s.signals.passed = make(chan error, 64)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.s.Run(ctx) }()
	r.t.Cleanup(func() {
		stop()
		<-done
	})
	select {
	case <-r.s.signals.reconnectSwept:
	case <-time.After(10 * time.Second):
		r.t.Fatal("the scheduler's listener did not connect")
	}
}

// drainPasses forgets the passes signalled so far.
func (r *passRig) drainPasses() {
	for {
		select {
		case <-r.s.signals.passed:
		default:
			return
		}
	}
}

// awaitPass waits for the scheduler's next turn to end, failing the test
// on its error or after 10 s.
func (r *passRig) awaitPass() {
	r.t.Helper()
	select {
	case err := <-r.s.signals.passed:
		if err != nil {
			r.t.Fatalf("pass: %v", err)
		}
	case <-time.After(10 * time.Second):
		r.t.Fatal("no pass")
	}
}

// loseFinish makes the run's RUNNING task name SUCCEEDED the way a finish
// would, but without its notification (a notification lost).
func (r *passRig) loseFinish(run uuid.UUID, name string) {
	r.t.Helper()
	if _, err := r.db.Exec(`UPDATE task_runs SET state = 'SUCCEEDED', finished_at = now(), lease_expires_at = NULL
	  WHERE run_id = $1 AND task_name = $2 AND state = 'RUNNING'`, run, name); err != nil {
		r.t.Fatal(err)
	}
}

// waitReady polls until the run's task name is READY, failing after within.
func (r *passRig) waitReady(run uuid.UUID, name string, within time.Duration) time.Duration {
	r.t.Helper()
	start := time.Now()
	for r.task(run, name).State != "READY" {
		if time.Since(start) > within {
			r.t.Fatalf("%s is %s after %s, want READY", name, r.task(run, name).State, within)
		}
		time.Sleep(5 * time.Millisecond) // poll interval, not a wait for state
	}
	return time.Since(start)
}

// TestAFinishWakesATargetedPassOverItsRunOnly: mode 56. With sweeps a
// minute apart (SweepIntervalMax), a finish's notification makes the scheduler promote that
// run's downstream task at once, and touch no other run: another run whose
// parent finished without a notification keeps its child PENDING, no
// event of the scheduler's in it (only a sweep would find it).
func TestAFinishWakesATargetedPassOverItsRunOnly(t *testing.T) {
	r := newPassRig(t, func(c *Config) { c.SweepInterval, c.FullSweepInterval = SweepIntervalMax, time.Hour })
	notified := storetest.Trigger(t, r.st, "chain", "")
	other := storetest.Trigger(t, r.st, "chain", "")
	a := r.claim(notified, "a", time.Minute)
	r.claim(other, "a", time.Minute)
	r.runUntilCleanup()
	r.loseFinish(other, "a")
	r.drainPasses()
	r.succeed(a)
	// Wait for whole turns (a turn may sweep after its targeted pass).
	deadline := time.Now().Add(10 * time.Second)
	for r.task(notified, "b").State != "READY" {
		if time.Now().After(deadline) {
			t.Fatalf("b was not promoted after a's finish: %s", r.task(notified, "b").State)
		}
		r.awaitPass()
	}
	if b := r.task(other, "b"); b.State != "PENDING" {
		t.Fatalf("the other run's b is %s, want PENDING: a notification of one run advanced another", b.State)
	}
	var n int
	if err := r.db.QueryRow(`SELECT count(*) FROM task_events WHERE run_id = $1 AND actor = 'test-scheduler'`, other).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("the scheduler wrote %d events in a run no notification named", n)
	}
}

// TestALostNotificationIsCoveredByTheSweepWithinItsBound: mode 57. A
// parent finishes without its notification; with the full pass an hour
// away, the sweep's candidates (a PENDING task whose dependencies all
// SUCCEEDED) still promote the child within 20 SweepIntervals (a generous bound
// on a loaded machine; one sweep is the design).
func TestALostNotificationIsCoveredByTheSweepWithinItsBound(t *testing.T) {
	const sweep = 200 * time.Millisecond
	r := newPassRig(t, func(c *Config) { c.SweepInterval, c.FullSweepInterval = sweep, time.Hour })
	run := storetest.Trigger(t, r.st, "chain", "")
	r.claim(run, "a", time.Minute)
	r.runUntilCleanup()
	r.loseFinish(run, "a")
	took := r.waitReady(run, "b", 20*sweep)
	t.Logf("promoted %s after the lost finish (sweep interval %s)", took.Round(time.Millisecond), sweep)
}

// TestARunWhoseTaskRunsShowsRunningWithinASweep: a claim notifies no
// scheduler, and a trigger only the publishers, so the sweep finds the
// PENDING runs with a task RUNNING: the run is RUNNING, started_at set,
// within a few sweeps although the full pass is an hour away.
func TestARunWhoseTaskRunsShowsRunningWithinASweep(t *testing.T) {
	const sweep = 200 * time.Millisecond
	r := newPassRig(t, func(c *Config) { c.SweepInterval, c.FullSweepInterval = sweep, time.Hour })
	r.runUntilCleanup() // its first full pass is done: from here only sweeps
	run := storetest.Trigger(t, r.st, "chain", "")
	// PENDING and unstarted, as a binary older than issue 24 triggered it
	// (the trigger now writes a run RUNNING): the sweep must find it once
	// a task of it runs, which nothing notifies.
	if _, err := r.db.Exec(`UPDATE workflow_runs SET state = 'PENDING', started_at = NULL WHERE id = $1`, run); err != nil {
		t.Fatal(err)
	}
	r.claim(run, "a", time.Minute)
	start := time.Now()
	for {
		got, err := r.st.GetRun(r.t.Context(), run)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == core.RunRunning && got.StartedAt != nil {
			break
		}
		if time.Since(start) > 20*sweep {
			t.Fatalf("run %s is %s (started_at %v) %s after its task was claimed, want RUNNING with started_at set", run, got.State, got.StartedAt, 20*sweep)
		}
		time.Sleep(5 * time.Millisecond) // poll interval, not a wait for state
	}
}

// TestTheFullSweepIsBoundedBelowByTheSweep: FullSweepInterval below
// SweepInterval is refused (a *daemon.SettingError naming the flag);
// zero takes the default, or SweepInterval when that is longer.
func TestTheFullSweepIsBoundedBelowByTheSweep(t *testing.T) {
	for _, tc := range []struct {
		name        string
		sweep, full time.Duration
		wantErr     bool
		wantFull    time.Duration
	}{
		{"defaults", 0, 0, false, FullSweepIntervalDefault},
		{"a long sweep lifts the default", SweepIntervalMax, 0, false, SweepIntervalMax},
		{"a sweep past its maximum", SweepIntervalMax + time.Second, 0, true, 0},
		{"a sweep below its minimum", time.Millisecond, 0, true, 0},
		{"equal", time.Second, time.Second, false, time.Second},
		{"below the sweep", 2 * time.Second, time.Second, true, 0},
		{"negative", 0, -time.Second, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(Config{Store: &fakeStore{}, SweepInterval: tc.sweep, FullSweepInterval: tc.full})
			if tc.wantErr {
				if _, ok := err.(*daemon.SettingError); !ok {
					t.Fatalf("New = %v, want a *daemon.SettingError", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.cfg.FullSweepInterval != tc.wantFull {
				t.Fatalf("FullSweepInterval = %s, want %s", s.cfg.FullSweepInterval, tc.wantFull)
			}
		})
	}
}

// TestTheMisfireGraceIsBoundedBelowByTwoSweeps: a MisfireGrace below twice
// SweepInterval is refused with the exact message (ffctl exits 2 with
// it); zero takes the default, or twice SweepInterval when that is longer.
func TestTheMisfireGraceIsBoundedBelowByTwoSweeps(t *testing.T) {
	for _, tc := range []struct {
		name         string
		sweep, grace time.Duration
		want         string
		wantGrace    time.Duration
	}{
		{"defaults", 0, 0, "", store.MisfireGraceDefault},
		{"a long sweep lifts the default", SweepIntervalMax, 0, "", 2 * SweepIntervalMax},
		{"exactly two sweeps", 0, 2 * time.Second, "", 2 * time.Second},
		{"1ms", 0, time.Millisecond, "scheduler: --misfire-grace 1ms (Config.MisfireGrace): must be at least twice the sweep interval (2s: a tick is seen up to one sweep after it is due), or 0 for the default (1m0s)", 0},
		{"below two long sweeps", 30 * time.Second, 59 * time.Second, "scheduler: --misfire-grace 59s (Config.MisfireGrace): must be at least twice the sweep interval (1m0s: a tick is seen up to one sweep after it is due), or 0 for the default (1m0s)", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(Config{Store: &fakeStore{}, SweepInterval: tc.sweep, MisfireGrace: tc.grace})
			if tc.want != "" {
				if _, ok := err.(*daemon.SettingError); !ok || err.Error() != tc.want {
					t.Fatalf("New = %v, want the *daemon.SettingError %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.cfg.MisfireGrace != tc.wantGrace {
				t.Fatalf("MisfireGrace = %s, want %s", s.cfg.MisfireGrace, tc.wantGrace)
			}
		})
	}
}
