package store

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/schedule"
)

const qInsertSchedule = `
INSERT INTO schedules (name, workflow_name, cron, timezone, params, overlap, catchup, catchup_window_ms, jitter_ms, paused, owner)
VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9, $10, $11)
ON CONFLICT (name) DO NOTHING
RETURNING id`

// setFiredThroughOnNewTimes is the SET item of every update of a
// schedule's fields, whose $3 and $4 are its new cron and zone: a new cron
// or zone starts the schedule afresh from the update (the database's
// clock), as a resume does. Its last-fired point is a tick of the old
// times: the ticks of the new ones since then were never due, and firing
// them (a yearly schedule made every-5s would fire every 5 s since its
// last tick at once) is not what anyone asked for. Any other change
// keeps it. The right side reads the row before the update.
const setFiredThroughOnNewTimes = `fired_through = CASE WHEN (cron, timezone) IS DISTINCT FROM ($3::text, $4::text)
       THEN GREATEST(fired_through, now()) ELSE fired_through END`

const qUpdateSchedule = `
UPDATE schedules SET workflow_name = $2, cron = $3, timezone = $4, params = $5::jsonb, overlap = $6, catchup = $7,
       catchup_window_ms = $8, jitter_ms = $9, paused = $10, ` + setFiredThroughOnNewTimes + `
 WHERE name = $1 AND owner = $11
RETURNING id`

const qScheduleEvent = `INSERT INTO schedule_events (schedule_name, action, actor, reason) VALUES ($1, $2, $3, $4)`

// scheduleArgs are qInsertSchedule's and qUpdateSchedule's arguments for
// c, a definition schedule.Validate returned.
func scheduleArgs(c schedule.Definition) []any {
	return []any{c.Name, c.Workflow, c.Cron, c.Timezone, string(c.Params), string(c.Overlap), string(c.Catchup),
		c.CatchupWindow.Milliseconds(), c.Jitter.Milliseconds(), c.Paused, string(c.Owner)}
}

// CreateSchedule checks spec (schedule.Validate, then its workflow and
// the task keys of the workflow's newest version) and stores it, audited (actor, reason: ""
// allowed) as "create". Its first tick is the first fire time after its
// creation (database clock). Errors: schedule.ErrBadSchedule (the message
// names the field: bad name, cron, zone, policy, duration, owner),
// core.ErrBadParams (params, also those the workflow's task idempotency
// keys cannot render from), ErrNotFound (no such workflow), ErrConflict (the
// name is taken; the message says by which owner when it is the other).
func (s *Store) CreateSchedule(ctx context.Context, spec schedule.Definition, actor, reason string) (Schedule, error) {
	c, err := schedule.Validate(spec)
	if err != nil {
		return Schedule{}, err
	}
	if err := s.checkScheduleWorkflow(ctx, c); err != nil {
		return Schedule{}, err
	}
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		var ids []int64
		if err := tx.SelectContext(ctx, &ids, qInsertSchedule, scheduleArgs(c)...); err != nil {
			return fmt.Errorf("create schedule %q: %w", c.Name, err)
		}
		if len(ids) == 0 {
			return scheduleTaken(ctx, tx, c.Name, c.Owner)
		}
		return audit(ctx, tx, c.Name, "create", actor, reason)
	})
	if err != nil {
		return Schedule{}, err
	}
	return s.GetSchedule(ctx, c.Name)
}

// ApplySchedule creates spec's schedule, or replaces the fields of the
// schedule of that name when it has the same owner, audited as "create"
// or "update" (`workflow apply` stores a file's `schedules:` with
// ApplyWorkflowFile, whose update keeps the operator's pause). It returns
// the schedule and whether it was created. A schedule's last-fired point
// is kept when it is replaced, unless its cron or zone changes: it then
// starts afresh from the update (database clock), as a resume does, and
// no tick before the update fires. Errors: those of CreateSchedule;
// ErrConflict when the name belongs to the other owner.
func (s *Store) ApplySchedule(ctx context.Context, spec schedule.Definition, actor, reason string) (Schedule, bool, error) {
	c, err := schedule.Validate(spec)
	if err != nil {
		return Schedule{}, false, err
	}
	if err := s.checkScheduleWorkflow(ctx, c); err != nil {
		return Schedule{}, false, err
	}
	created := false
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		var ids []int64
		if err := tx.SelectContext(ctx, &ids, qInsertSchedule, scheduleArgs(c)...); err != nil {
			return fmt.Errorf("apply schedule %q: %w", c.Name, err)
		}
		action := "create"
		if created = len(ids) == 1; !created {
			if err := tx.SelectContext(ctx, &ids, qUpdateSchedule, scheduleArgs(c)...); err != nil {
				return fmt.Errorf("apply schedule %q: %w", c.Name, err)
			}
			if len(ids) == 0 {
				return scheduleTaken(ctx, tx, c.Name, c.Owner)
			}
			action = "update"
		}
		return audit(ctx, tx, c.Name, action, actor, reason)
	})
	if err != nil {
		return Schedule{}, false, err
	}
	sc, err := s.GetSchedule(ctx, c.Name)
	return sc, created, err
}

