package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/flowforge/flowforge/core"
)

// DoctorActor is the actor of the task history rows a repair writes.
const DoctorActor = "doctor"

// RepairRequest says who repairs and why.
type RepairRequest struct {
	// Actor is the person behind the repair (doctor_repairs.actor), e.g.
	// core.OSActor("cli").
	Actor string
	// Reason is the operator's reason, recorded with every repair.
	Reason string
	// Backoff is the retry policy's backoff for a reaped task (the
	// scheduler's: core.RetryPolicy.Backoff).
	Backoff BackoffFunc
	// Config holds the thresholds the finding was made with: the repair
	// re-checks the condition under them.
	Config DiagnoseConfig
}

// RepairResult is what Repair did about one finding.
type RepairResult struct {
	Finding  Finding `json:"finding"`
	Repaired bool    `json:"repaired"`
	// Detail says what was done, or why nothing was (the condition no
	// longer holds: a daemon acted first; or the finding is left to a
	// person, and what to do).
	Detail string `json:"detail"`
}

// ErrNotRepairable is returned by Repair for a finding it leaves to a
// person (FindingKind.Repairable false) or one missing its ids.
var ErrNotRepairable = errors.New("finding is not repairable")

// Repair fixes one finding of Diagnose, in one transaction that re-checks
// the finding's condition under the locks a daemon's own transition takes,
// so that a daemon acting at the same moment wins or loses cleanly (the
// repair then does nothing and says so), and audits what it did in
// doctor_repairs (req.Actor, req.Reason) and, for a task, in its history
// (actor DoctorActor):
//
//   - FindingStrandedReady: a fresh outbox row with the task's fencing
//     token (as the redispatch writes), if it is still READY with that
//     token and no dispatch in flight;
//   - FindingLeaseExpired, FindingNoLease: the reap (RETRYING with a
//     backoff, or DEAD on its last attempt), if still RUNNING with that
//     token and its lease lapsed (or absent);
//   - FindingUnsettledRun: the scheduler's own pass over the run, which
//     settles it, if no task of it is active (a run another transaction
//     holds is left for a later try);
//   - FindingFinishedOutbox: the row marked dropped (kept, never sent), if
//     still unpublished and its task ended.
//
// Errors: ErrNotRepairable (wrapped), core.ErrBadReason's (wrapped) for a
// bad reason, or the database's, wrapped; nothing was written then.
func (s *Store) Repair(ctx context.Context, f Finding, req RepairRequest) (RepairResult, error) {
	if err := core.ValidateReason(req.Reason); err != nil {
		return RepairResult{}, fmt.Errorf("repair %s: %w", f.Kind, err)
	}
	if err := req.Config.validate(); err != nil {
		return RepairResult{}, err
	}
	out := RepairResult{Finding: f}
	var err error
	switch {
	case f.Kind == FindingStrandedReady && f.TaskRunID != nil && f.Token != nil:
		out.Repaired, out.Detail, err = s.repairStranded(ctx, f, req)
	case (f.Kind == FindingLeaseExpired || f.Kind == FindingNoLease) && f.TaskRunID != nil && f.Token != nil:
		out.Repaired, out.Detail, err = s.repairLease(ctx, f, req)
	case f.Kind == FindingUnsettledRun && f.RunID != nil:
		out.Repaired, out.Detail, err = s.repairUnsettled(ctx, f, req)
	case f.Kind == FindingFinishedOutbox && f.OutboxID != nil:
		out.Repaired, out.Detail, err = s.repairFinishedOutbox(ctx, f, req)
	default:
		return RepairResult{}, fmt.Errorf("repair %s: %w", f.Kind, ErrNotRepairable)
	}
	if err != nil {
		return RepairResult{}, fmt.Errorf("repair %s: %w", f.Kind, err)
	}
	return out, nil
}

// qAuditRepair records one repair.
const qAuditRepair = `
INSERT INTO doctor_repairs (finding, run_id, task_run_id, outbox_id, actor, reason, detail)
VALUES ($1, $2, $3, $4, $5, $6, $7)`

