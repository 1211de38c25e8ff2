package store_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// doctorConfig is the scheduler's defaults (sweep 1 s, full sweep 30 s,
// redispatch after 5 min) with a 2 s clock offset threshold: the
// corruptions below move timestamps an hour back, far past every one.
var doctorConfig = store.DiagnoseConfig{
	SweepInterval: time.Second, FullSweepInterval: 30 * time.Second, RedispatchAfter: 5 * time.Minute,
	ClockOffsetMax: 2 * time.Second, LiveWithin: 15 * time.Second, Limit: 100,
}

// diagnose runs Diagnose with doctorConfig, failing the test on an error.
func (f *fixture) diagnose() []store.Finding {
	f.t.Helper()
	fs, err := f.s.Diagnose(f.ctx, doctorConfig)
	if err != nil {
		f.t.Fatalf("diagnose: %v", err)
	}
	return fs
}

// endedRun runs a one-task workflow to its end (claimed, SUCCEEDED,
// settled) and returns the run and its task.
func (f *fixture) endedRun() (run, task uuid.UUID) {
	f.t.Helper()
	f.apply(oneShot)
	run = f.trigger("oneshot", "")
	task = f.taskID(run, "a")
	if !storetest.FinishReady(f.t, f.s, run, store.FinishRequest{Outcome: store.OutcomeSucceeded, Result: []byte(`{}`)}) {
		f.t.Fatal("the run did not end")
	}
	return run, task
}

// claimedOneShot triggers a one-task run and claims its task as worker
// "w1" with a minute's lease.
func (f *fixture) claimedOneShot() (run, task uuid.UUID, c store.ClaimedTask) {
	f.t.Helper()
	f.apply(oneShot)
	run = f.trigger("oneshot", "")
	task = f.taskID(run, "a")
	return run, task, f.claim(task, "w1", time.Minute)
}

// doctorCase corrupts a database one way and says what doctor must find.
type doctorCase struct {
	name string
	// corrupt breaks the fixture's database and returns the finding
	// expected (kind, ids, and a fragment of its detail).
	corrupt func(f *fixture) store.Finding
	// repaired checks the state a repair left (repairable kinds only).
	repaired func(f *fixture, want store.Finding)
}

func ptr[T any](v T) *T { return &v }

