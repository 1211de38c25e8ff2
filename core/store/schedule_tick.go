package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/schedule"
)

// MisfireGraceDefault is FireRequest.Grace's default: a tick whose due
// time passed longer ago than this is missed (no scheduler ran while it
// came due) and follows its schedule's catch-up policy.
const MisfireGraceDefault = time.Minute

// FireRequest asks FireDueTicks for one pass over the schedules.
type FireRequest struct {
	// Actor is recorded on the ticks (the scheduler's id).
	Actor string
	// Grace: see MisfireGraceDefault (0 means it).
	Grace time.Duration
	// MidTick, when set, is called inside each cron tick's transaction
	// after its tick row is inserted and before anything else: a test's
	// (or a failpoint's) way to die holding an uncommitted tick.
	MidTick func()
}

// FiredTick is one tick a FireDueTicks pass decided.
type FiredTick struct {
	Schedule    string
	Workflow    string
	ScheduledAt time.Time
	Outcome     TickOutcome
	RunID       uuid.UUID // uuid.Nil unless fired
	Reason      string
	// Cancelled is the previous runs a cancel-previous tick cancelled.
	Cancelled []uuid.UUID
}

// FireResult is what one FireDueTicks pass did.
type FireResult struct {
	// Ticks this scheduler recorded, by schedule and time (a tick another
	// scheduler won is not in it).
	Ticks []FiredTick
	// Missed counts the missed ticks the catch-up policies dropped.
	Missed int
	// Dropped is the missed ticks dropped, by schedule (those with any),
	// in the order of the schedules' ids.
	Dropped []DroppedTicks
	// Now is the database clock the pass decided on (zero when no
	// schedule is unpaused: nothing was decided).
	Now time.Time
	// NextAt is the earliest next fire time (with its jitter) of the
	// unpaused schedules after Now (schedule.NextFireTimes from each one's
	// last-fired point after the pass); zero when none has one.
	NextAt time.Time
	// BadSpecs names schedules whose stored cron or zone no longer parses
	// (a zone removed from the host's tzdata); they fire nothing.
	BadSpecs map[string]error
}

// DroppedTicks is the missed ticks of one schedule that its catch-up
// policy dropped in one pass: how many, the oldest and the newest.
type DroppedTicks struct {
	Schedule    string
	Count       int
	First, Last time.Time
}

// dueRow is what the pass reads of each unpaused schedule.
type dueRow struct {
	ID              int64     `db:"id"`
	Name            string    `db:"name"`
	Cron            string    `db:"cron"`
	Timezone        string    `db:"timezone"`
	Catchup         string    `db:"catchup"`
	CatchupWindowMS int64     `db:"catchup_window_ms"`
	JitterMS        int64     `db:"jitter_ms"`
	FiredThrough    time.Time `db:"fired_through"`
	Now             time.Time `db:"now"`
}

const qDueSchedules = `
SELECT id, name, cron, timezone, catchup, catchup_window_ms, jitter_ms, fired_through, now() AS now
  FROM schedules WHERE NOT paused ORDER BY id`

// FireDueTicks is one scheduler pass over the schedules, decided on the
// database's clock (now(), read with them): for each unpaused schedule,
// schedule.Due picks the ticks to fire (on time ticks, and missed ones by
// its catch-up policy) and each is fired in a transaction of its own (see
// fireTick); then the schedule's last-fired point moves past the ticks the
// policy dropped. Any number of schedulers may run it at once: each tick is
// fired once. Errors: the database's (a tick not committed is fired by the
// next pass).
func (s *Store) FireDueTicks(ctx context.Context, req FireRequest) (FireResult, error) {
	if req.Grace <= 0 {
		req.Grace = MisfireGraceDefault
	}
	var rows []dueRow
	if err := s.db.SelectContext(ctx, &rows, qDueSchedules); err != nil {
		return FireResult{}, fmt.Errorf("read due schedules: %w", err)
	}
	var res FireResult
	if len(rows) == 0 {
		return res, nil
	}
	res.Now = rows[0].Now
	for _, r := range rows {
		spec, err := schedule.Parse(r.Cron, r.Timezone)
		if err != nil {
			if res.BadSpecs == nil {
				res.BadSpecs = map[string]error{}
			}
			res.BadSpecs[r.Name] = err
			continue
		}
		w := schedule.Window{
			Name: r.Name, Spec: spec, After: r.FiredThrough, Catchup: schedule.Catchup(r.Catchup),
			CatchupWindow: time.Duration(r.CatchupWindowMS) * time.Millisecond, Jitter: time.Duration(r.JitterMS) * time.Millisecond,
		}
		d := schedule.Due(w, res.Now, req.Grace)
		for _, t := range d.Fire {
			ft, ok, err := s.fireTick(ctx, r.ID, r.Name, t, req)
			if err != nil {
				return res, err
			}
			if ok {
				res.Ticks = append(res.Ticks, ft)
			}
		}
		res.Missed += d.Missed
		if d.Missed > 0 {
			res.Dropped = append(res.Dropped, DroppedTicks{Schedule: r.Name, Count: d.Missed, First: d.FirstMissed, Last: d.LastMissed})
		}
		if d.Through.After(r.FiredThrough) {
			if _, err := s.db.ExecContext(ctx, `UPDATE schedules SET fired_through = GREATEST(fired_through, $2) WHERE id = $1`, r.ID, d.Through); err != nil {
				return res, fmt.Errorf("schedule %q: advance its last-fired point: %w", r.Name, err)
			}
		}
		// The next tick as `ffctl schedule` shows it, from the new
		// last-fired point.
		if d.Through.After(w.After) {
			w.After = d.Through
		}
		if next := schedule.NextFireTimes(w, res.Now, 1); len(next) == 1 {
			at := next[0].Add(schedule.Jitter(r.Name, next[0], w.Jitter))
			if res.NextAt.IsZero() || at.Before(res.NextAt) {
				res.NextAt = at
			}
		}
	}
	return res, nil
}