// scheduleTaken is the ErrConflict for a name that a schedule holds.
func scheduleTaken(ctx context.Context, tx *sqlx.Tx, name string, owner schedule.Owner) error {
	var held schedule.Owner
	if err := tx.GetContext(ctx, &held, `SELECT owner FROM schedules WHERE name = $1`, name); err != nil {
		return fmt.Errorf("schedule %q: read its owner: %w", name, err)
	}
	if held != owner {
		return fmt.Errorf("%w: schedule %q already exists, owned by %s (a %s schedule cannot take its name)", ErrConflict, name, ownerWords(held), owner)
	}
	return fmt.Errorf("%w: schedule %q already exists", ErrConflict, name)
}

func ownerWords(o schedule.Owner) string {
	if o == schedule.OwnerFile {
		return "a workflow file's schedules:"
	}
	return "the CLI"
}

func audit(ctx context.Context, tx *sqlx.Tx, name, action, actor, reason string) error {
	if _, err := tx.ExecContext(ctx, qScheduleEvent, name, action, actor, reason); err != nil {
		return fmt.Errorf("audit schedule %q %s: %w", name, action, err)
	}
	return nil
}

// PauseSchedule pauses schedule name (it fires no tick until resumed),
// audited. It reports whether anything changed: false when the schedule
// was already paused (nothing written, nothing audited). Errors:
// core.ErrBadReason, ErrNotFound.
func (s *Store) PauseSchedule(ctx context.Context, name, actor, reason string) (bool, error) {
	return s.setPaused(ctx, name, true, actor, reason)
}

// ResumeSchedule resumes paused schedule name, audited. Its last-fired
// point moves to now: the ticks it would have fired while paused are not
// caught up; its next tick is the next fire time. It reports whether
// anything changed: false when the schedule was not paused (nothing
// written, nothing audited). Errors: core.ErrBadReason, ErrNotFound.
func (s *Store) ResumeSchedule(ctx context.Context, name, actor, reason string) (bool, error) {
	return s.setPaused(ctx, name, false, actor, reason)
}

func (s *Store) setPaused(ctx context.Context, name string, paused bool, actor, reason string) (bool, error) {
	action := map[bool]string{true: "pause", false: "resume"}[paused]
	if err := core.ValidateReason(reason); err != nil {
		return false, fmt.Errorf("%s schedule %q: %w", action, name, err)
	}
	changed := false
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		var was []bool
		if err := tx.SelectContext(ctx, &was, `SELECT paused FROM schedules WHERE name = $1 FOR UPDATE`, name); err != nil {
			return fmt.Errorf("%s schedule %q: %w", action, name, err)
		}
		switch {
		case len(was) == 0:
			return fmt.Errorf("schedule %q: %w", name, ErrNotFound)
		case was[0] == paused:
			return nil // already so: nothing written, nothing audited
		}
		q := `UPDATE schedules SET paused = true WHERE name = $1`
		if !paused {
			q = `UPDATE schedules SET paused = false, fired_through = GREATEST(fired_through, now()) WHERE name = $1`
		}
		if _, err := tx.ExecContext(ctx, q, name); err != nil {
			return fmt.Errorf("%s schedule %q: %w", action, name, err)
		}
		changed = true
		return audit(ctx, tx, name, action, actor, reason)
	})
	if err != nil {
		return false, err
	}
	return changed, nil
}

// DeleteSchedule deletes schedule name and its ticks (the runs stay; the
// audit row outlives it). Errors: core.ErrBadReason, ErrNotFound,
// ErrConflict when a workflow file declares it (it is removed there).
func (s *Store) DeleteSchedule(ctx context.Context, name, actor, reason string) error {
	if err := core.ValidateReason(reason); err != nil {
		return fmt.Errorf("delete schedule %q: %w", name, err)
	}
	return s.inTx(ctx, func(tx *sqlx.Tx) error {
		if err := refuseFileOwned(ctx, tx, name); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM schedules WHERE name = $1`, name)
		if err != nil {
			return fmt.Errorf("delete schedule %q: %w", name, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("schedule %q: %w", name, ErrNotFound)
		}
		return audit(ctx, tx, name, "delete", actor, reason)
	})
}