var doctorCases = []doctorCase{
	{
		name: "stranded READY task",
		corrupt: func(f *fixture) store.Finding {
			f.apply(oneShot)
			run := f.trigger("oneshot", "")
			id := f.taskID(run, "a")
			_, tok := f.state(id)
			f.sql(`DELETE FROM outbox WHERE task_run_id = $1`, id)
			f.sql(`UPDATE task_runs SET ready_at = now() - interval '1 hour' WHERE id = $1`, id)
			return store.Finding{Kind: store.FindingStrandedReady, RunID: &run, TaskRunID: &id, Token: &tok, Detail: "with no dispatch pending nor confirmed in the last 302s"}
		},
		repaired: func(f *fixture, want store.Finding) {
			if n := f.count(`SELECT count(*) FROM outbox WHERE task_run_id = $1 AND fencing_token_snapshot = $2 AND published_at IS NULL`, *want.TaskRunID, *want.Token); n != 1 {
				f.t.Fatalf("%d pending outbox rows with the task's token after the repair, want 1", n)
			}
			f.wantState(*want.TaskRunID, core.TaskReady)
		},
	},
	{
		name: "lease expired two sweeps ago",
		corrupt: func(f *fixture) store.Finding {
			run, id, c := f.claimedOneShot()
			f.sql(`UPDATE task_runs SET lease_expires_at = now() - interval '1 hour' WHERE id = $1`, id)
			return store.Finding{Kind: store.FindingLeaseExpired, RunID: &run, TaskRunID: &id, Token: &c.FencingToken, WorkerID: ptr("w1"), Detail: "RUNNING on worker w1 (attempt 1) with a lease that expired 3600s ago"}
		},
		repaired: func(f *fixture, want store.Finding) { f.wantState(*want.TaskRunID, core.TaskDead) },
	},
	{
		name: "RUNNING without a lease",
		corrupt: func(f *fixture) store.Finding {
			run, id, c := f.claimedOneShot()
			// A restore of a dump taken before migration 00022's CHECK.
			f.sql(`ALTER TABLE task_runs DROP CONSTRAINT task_runs_running_task_has_a_lease`)
			f.sql(`UPDATE task_runs SET lease_expires_at = NULL WHERE id = $1`, id)
			f.sql(`ALTER TABLE task_runs ADD CONSTRAINT task_runs_running_task_has_a_lease
			        CHECK (state <> 'RUNNING' OR kind <> 'task' OR lease_expires_at IS NOT NULL) NOT VALID`)
			return store.Finding{Kind: store.FindingNoLease, RunID: &run, TaskRunID: &id, Token: &c.FencingToken, WorkerID: ptr("w1"), Detail: "RUNNING with no lease (attempt 1, worker w1)"}
		},
		repaired: func(f *fixture, want store.Finding) { f.wantState(*want.TaskRunID, core.TaskDead) },
	},
	{
		name: "run unsettled with nothing active",
		corrupt: func(f *fixture) store.Finding {
			run, task := f.endedRun()
			f.sql(`UPDATE workflow_runs SET finished_at = NULL, created_at = now() - interval '2 hours' WHERE id = $1`, run)
			f.sql(`UPDATE task_runs SET finished_at = now() - interval '1 hour' WHERE id = $1`, task)
			return store.Finding{Kind: store.FindingUnsettledRun, RunID: &run, Detail: "run SUCCEEDED not settled although no task of it is PENDING, READY, RUNNING or RETRYING, 3600s after"}
		},
		repaired: func(f *fixture, want store.Finding) {
			if r := f.run(*want.RunID); !r.Ended() || r.State != core.RunSucceeded {
				f.t.Fatalf("run %s ended=%v after the repair, want SUCCEEDED and ended", r.State, r.Ended())
			}
		},
	},
	{
		name: "outbox row of a finished task",
		corrupt: func(f *fixture) store.Finding {
			run, task := f.endedRun()
			var id, tok int64
			if err := f.db.QueryRowContext(f.ctx, `UPDATE outbox SET published_at = NULL, created_at = now() - interval '1 hour'
			      WHERE task_run_id = $1 RETURNING id, fencing_token_snapshot`, task).Scan(&id, &tok); err != nil {
				f.t.Fatal(err)
			}
			return store.Finding{Kind: store.FindingFinishedOutbox, RunID: &run, TaskRunID: &task, OutboxID: &id, Token: &tok, Detail: "its task is SUCCEEDED"}
		},
		repaired: func(f *fixture, want store.Finding) {
			if n := f.count(`SELECT count(*) FROM outbox WHERE id = $1 AND dropped_at IS NOT NULL AND published_at IS NULL`, *want.OutboxID); n != 1 {
				f.t.Fatal("the outbox row is not marked dropped")
			}
			if n := f.count(`SELECT count(*) FROM outbox_events WHERE outbox_id = $1 AND action = 'drop' AND reason LIKE '%doctor test%'`, *want.OutboxID); n != 1 {
				f.t.Fatal("the drop is not in the outbox's audit trail")
			}
		},
	},
	{
		name: "idempotency key owned by an ended task",
		corrupt: func(f *fixture) store.Finding {
			run, task := f.endedRun()
			f.sql(`INSERT INTO idempotency_keys (key, task_run_id, fencing_token) SELECT 'k-1', id, fencing_token FROM task_runs WHERE id = $1`, task)
			_, tok := f.state(task)
			return store.Finding{Kind: store.FindingKeyOwnerEnded, RunID: &run, TaskRunID: &task, Key: ptr("k-1"), Token: &tok, Detail: "owned by a task run that is SUCCEEDED"}
		},
	},
	{
		name: "quarantined outbox row",
		corrupt: func(f *fixture) store.Finding {
			f.apply(oneShot)
			run := f.trigger("oneshot", "")
			task := f.taskID(run, "a")
			var id, tok int64
			if err := f.db.QueryRowContext(f.ctx, `UPDATE outbox SET quarantined_at = now(), quarantine_reason = 'too large'
			      WHERE task_run_id = $1 RETURNING id, fencing_token_snapshot`, task).Scan(&id, &tok); err != nil {
				f.t.Fatal(err)
			}
			return store.Finding{Kind: store.FindingQuarantined, RunID: &run, TaskRunID: &task, OutboxID: &id, Token: &tok, Detail: "too large"}
		},
	},
	{
		name: "schema drift",
		corrupt: func(f *fixture) store.Finding {
			f.sql(`CREATE INDEX hand_made ON task_runs (handler)`)
			return store.Finding{Kind: store.FindingSchemaDrift, Detail: "in the database, not made by the migrations: index hand_made: CREATE INDEX hand_made ON task_runs USING btree (handler)"}
		},
	},
	{
		name: "clock offset",
		corrupt: func(f *fixture) store.Finding {
			now, err := f.s.Now(f.ctx)
			if err != nil {
				f.t.Fatal(err)
			}
			// 10.9 s ahead of the database's now() read here: the heartbeat's
			// own now(), a little later, makes it 10.something.
			if err := f.s.RecordPresence(f.ctx, store.Presence{ID: "skewed", Role: "worker", Hostname: "h1", PID: 7, ClockAt: now.Add(10900 * time.Millisecond)}); err != nil {
				f.t.Fatal(err)
			}
			return store.Finding{Kind: store.FindingClockOffset, WorkerID: ptr("skewed"), Detail: "worker daemon on h1 (pid 7): its clock is 10."}
		},
	},
}

