package store_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// suspectRow is what the crash rule keeps on a task run.
type suspectRow struct {
	State        core.TaskState
	Attempt      int
	MaxAttempts  int
	Suspect      bool
	CrashRefunds int
	Error        string
}

// suspectOf reads the crash rule's columns of task run id.
func (f *fixture) suspectOf(id uuid.UUID) suspectRow {
	f.t.Helper()
	var r suspectRow
	err := f.db.QueryRowContext(f.ctx, `SELECT state, attempt, max_attempts, suspect, crash_refunds, coalesce(error, '')
  FROM task_runs WHERE id = $1`, id).Scan(&r.State, &r.Attempt, &r.MaxAttempts, &r.Suspect, &r.CrashRefunds, &r.Error)
	if err != nil {
		f.t.Fatalf("read task %s: %v", id, err)
	}
	return r
}

// oneShotTasks triggers n runs of oneShot (one task, max_attempts 1) and
// returns their tasks.
func (f *fixture) oneShotTasks(n int) []uuid.UUID {
	f.t.Helper()
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = f.taskID(f.trigger("oneshot", ""), "a")
	}
	return ids
}

// crash is a worker that stops renewing: the leases of the attempts ids
// lapse now (on the database clock), as they do a lease after the last
// renewal of a worker that died. The claims' own leases are long, so that
// which attempts were in flight together never depends on how fast the
// test claimed them.
func (f *fixture) crash(ids ...uuid.UUID) {
	f.t.Helper()
	if _, err := f.db.ExecContext(f.ctx, `UPDATE task_runs SET lease_expires_at = clock_timestamp() WHERE id = ANY ($1)`, ids); err != nil {
		f.t.Fatalf("lapse leases: %v", err)
	}
	for _, id := range ids {
		f.waitLeaseExpired(id)
	}
}

// reap runs one reap pass and insists it reaped want leases.
func (f *fixture) reap(want int) store.ReapResult {
	f.t.Helper()
	res, err := f.s.Reap(f.ctx, store.ReapRequest{Limit: 100, Backoff: zeroBackoff, Actor: "reaper"})
	if err != nil || res.Reaped != want {
		f.t.Fatalf("reap: %+v %v; want %d reaped", res, err, want)
	}
	return res
}

// TestACrashGivesBackTheAttemptOfEveryTaskInFlightWithOthers: mode 128. A
// worker that stops with three tasks in flight cannot say which one
// stopped it: each of the three is reaped RETRYING with its attempt given
// back (max_attempts 1 -> 2), made a suspect, and its history says with
// how many others of which worker it was reaped. A task alone in flight on
// another worker that stops is the culprit: its only attempt counts and it
// is DEAD, as before the rule.
func TestACrashGivesBackTheAttemptOfEveryTaskInFlightWithOthers(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneShot)
	ids := f.oneShotTasks(4)
	crashed, alone := ids[:3], ids[3]
	for _, id := range crashed {
		f.claim(id, "w1", time.Hour)
	}
	f.claim(alone, "w2", time.Hour)
	f.crash(ids...)
	res := f.reap(4)
	if res.GivenBack != 3 || res.Dead != 1 {
		t.Fatalf("reap %+v; want 3 given back and 1 dead", res)
	}
	for _, id := range crashed {
		r := f.suspectOf(id)
		want := "lease expired: worker w1 stopped renewing it (attempt 1 given back: reaped with 2 other tasks of worker w1; a crash suspect now, it runs alone)"
		if r.State != core.TaskRetrying || r.Attempt != 1 || r.MaxAttempts != 2 || !r.Suspect || r.CrashRefunds != 1 || r.Error != want {
			t.Fatalf("task in flight with others: %+v; want RETRYING, attempt 1 of 2, suspect, 1 given back, error %q", r, want)
		}
		if n := f.count(`SELECT count(*) FROM task_events WHERE task_run_id = $1 AND crash_companions = 2 AND reason = $2`, id, want); n != 1 {
			t.Fatalf("history rows of the reap with 2 companions: %d, want 1", n)
		}
	}
	r := f.suspectOf(alone)
	if r.State != core.TaskDead || r.MaxAttempts != 1 || r.Suspect || r.CrashRefunds != 0 || r.Error != "lease expired: worker w2 stopped renewing it (attempt 1)" {
		t.Fatalf("task alone in flight: %+v; want DEAD on its only attempt, not a suspect", r)
	}
}