// auditRepair writes f's repair to doctor_repairs in tx.
func auditRepair(ctx context.Context, tx *sqlx.Tx, f Finding, req RepairRequest, detail string) error {
	if _, err := tx.ExecContext(ctx, qAuditRepair, string(f.Kind), f.RunID, f.TaskRunID, f.OutboxID, req.Actor, req.Reason, detail); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	return nil
}

// qLockTask waits for and takes the task row's lock: the claim, the
// finish and the reap of a task all update that row, so after it the
// repair's next statement (a fresh READ COMMITTED snapshot) sees whatever
// they committed.
const qLockTask = `SELECT 1 FROM task_runs WHERE id = $1 FOR UPDATE`

// qRepairStranded writes the next dispatch of task $2 if it is still READY
// with token $3 and no dispatch in flight (readyUndispatched, $1 the
// recent window), with its history row ($4 the reason).
const qRepairStranded = `
WITH stale AS (
    ` + redispatchCandidate + `
     WHERE t.id = $2 AND t.fencing_token = $3 AND ` + readyUndispatched + `
)` + redispatchInsert + `, ev AS (
    INSERT INTO task_events (task_run_id, run_id, from_state, to_state, attempt, fencing_token, actor, reason)
    SELECT s.id, s.run_id, 'READY', 'READY', s.attempt, s.fencing_token, '` + DoctorActor + `',
           'doctor: redispatched (dispatch ' || i.dispatch || '): ' || $4
      FROM stale s JOIN ins i ON i.task_run_id = s.id
)
SELECT coalesce(max(dispatch), 0) FROM ins`

func (s *Store) repairStranded(ctx context.Context, f Finding, req RepairRequest) (bool, string, error) {
	var dispatch int
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, qLockTask, *f.TaskRunID); err != nil {
			return fmt.Errorf("lock task: %w", err)
		}
		if err := tx.GetContext(ctx, &dispatch, qRepairStranded, req.Config.recent().Milliseconds(), *f.TaskRunID, *f.Token, req.Reason); err != nil {
			return err
		}
		if dispatch == 0 {
			return nil
		}
		if err := auditRepair(ctx, tx, f, req, fmt.Sprintf("dispatch %d written with fencing token %d", dispatch, *f.Token)); err != nil {
			return err
		}
		return notifyAll(ctx, tx, outboxNotice())
	})
	switch {
	case err != nil:
		return false, "", err
	case dispatch == 0:
		return false, "not repaired: the task is no longer READY with that token and no dispatch in flight (a daemon acted first)", nil
	}
	return true, fmt.Sprintf("dispatch %d written with fencing token %d", dispatch, *f.Token), nil
}

// qNamedLapsedLease reads task $1 as a reap candidate if it is RUNNING
// with token $2 and its lease lapsed or absent (leaseLapsed), with the
// crash rule's inputs as the reaper reads them (crashCompanions).
const qNamedLapsedLease = `
SELECT t.id, t.fencing_token, t.attempt, t.max_attempts, t.initial_backoff_ms, t.max_backoff_ms, false AS refund,
       ` + crashCompanions + ` AS companions, t.crash_refunds
  FROM task_runs t
 WHERE t.id = $1 AND t.fencing_token = $2 AND t.state = 'RUNNING' AND ` + leaseLapsed

func (s *Store) repairLease(ctx context.Context, f Finding, req RepairRequest) (bool, string, error) {
	var res ReapResult
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		var rows []expiredLease
		if err := tx.SelectContext(ctx, &rows, qNamedLapsedLease, *f.TaskRunID, *f.Token); err != nil {
			return fmt.Errorf("read task: %w", err)
		}
		if len(rows) == 0 {
			return nil
		}
		var err error
		// qReap re-checks state, token and lapse on the row it updates
		// (waiting for a finish or a renewal that holds it).
		res, err = reapRows(ctx, tx, rows, ReapRequest{Limit: 1, Backoff: req.Backoff, Actor: DoctorActor}, nil, nil, nil)
		if err != nil || res.Reaped == 0 {
			return err
		}
		return auditRepair(ctx, tx, f, req, reapedDetail(res))
	})
	switch {
	case err != nil:
		return false, "", err
	case res.Reaped == 0:
		return false, "not repaired: the task is no longer RUNNING with that token and a lapsed lease (it was renewed, finished or reaped)", nil
	}
	return true, reapedDetail(res), nil
}