// TestDoctorFindsEachCorruptionAndRepairsWhatIsSafe: modes 123 to 126. A
// database corrupted one way at a time yields exactly that finding, with
// its ids; a repairable one is repaired (audited with the reason, in the
// task's history when it is a task's) and a second doctor run is clean;
// one left to a person is refused by Repair.
func TestDoctorFindsEachCorruptionAndRepairsWhatIsSafe(t *testing.T) {
	t.Parallel()
	for _, tc := range doctorCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			want := tc.corrupt(f)
			got := f.diagnose()
			if len(got) != 1 {
				t.Fatalf("findings %+v, want exactly one %s", got, want.Kind)
			}
			checkFinding(t, got[0], want)
			req := store.RepairRequest{Actor: "cli:test", Reason: "doctor test", Backoff: zeroBackoff, Config: doctorConfig}
			res, err := f.s.Repair(f.ctx, got[0], req)
			if tc.repaired == nil {
				if !errors.Is(err, store.ErrNotRepairable) || got[0].Repairable {
					t.Fatalf("repair of %s: %+v %v, want ErrNotRepairable", want.Kind, res, err)
				}
				return
			}
			if err != nil || !res.Repaired {
				t.Fatalf("repair: %+v %v", res, err)
			}
			tc.repaired(f, want)
			if n := f.count(`SELECT count(*) FROM doctor_repairs WHERE finding = $1 AND reason = 'doctor test' AND actor = 'cli:test'`, string(want.Kind)); n != 1 {
				t.Fatalf("%d audit rows of the repair, want 1", n)
			}
			if want.TaskRunID != nil && want.Kind != store.FindingFinishedOutbox {
				if n := f.count(`SELECT count(*) FROM task_events WHERE task_run_id = $1 AND actor = 'doctor'`, *want.TaskRunID); n != 1 {
					t.Fatalf("%d history rows by doctor, want 1", n)
				}
			}
			if again := f.diagnose(); len(again) != 0 {
				t.Fatalf("a second doctor run found %+v, want nothing", again)
			}
		})
	}
}