// TestTheLastLeaseOfACrashToLapseCountsTheCompanionsReapedBefore: mode
// 128. A crashed worker's leases lapse at different moments (each was
// renewed at its own time) and may be reaped by different passes: the
// last one to lapse, reaped when its companion is no longer RUNNING,
// still counts it (the companion's reap is in the history) and gets its
// attempt back.
func TestTheLastLeaseOfACrashToLapseCountsTheCompanionsReapedBefore(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneShot)
	ids := f.oneShotTasks(2)
	first, last := ids[0], ids[1]
	f.claim(last, "w1", time.Hour)
	f.claim(first, "w1", time.Hour)
	f.crash(first)
	if res := f.reap(1); res.GivenBack != 1 {
		t.Fatalf("first reap %+v; want the lapsed lease given back (its companion still RUNNING)", res)
	}
	f.crash(last)
	if res := f.reap(1); res.GivenBack != 1 || res.Dead != 0 {
		t.Fatalf("last reap %+v; want its attempt given back (its companion reaped before it)", res)
	}
	r := f.suspectOf(last)
	if r.State != core.TaskRetrying || r.MaxAttempts != 2 || !r.Suspect || !strings.Contains(r.Error, "reaped with 1 other tasks of worker w1") {
		t.Fatalf("last lease of the crash: %+v; want RETRYING 1 of 2, a suspect reaped with 1 other task", r)
	}
}

// TestASuspectThatRanAloneCountsAndTheTasksWaitingForItDoNot: mode 129.
// Two suspects of one crash are claimed again by a second worker with a
// fresh task; the worker marks one running alone (MarkAlone) while the
// other two wait for it, and stops. The one that ran alone is the culprit:
// its attempt counts (DEAD at 2 of 2); the two that waited get their
// attempts back again. The claim tells the worker which task is a suspect.
func TestASuspectThatRanAloneCountsAndTheTasksWaitingForItDoNot(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneShot)
	ids := f.oneShotTasks(3)
	culprit, waiter, fresh := ids[0], ids[1], ids[2]
	f.claim(culprit, "w1", time.Hour)
	f.claim(waiter, "w1", time.Hour)
	f.crash(culprit, waiter)
	f.reap(2)
	f.advance() // the retries fall due at once (zero backoff)
	c := f.claim(culprit, "w2", time.Hour)
	w := f.claim(waiter, "w2", time.Hour)
	n := f.claim(fresh, "w2", time.Hour)
	if !c.Suspect || !w.Suspect || n.Suspect {
		t.Fatalf("claims say suspect: culprit %v, waiter %v, fresh %v; want true, true, false", c.Suspect, w.Suspect, n.Suspect)
	}
	if ok, err := f.s.MarkAlone(f.ctx, c.ID, c.FencingToken); err != nil || !ok {
		t.Fatalf("mark alone: %v %v", ok, err)
	}
	f.crash(culprit, waiter, fresh)
	res := f.reap(3)
	if res.GivenBack != 2 || res.Dead != 1 {
		t.Fatalf("reap %+v; want the two that waited given back and the one that ran alone dead", res)
	}
	r := f.suspectOf(culprit)
	if r.State != core.TaskDead || r.Attempt != 2 || r.MaxAttempts != 2 ||
		r.Error != "lease expired: worker w2 stopped renewing it while this task ran alone as a crash suspect (attempt 2 counted)" {
		t.Fatalf("the suspect that ran alone: %+v; want DEAD, attempt 2 of 2 counted", r)
	}
	if r := f.suspectOf(waiter); r.State != core.TaskRetrying || r.MaxAttempts != 3 || r.CrashRefunds != 2 || !r.Suspect {
		t.Fatalf("the suspect that waited: %+v; want RETRYING, attempt 2 of 3, given back twice, still a suspect", r)
	}
	if r := f.suspectOf(fresh); r.State != core.TaskRetrying || r.MaxAttempts != 2 || r.CrashRefunds != 1 || !r.Suspect {
		t.Fatalf("the fresh task that waited: %+v; want RETRYING 1 of 2, a suspect now", r)
	}
}