func reapedDetail(res ReapResult) string {
	if res.Dead > 0 {
		return "reaped: DEAD (its last attempt)"
	}
	return "reaped: RETRYING (the scheduler retries it)"
}

// qRunActive says whether run $1 has a task that keeps it open, read after
// the run's lock was granted.
const qRunActive = `SELECT EXISTS (SELECT 1 FROM task_runs t WHERE t.run_id = $1 AND ` + taskStillActive + `)`

func (s *Store) repairUnsettled(ctx context.Context, f Finding, req RepairRequest) (bool, string, error) {
	if err := advanceEdges(); err != nil {
		return false, "", err
	}
	var res AdvanceResult
	var detail string
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		runs, err := lockNamedRuns(ctx, tx, []uuid.UUID{*f.RunID}, &res)
		if err != nil || len(runs) == 0 {
			return err
		}
		var active bool
		if err := tx.GetContext(ctx, &active, qRunActive, *f.RunID); err != nil {
			return fmt.Errorf("read run: %w", err)
		}
		if active {
			detail = "not repaired: a task of the run is active again"
			return nil
		}
		if err := s.advanceLocked(ctx, tx, runs, DoctorActor, &res); err != nil {
			return err
		}
		if res.RunsSettled == 0 {
			detail = "not repaired: the scheduler's pass did not settle the run"
			return nil
		}
		detail = "settled " + string(res.Settled[0].State) + " by the scheduler's pass"
		return auditRepair(ctx, tx, f, req, detail)
	})
	switch {
	case err != nil:
		return false, "", err
	case len(res.Held) > 0:
		return false, "not repaired: another transaction holds the run; try again", nil
	case detail == "":
		return false, "not repaired: the run is settled already", nil
	}
	return res.RunsSettled > 0, detail, nil
}

// qDropFinishedOutbox marks outbox row $1 dropped (kept, never sent) if it
// is still unpublished, not quarantined, and its task has ended, with its
// audit rows ($2 the actor, $3 the reason).
const qDropFinishedOutbox = `
WITH d AS (
    UPDATE outbox o
       SET quarantined_at = now(), dropped_at = now(),
           quarantine_reason = 'doctor: not sent, its task is ' || t.state || ': ' || $3
      FROM task_runs t
     WHERE o.id = $1 AND t.id = o.task_run_id AND ` + outboxOfEndedTask + `
 RETURNING o.id, t.state
), ev AS (
    INSERT INTO outbox_events (outbox_id, action, actor, reason)
    SELECT id, 'drop', $2, 'doctor: not sent, its task is ' || state || ': ' || $3 FROM d
)
SELECT coalesce(max(state), '') FROM d`

func (s *Store) repairFinishedOutbox(ctx context.Context, f Finding, req RepairRequest) (bool, string, error) {
	var state string
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		if err := tx.GetContext(ctx, &state, qDropFinishedOutbox, *f.OutboxID, req.Actor, req.Reason); err != nil {
			return err
		}
		if state == "" {
			return nil
		}
		return auditRepair(ctx, tx, f, req, "outbox row marked dropped (kept, never sent): its task is "+state)
	})
	switch {
	case err != nil:
		return false, "", err
	case state == "":
		return false, "not repaired: the row was published, quarantined, or its task is live again", nil
	}
	return true, "outbox row marked dropped (kept, never sent): its task is " + state, nil
}

// LeftToAPerson says what a person does about a finding Repair leaves.
func LeftToAPerson(k FindingKind) string {
	switch k {
	case FindingKeyOwnerEnded:
		return "harmless to the next task run with the key (it takes the key over); to release it now: ffctl task forget-key TASK_RUN_ID --reason R"
	case FindingQuarantined:
		return "the broker refuses the message: fix the cause, then ffctl outbox retry ID --reason R, or ffctl outbox drop ID --reason R"
	case FindingSchemaDrift:
		return "compare with sql/migrations; restore the object or run `ffctl migrate` (doctor never alters the schema)"
	case FindingClockOffset:
		return "fix the host's time synchronisation (NTP); FlowForge uses the database's clock, but logs and task log lines carry the daemon's"
	}
	return ""
}