// checkFinding compares a finding with the one expected: kind, every id,
// and the expected detail as a fragment of the finding's.
func checkFinding(t *testing.T, got, want store.Finding) {
	t.Helper()
	eq := func(name string, a, b any) {
		if a != b {
			t.Errorf("%s: %v, want %v", name, a, b)
		}
	}
	eq("kind", got.Kind, want.Kind)
	eq("run", deref(got.RunID), deref(want.RunID))
	eq("task run", deref(got.TaskRunID), deref(want.TaskRunID))
	eq("outbox row", deref(got.OutboxID), deref(want.OutboxID))
	eq("key", deref(got.Key), deref(want.Key))
	eq("worker", deref(got.WorkerID), deref(want.WorkerID))
	eq("token", deref(got.Token), deref(want.Token))
	eq("repairable", got.Repairable, want.Kind.Repairable())
	if !strings.Contains(got.Detail, want.Detail) {
		t.Errorf("detail %q, want it to hold %q", got.Detail, want.Detail)
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestDoctorFindsNothingAfterNormalRuns: mode 125. A run taken to its
// end, a paused workflow's READY task without a dispatch, a sleep the
// scheduler has held for an hour (RUNNING without a lease, its run open)
// and a daemon with a true clock are no findings.
func TestDoctorFindsNothingAfterNormalRuns(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.endedRun()
	f.apply("name: napper\ntasks:\n  - {name: nap, sleep: {for: 1h}}\n")
	nap := f.trigger("napper", "")
	storetest.Advance(t, f.s)
	f.wantState(f.taskID(nap, "nap"), core.TaskRunning)
	// Held for an hour: old enough that a run with nothing active would be
	// reported, so only the held sleep keeps it from being.
	f.sql(`UPDATE workflow_runs SET created_at = now() - interval '1 hour' WHERE id = $1`, nap)
	f.apply("name: paused\ntasks:\n  - {name: a, handler: noop}\n")
	if _, err := f.s.PauseWorkflow(f.ctx, "paused", core.PauseQueue, "cli:test", "maintenance"); err != nil {
		t.Fatal(err)
	}
	p := f.taskID(f.trigger("paused", ""), "a")
	f.sql(`DELETE FROM outbox WHERE task_run_id = $1`, p)
	f.sql(`UPDATE task_runs SET ready_at = now() - interval '1 hour' WHERE id = $1`, p)
	now, err := f.s.Now(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.s.RecordPresence(f.ctx, store.Presence{ID: "true", Role: "worker", Hostname: "h1", PID: 7, ClockAt: now}); err != nil {
		t.Fatal(err)
	}
	if got := f.diagnose(); len(got) != 0 {
		t.Fatalf("findings %+v on a healthy database, want none", got)
	}
}

// TestADoctorRepairRacingAClaimLosesNothing: mode 123. A stranded READY
// task's repair and a worker's claim of it race: the claim takes the task
// row first (held behind a lock the test holds, with the repair queued
// behind it); the repair then re-checks, finds the task RUNNING and writes
// nothing, and the claim keeps its task.
func TestADoctorRepairRacingAClaimLosesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	want := doctorCases[0].corrupt(f)
	found := f.diagnose()
	if len(found) != 1 {
		t.Fatalf("findings %+v, want the stranded task", found)
	}
	hold, err := f.db.BeginTx(f.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hold.Rollback() })
	if _, err := hold.ExecContext(f.ctx, `SELECT 1 FROM task_runs WHERE id = $1 FOR UPDATE`, *want.TaskRunID); err != nil {
		t.Fatal(err)
	}
	var xid string
	if err := hold.QueryRowContext(f.ctx, `SELECT pg_current_xact_id()::text`).Scan(&xid); err != nil {
		t.Fatal(err)
	}
	// The first waiter for the row waits for the holder's transaction; the
	// next ones queue for the row's tuple lock, which the first holds.
	waitsForHolder := func() bool {
		return f.count(`SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted AND transactionid::text = $1`, xid) == 1
	}
	queuedForRow := func() bool {
		return f.count(`SELECT count(*) FROM pg_locks WHERE locktype = 'tuple' AND NOT granted AND relation = 'task_runs'::regclass`) == 1
	}
	claimed := make(chan bool, 1)
	go func() {
		res, err := f.s.ClaimMany(f.ctx, []store.ClaimRequest{{ID: *want.TaskRunID, Token: *want.Token}}, "w1", time.Minute)
		if err != nil {
			t.Errorf("claim: %v", err)
		}
		claimed <- err == nil && res[0].OK
	}()
	f.waitUntil("the claim to wait for the task row", waitsForHolder)
	repaired := make(chan store.RepairResult, 1)
	go func() {
		res, err := f.s.Repair(f.ctx, found[0], store.RepairRequest{Actor: "cli:test", Reason: "race", Backoff: zeroBackoff, Config: doctorConfig})
		if err != nil {
			t.Errorf("repair: %v", err)
		}
		repaired <- res
	}()
	f.waitUntil("the repair to queue behind the claim", queuedForRow)
	if err := hold.Rollback(); err != nil {
		t.Fatal(err)
	}
	if !<-claimed {
		t.Fatal("the claim lost to the repair")
	}
	if res := <-repaired; res.Repaired {
		t.Fatalf("the repair wrote after the claim: %+v", res)
	}
	f.wantState(*want.TaskRunID, core.TaskRunning)
	if n := f.outboxRows(*want.TaskRunID); n != 0 {
		t.Fatalf("%d outbox rows after the lost repair, want 0", n)
	}
	if n := f.count(`SELECT count(*) FROM doctor_repairs`); n != 0 {
		t.Fatalf("%d audit rows for a repair that did nothing", n)
	}
}

// TestDiagnoseRefusesABadConfiguration: each bad threshold is refused with
// ErrBadDiagnoseConfig and its message, before any query.
func TestDiagnoseRefusesABadConfiguration(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, tc := range []struct {
		name string
		edit func(*store.DiagnoseConfig)
		want string
	}{
		{"sweep", func(c *store.DiagnoseConfig) { c.SweepInterval = 0 }, "bad doctor configuration: the sweep interval must be positive, got 0s"},
		{"full sweep", func(c *store.DiagnoseConfig) { c.FullSweepInterval = -time.Second }, "bad doctor configuration: the full sweep interval must be positive, got -1s"},
		{"redispatch", func(c *store.DiagnoseConfig) { c.RedispatchAfter = 0 }, "bad doctor configuration: the redispatch delay must be positive, got 0s"},
		{"clock", func(c *store.DiagnoseConfig) { c.ClockOffsetMax = 0 }, "bad doctor configuration: the clock offset threshold must be positive, got 0s"},
		{"limit", func(c *store.DiagnoseConfig) { c.Limit = 0 }, "bad doctor configuration: the limit must be at least 1, got 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := doctorConfig
			tc.edit(&c)
			_, err := f.s.Diagnose(f.ctx, c)
			if !errors.Is(err, store.ErrBadDiagnoseConfig) || err.Error() != tc.want {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}
