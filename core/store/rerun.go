package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/flowforge/flowforge/core"
)

// ErrRunNotEnded is wrapped by Rerun's refusal, without Force, to rerun a
// run that has not ended: the rerun would run alongside it.
var ErrRunNotEnded = errors.New("run has not ended")

// RerunsShown bounds the reruns GetRun reads for a run (Run.Reruns); the
// total is counted whatever it is (Run.RerunsTotal).
const RerunsShown = 20

// RerunLink joins a run and a rerun of it: on the rerun (Run.RerunOf) it
// names the run repeated, on the run repeated (Run.Reruns) one of its
// reruns. By, Reason and At are the rerun's audit: who asked (the actor),
// why, and when (the rerun's created_at, database clock).
type RerunLink struct {
	RunID  uuid.UUID `json:"run_id"`
	By     string    `json:"by"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
	// State is the state of the run RunID names; nil when that run no
	// longer exists (deleted or pruned: Deleted is then true).
	State   *core.RunState `json:"state"`
	Deleted bool           `json:"deleted"`
}

// Scan implements sql.Scanner for the jsonb object rerunOfColumn builds.
func (l *RerunLink) Scan(src any) error {
	if err := scanJSONObject(src, "rerun_of", l); err != nil {
		return err
	}
	l.Deleted = l.State == nil
	return nil
}

// rerunOfColumn is Run.RerunOf among runColumns: the run r repeats, with
// its audit, as one jsonb object (NULL for a run that is not a rerun). The
// repeated run's state is a primary-key probe, NULL once it is deleted.
const rerunOfColumn = `CASE WHEN r.rerun_of IS NOT NULL THEN jsonb_build_object('run_id', r.rerun_of, 'by', r.rerun_by,
            'reason', r.rerun_reason, 'at', r.created_at,
            'state', (SELECT o.state FROM workflow_runs o WHERE o.id = r.rerun_of)) END AS rerun_of`

// qRerunsOf reads the newest $2 reruns of run $1 and how many there are,
// through workflow_runs_reruns (rerun_of, created_at).
const qRerunsOf = `
SELECT r.id AS run_id, r.rerun_by AS by, r.rerun_reason AS reason, r.created_at AS at, r.state,
       count(*) OVER () AS total
  FROM workflow_runs r
 WHERE r.rerun_of = $1::uuid
 ORDER BY r.created_at DESC, r.id
 LIMIT $2::int`

// rerunsOf returns the newest RerunsShown reruns of run id (newest first)
// and their total.
func (s *Store) rerunsOf(ctx context.Context, id uuid.UUID) ([]RerunLink, int, error) {
	var rows []struct {
		RunID  uuid.UUID     `db:"run_id"`
		By     string        `db:"by"`
		Reason string        `db:"reason"`
		At     time.Time     `db:"at"`
		State  core.RunState `db:"state"`
		Total  int           `db:"total"`
	}
	if err := s.db.SelectContext(ctx, &rows, qRerunsOf, s.args(id, RerunsShown)...); err != nil {
		return nil, 0, fmt.Errorf("read reruns: %w", err)
	}
	var out []RerunLink
	total := 0
	for _, r := range rows {
		state := r.State
		out = append(out, RerunLink{RunID: r.RunID, By: r.By, Reason: r.Reason, At: r.At, State: &state})
		total = r.Total
	}
	return out, total, nil
}

// RerunRequest asks for a rerun of run RunID (see Store.Rerun).
type RerunRequest struct {
	RunID uuid.UUID
	// Actor and Reason are recorded on the new run (rerun_by,
	// rerun_reason); Reason must pass core.ValidateReason.
	Actor, Reason string
	// Force allows a rerun of a run that has not ended.
	Force bool
}

// qRerunSource reads what a rerun repeats: the run's workflow, version and
// stored params, and whether it has ended (core.RunEnded).
const qRerunSource = `
SELECT workflow_name, workflow_version, params, state, finished_at IS NOT NULL AS settled
  FROM workflow_runs WHERE id = $1::uuid`

// qMarkRerun records on the run a rerun just created which run it repeats,
// who asked and why, in the rerun's transaction (before anyone sees it).
const qMarkRerun = `
UPDATE workflow_runs SET rerun_of = $2::uuid, rerun_by = $3::text, rerun_reason = $4::text
 WHERE id = $1::uuid AND rerun_of IS NULL`

// Rerun creates a new run of the same workflow version (the stored one,
// not the newest) with the same stored params as run req.RunID, through
// the trigger's own statement (Trigger's qTrigger: task runs, root outbox
// rows, the pause's gate and the NOTIFY), and records on it the run it
// repeats with req.Actor and req.Reason, in one transaction. It returns
// the new run's id. The new run has no idempotency key (the old run's
// belongs to the old run): every Rerun creates a run, so two reruns of one
// run make two runs, each audited. Tasks with an idempotency_key render
// the same keys as in the old run and so may reuse its recorded results
// (see docs/workflows.md), as any trigger with the same params would.
//
// Errors: core.ErrBadReason for a reason core.ValidateReason refuses;
// ErrNotFound for an unknown run; ErrRunNotEnded (nothing written) for a
// run that has not ended, unless req.Force; ErrWorkflowPaused when the
// workflow is paused with mode drop (no run created; the drop is counted
// on the pause, as for a trigger; a pause with mode queue creates the run,
// whose tasks wait); ErrCommitOutcomeUnknown when the commit got no answer
// (the rerun may exist: the old run's Reruns say); those of Trigger
// otherwise.
func (s *Store) Rerun(ctx context.Context, req RerunRequest) (uuid.UUID, error) {
	if err := core.ValidateReason(req.Reason); err != nil {
		return uuid.Nil, fmt.Errorf("rerun run %s: %w", req.RunID, err)
	}
	var newID uuid.UUID
	var dropped error
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		var src struct {
			Workflow string        `db:"workflow_name"`
			Version  int           `db:"workflow_version"`
			Params   JSON          `db:"params"`
			State    core.RunState `db:"state"`
			Settled  bool          `db:"settled"`
		}
		err := tx.GetContext(ctx, &src, qRerunSource, s.args(req.RunID)...)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("run %s: %w", req.RunID, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("read run %s: %w", req.RunID, err)
		}
		if !req.Force && !core.RunEnded(src.State, src.Settled) {
			return fmt.Errorf("run %s is %s: %w: a rerun would run alongside it; wait for it (ffctl run wait %s), cancel it (ffctl run cancel %s), or rerun it anyway (--force)",
				req.RunID, src.State, ErrRunNotEnded, req.RunID, req.RunID)
		}
		res, err := s.trigger(ctx, SQLQuerier(tx), TriggerRequest{Workflow: src.Workflow, Version: src.Version, Params: json.RawMessage(src.Params), Actor: req.Actor})
		if errors.Is(err, ErrWorkflowPaused) {
			dropped = err // the statement counted the drop: commit it, as a trigger does
			return nil
		}
		if err != nil {
			return err
		}
		newID = res.RunID
		marked, err := tx.ExecContext(ctx, qMarkRerun, s.args(newID, req.RunID, req.Actor, req.Reason)...)
		if err != nil {
			return fmt.Errorf("record the rerun of run %s: %w", req.RunID, err)
		}
		if n, err := marked.RowsAffected(); err != nil || n != 1 {
			return fmt.Errorf("record the rerun of run %s: %d rows marked (%v), want the new run %s", req.RunID, n, err, newID)
		}
		return nil
	})
	switch {
	case err != nil:
		return uuid.Nil, fmt.Errorf("rerun run %s: %w", req.RunID, err)
	case dropped != nil:
		return uuid.Nil, fmt.Errorf("rerun run %s: %w", req.RunID, dropped)
	}
	return newID, nil
}