// qInsertTick claims a cron tick: the unique key (schedule_id,
// scheduled_at) of cron ticks makes it once, whoever races for it (a
// concurrent claimer waits for the holder's transaction, then inserts
// nothing).
const qInsertTick = `
INSERT INTO schedule_ticks (schedule_id, scheduled_at, outcome, actor)
VALUES ($1, $2, 'fired', $3)
ON CONFLICT (schedule_id, scheduled_at) WHERE NOT manual DO NOTHING
RETURNING id, scheduled_at, fired_at, manual, outcome, COALESCE(reason, '') AS reason, actor`

// qOpenRuns is the schedule's open runs (PENDING or RUNNING), newest
// tick first, but the tick $2's.
const qOpenRuns = `
SELECT r.id, r.state, r.cancel_requested_at IS NOT NULL AS cancelling
  FROM schedule_ticks t JOIN workflow_runs r ON r.id = t.run_id
 WHERE t.schedule_id = $1 AND t.id <> $2 AND r.state IN ('PENDING', 'RUNNING')
 ORDER BY t.id DESC`

// fireTick fires the tick of schedule id (name) at t in ONE transaction: it
// locks the schedule row (gone or paused: nothing), claims the tick row
// (taken: nothing, ok false), applies the overlap policy (skip: the tick is
// recorded skipped while a previous run is open; cancel-previous: the open
// runs are cancelled through the cancel path), creates the run with
// idempotency key schedule.IdempotencyKey (a drop-mode pause of the
// workflow: the tick is recorded dropped; a refused trigger: failed), and
// moves the schedule's last-fired point to t. A crash before the commit
// leaves nothing: the next pass (of any scheduler) fires the tick.
func (s *Store) fireTick(ctx context.Context, id int64, name string, t time.Time, req FireRequest) (FiredTick, bool, error) {
	ft := FiredTick{Schedule: name, ScheduledAt: t}
	ok := false
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		// By id: a schedule deleted and created again under its name
		// meanwhile is another schedule, whose ticks begin after it.
		sc, found, err := lockScheduleWhere(ctx, tx, "id = $1", id, name)
		if err != nil || !found || sc.Paused {
			return err
		}
		ft.Workflow = sc.Workflow
		var ticks []Tick
		if err := tx.SelectContext(ctx, &ticks, qInsertTick, sc.ID, t, req.Actor); err != nil {
			return fmt.Errorf("claim tick %s of schedule %q: %w", t.UTC().Format(time.RFC3339), name, err)
		}
		if len(ticks) == 0 {
			return nil // another scheduler fired it
		}
		tick := ticks[0]
		if req.MidTick != nil {
			req.MidTick()
		}
		res, err := s.overlapThenRun(ctx, tx, sc, tick, t, req.Actor, &ft)
		if err != nil {
			return err
		}
		if err := setTickOutcome(ctx, tx, &tick, res); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE schedules SET fired_through = GREATEST(fired_through, $2) WHERE id = $1`, sc.ID, t); err != nil {
			return fmt.Errorf("schedule %q: advance its last-fired point: %w", name, err)
		}
		ft.Outcome, ft.Reason, ft.RunID, ok = res.outcome, tick.Reason, res.runID, true
		return nil
	})
	if err != nil {
		return FiredTick{}, false, err
	}
	return ft, ok, nil
}

// overlapThenRun applies sc's overlap policy to tick (the open runs of
// earlier ticks), then creates the tick's run (see tickRun).
func (s *Store) overlapThenRun(ctx context.Context, tx *sqlx.Tx, sc lockedSchedule, tick Tick, t time.Time, actor string, ft *FiredTick) (tickResult, error) {
	if schedule.Overlap(sc.Overlap) != schedule.OverlapAllow {
		var open []struct {
			ID         uuid.UUID `db:"id"`
			State      string    `db:"state"`
			Cancelling bool      `db:"cancelling"`
		}
		if err := tx.SelectContext(ctx, &open, qOpenRuns, sc.ID, tick.ID); err != nil {
			return tickResult{}, fmt.Errorf("schedule %q: read its open runs: %w", sc.Name, err)
		}
		if len(open) > 0 && schedule.Overlap(sc.Overlap) == schedule.OverlapSkip {
			return tickResult{outcome: TickSkipped, reason: fmt.Sprintf("overlap skip: the previous run %s is %s", open[0].ID, open[0].State)}, nil
		}
		for _, r := range open {
			if r.Cancelling {
				continue
			}
			reason := fmt.Sprintf("schedule %s: overlap cancel-previous: tick %s starts", sc.Name, t.UTC().Format(time.RFC3339))
			if _, err := cancelRunTx(ctx, tx, r.ID, actor, reason); errors.Is(err, ErrRunFinished) {
				continue // it finished meanwhile
			} else if err != nil {
				return tickResult{}, fmt.Errorf("schedule %q: cancel the previous run %s: %w", sc.Name, r.ID, err)
			}
			ft.Cancelled = append(ft.Cancelled, r.ID)
		}
	}
	return s.tickRun(ctx, tx, sc, TriggerRequest{
		Workflow: sc.Workflow, Params: json.RawMessage(sc.Params), Actor: actor,
		IdempotencyKey: schedule.IdempotencyKey(sc.Name, t),
	})
}

// TriggerScheduleNow starts a run of schedule name now, outside its cron
// (a manual tick, also when the schedule is paused; its overlap policy is
// not applied: the operator asked), audited as "trigger-now". It returns
// the tick: fired with its run, or dropped when the workflow is paused in
// drop mode; a fired tick's RunState is its run's state after the trigger
// (PENDING). Errors: core.ErrBadReason, ErrNotFound (schedule), and those
// of Trigger: a trigger refused (bad params, an unknown workflow, a key
// conflict) is still recorded, a failed tick with the refusal as its
// reason and the action audited, so the schedule's history shows the
// attempt, and its error is returned with that tick.
func (s *Store) TriggerScheduleNow(ctx context.Context, name, actor, reason string) (Tick, error) {
	if err := core.ValidateReason(reason); err != nil {
		return Tick{}, fmt.Errorf("trigger schedule %q: %w", name, err)
	}
	var tick Tick
	var refused error
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		refused = nil
		sc, ok, err := lockSchedule(ctx, tx, name)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("schedule %q: %w", name, ErrNotFound)
		}
		if err := tx.GetContext(ctx, &tick, `
INSERT INTO schedule_ticks (schedule_id, scheduled_at, manual, outcome, actor, reason)
VALUES ($1, now(), true, 'fired', $2, $3)
RETURNING id, scheduled_at, fired_at, manual, outcome, actor, reason`, sc.ID, actor, "trigger-now: "+reason); err != nil {
			return fmt.Errorf("trigger schedule %q: %w", name, err)
		}
		res, err := s.tickRun(ctx, tx, sc, TriggerRequest{Workflow: sc.Workflow, Params: json.RawMessage(sc.Params), Actor: actor})
		if err != nil {
			return err
		}
		if res.outcome == TickFailed {
			refused = res.err
		}
		if err := setTickOutcome(ctx, tx, &tick, res); err != nil {
			return err
		}
		if tick.RunID != nil {
			// The run's state as it stands after the trigger: PENDING
			// when it was created, as GetSchedule would give it.
			if err := tx.GetContext(ctx, &tick.RunState, `SELECT state FROM workflow_runs WHERE id = $1`, *tick.RunID); err != nil {
				return fmt.Errorf("trigger schedule %q: read the state of run %s: %w", name, *tick.RunID, err)
			}
		}
		return audit(ctx, tx, name, "trigger-now", actor, reason)
	})
	if err != nil {
		return Tick{}, err
	}
	return tick, refused
}

// lockedSchedule is what a tick's transaction reads of its schedule,
// under the row's lock (FOR NO KEY UPDATE: the tick transactions of a
// schedule take turns, and a pause waits for the tick in flight).
type lockedSchedule struct {
	ID       int64  `db:"id"`
	Name     string `db:"name"`
	Workflow string `db:"workflow_name"`
	Params   JSON   `db:"params"`
	Overlap  string `db:"overlap"`
	Paused   bool   `db:"paused"`
}

func lockSchedule(ctx context.Context, tx *sqlx.Tx, name string) (lockedSchedule, bool, error) {
	return lockScheduleWhere(ctx, tx, "name = $1", name, name)
}

// lockScheduleWhere locks the schedule where says ($1 is arg); name names
// it in errors.
func lockScheduleWhere(ctx context.Context, tx *sqlx.Tx, where string, arg any, name string) (lockedSchedule, bool, error) {
	var sc lockedSchedule
	err := tx.GetContext(ctx, &sc, `SELECT id, name, workflow_name, params, overlap, paused FROM schedules WHERE `+where+` FOR NO KEY UPDATE`, arg)
	if errors.Is(err, sql.ErrNoRows) {
		return sc, false, nil
	}
	if err != nil {
		return sc, false, fmt.Errorf("lock schedule %q: %w", name, err)
	}
	return sc, true, nil
}

// tickResult is what the trigger of a tick produced.
type tickResult struct {
	outcome TickOutcome
	runID   uuid.UUID
	reason  string
	err     error // TickFailed's
}

// tickRun creates the run of a tick inside tx, behind a savepoint: a
// trigger refused (ErrWorkflowPaused: dropped; bad params, unknown
// workflow, a key conflict: failed) leaves tx usable for the tick's
// outcome. Other errors (the database's) are returned: tx is then lost.
func (s *Store) tickRun(ctx context.Context, tx *sqlx.Tx, sc lockedSchedule, req TriggerRequest) (tickResult, error) {
	if _, err := tx.ExecContext(ctx, `SAVEPOINT tick_run`); err != nil {
		return tickResult{}, fmt.Errorf("tick of schedule %q: %w", sc.Name, err)
	}
	res, err := s.trigger(ctx, SQLQuerier(tx), req)
	if err == nil {
		return tickResult{outcome: TickFired, runID: res.RunID}, nil
	}
	refused := errors.Is(err, ErrWorkflowPaused) || errors.Is(err, core.ErrBadParams) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrConflict)
	if !refused || errors.Is(err, ErrCommitOutcomeUnknown) {
		return tickResult{}, fmt.Errorf("tick of schedule %q: %w", sc.Name, err)
	}
	if errors.Is(err, ErrWorkflowPaused) {
		// The trigger's statement succeeded: it created nothing and counted
		// the drop on the pause, which the tick keeps (no rollback).
		if _, rerr := tx.ExecContext(ctx, `RELEASE SAVEPOINT tick_run`); rerr != nil {
			return tickResult{}, fmt.Errorf("tick of schedule %q: %w", sc.Name, rerr)
		}
		return tickResult{outcome: TickDropped, reason: err.Error()}, nil
	}
	if _, rerr := tx.ExecContext(ctx, `ROLLBACK TO SAVEPOINT tick_run`); rerr != nil {
		return tickResult{}, fmt.Errorf("tick of schedule %q: %w", sc.Name, rerr)
	}
	return tickResult{outcome: TickFailed, reason: err.Error(), err: fmt.Errorf("tick of schedule %q: %w", sc.Name, err)}, nil
}

// setTickOutcome records res on tick (in tx) and updates tick to match.
func setTickOutcome(ctx context.Context, tx *sqlx.Tx, tick *Tick, res tickResult) error {
	var run *uuid.UUID
	if res.outcome == TickFired {
		run = &res.runID
	}
	reason := tick.Reason
	if res.reason != "" {
		reason = strings.TrimPrefix(reason+"; "+res.reason, "; ")
	}
	if _, err := tx.ExecContext(ctx, `UPDATE schedule_ticks SET outcome = $2, run_id = $3, reason = NULLIF($4, '') WHERE id = $1`,
		tick.ID, string(res.outcome), run, reason); err != nil {
		return fmt.Errorf("record tick %d: %w", tick.ID, err)
	}
	tick.Outcome, tick.RunID, tick.Reason = res.outcome, run, reason
	return nil
}