// TestASuspectIsClearedOnlyByAFinishOfAnAttemptThatRanAlone: mode 129. A
// suspect whose handler ran alone and failed (handled: its worker lived)
// is cleared of suspicion by its finish; one whose attempt ended without
// running alone (one cancelled or aborted while it waited) stays a suspect. MarkAlone is
// fenced by the attempt's token.
func TestASuspectIsClearedOnlyByAFinishOfAnAttemptThatRanAlone(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(`
name: twice
tasks:
  - {name: a, handler: noop, retry: {max_attempts: 2}}
`)
	ids := []uuid.UUID{f.taskID(f.trigger("twice", ""), "a"), f.taskID(f.trigger("twice", ""), "a")}
	for _, id := range ids {
		f.claim(id, "w1", time.Hour)
	}
	f.crash(ids...)
	f.reap(2)
	f.advance()
	ran := f.claim(ids[0], "w2", time.Hour)
	waited := f.claim(ids[1], "w2", time.Hour)
	if ok, err := f.s.MarkAlone(f.ctx, ran.ID, ran.FencingToken-1); err != nil || ok {
		t.Fatalf("mark alone with a stale token: ok=%v err=%v; want refused", ok, err)
	}
	if ok, err := f.s.MarkAlone(f.ctx, ran.ID, ran.FencingToken); err != nil || !ok {
		t.Fatalf("mark alone: ok=%v err=%v", ok, err)
	}
	failed := store.FinishRequest{Outcome: store.OutcomeFailed, Error: "handled", WorkerID: "w2"}
	if st := f.finish(ran, failed); st != core.TaskRetrying {
		t.Fatalf("finish: %s, want RETRYING", st)
	}
	if st := f.finish(waited, failed); st != core.TaskRetrying {
		t.Fatalf("finish: %s, want RETRYING", st)
	}
	if r := f.suspectOf(ids[0]); r.Suspect {
		t.Fatalf("the suspect that ran alone and finished: %+v; want cleared", r)
	}
	if r := f.suspectOf(ids[1]); !r.Suspect {
		t.Fatalf("the suspect that never ran alone: %+v; want still a suspect", r)
	}
}

// TestCrashGiveBacksAreBoundedSoATaskStillEnds: mode 128. A task that is
// in flight with others at every crash and never runs alone gets its
// attempt back store.CrashGiveBacksMax times; at the next such crash its
// attempt counts, so it ends (DEAD here, with max_attempts 1 raised to 4)
// instead of being retried for ever.
func TestCrashGiveBacksAreBoundedSoATaskStillEnds(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(oneShot)
	id := f.oneShotTasks(1)[0]
	for i := range store.CrashGiveBacksMax + 1 {
		if i > 0 {
			f.advance()
		}
		other := f.oneShotTasks(1)[0]
		worker := fmt.Sprintf("w%d", i)
		f.claim(id, worker, time.Hour)
		f.claim(other, worker, time.Hour)
		f.crash(id, other)
		f.reap(2)
	}
	r := f.suspectOf(id)
	want := fmt.Sprintf("lease expired: worker w%d stopped renewing it with 1 other tasks in flight (attempt %d counted: given back %d times already)",
		store.CrashGiveBacksMax, store.CrashGiveBacksMax+1, store.CrashGiveBacksMax)
	if r.State != core.TaskDead || r.CrashRefunds != store.CrashGiveBacksMax || r.MaxAttempts != 1+store.CrashGiveBacksMax || r.Error != want {
		t.Fatalf("after %d crashes: %+v; want DEAD, %d given back, error %q", store.CrashGiveBacksMax+1, r, store.CrashGiveBacksMax, want)
	}
}
