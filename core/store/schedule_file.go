package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/schedule"
)

// A workflow file's `schedules:` (core.ScheduleDef) are stored in the
// schedules table only, owned by the file (schedule.OwnerFile) and tied to
// the workflow by their workflow_name: a file-owned schedule of workflow W
// is one that W's file declares. They are not part of the stored
// definition: a version is immutable and names what runs, a schedule says
// when; changing a cron must not make a new version, and an unchanged
// definition must stay a no-op (equal jsonb) whatever its schedules do.

// ScheduleChange is what ApplyWorkflowFile did to one schedule. As JSON:
// {"name": "nightly", "action": "created"}.
type ScheduleChange struct {
	Name string `json:"name"`
	// Action: "created", "updated", "unchanged" or "deleted" (no longer
	// in the file).
	Action string `json:"action"`
}

// ApplyWorkflowFile stores a workflow file in ONE transaction: def as
// ApplyWorkflow does (an unchanged definition keeps its version), and its
// schedules specs (schedule.FromFile), owned by the file: each is created,
// or updated when a field differs (its paused state, an operator's, is
// kept; so is its last-fired point, unless the cron or the zone changed:
// the schedule then starts afresh from the apply, and no tick before it
// fires), or left alone; the file-owned schedules
// of def's workflow that specs no longer name are deleted (their ticks
// with them; the runs stay). Each change is audited (actor, reason
// "workflow file of W"). It returns the workflow version, whether it was
// created, and the schedule changes (specs' order, then the deletions by
// name). Errors: those of schedule.ValidateFile; ErrConflict naming the
// schedule when its name belongs to a CLI schedule or to another
// workflow's file; the database's. On any error nothing is written.
func (s *Store) ApplyWorkflowFile(ctx context.Context, def *core.Definition, specs []schedule.Definition, actor string) (Workflow, bool, []ScheduleChange, error) {
	if err := def.Validate(); err != nil {
		return Workflow{}, false, nil, err
	}
	checked, err := schedule.ValidateFile(def, specs)
	if err != nil {
		return Workflow{}, false, nil, err
	}
	raw, err := json.Marshal(def)
	if err != nil {
		return Workflow{}, false, nil, fmt.Errorf("encode definition: %w", err)
	}
	var (
		wf      Workflow
		created bool
		changes []ScheduleChange
	)
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		changes = changes[:0]
		var err error
		if wf, created, err = applyWorkflowTx(ctx, tx, def, raw); err != nil {
			return err
		}
		reason := fmt.Sprintf("workflow file of %s (version %d)", def.Name, wf.Version)
		names := make([]string, 0, len(checked))
		for _, c := range checked {
			action, err := applyFileSchedule(ctx, tx, c)
			if err != nil {
				return err
			}
			names = append(names, c.Name)
			changes = append(changes, ScheduleChange{Name: c.Name, Action: action})
			if action == "unchanged" {
				continue
			}
			if err := audit(ctx, tx, c.Name, strings.TrimSuffix(action, "d"), actor, reason); err != nil {
				return err
			}
		}
		var gone []string
		if err := tx.SelectContext(ctx, &gone, `
DELETE FROM schedules WHERE owner = 'file' AND workflow_name = $1 AND NOT (name = ANY($2::text[]))
RETURNING name`, def.Name, names); err != nil {
			return fmt.Errorf("delete the schedules no longer in the file of %q: %w", def.Name, err)
		}
		slices.Sort(gone)
		for _, n := range gone {
			changes = append(changes, ScheduleChange{Name: n, Action: "deleted"})
			if err := audit(ctx, tx, n, "delete", actor, reason+": no longer in the file"); err != nil {
				return err
			}
		}
		return nil
	})
	s.defs.forget(def.Name)
	if err != nil {
		return Workflow{}, false, nil, err
	}
	if changes == nil {
		changes = []ScheduleChange{}
	}
	return wf, created, changes, wf.decode()
}

// qUpdateFileSchedule replaces the fields of file-owned schedule $1 of
// workflow $2 when one differs (never paused, an operator's; fired_through
// only when the cron or the zone changes: see setFiredThroughOnNewTimes).
const qUpdateFileSchedule = `
UPDATE schedules SET cron = $3, timezone = $4, params = $5::jsonb, overlap = $6, catchup = $7,
       catchup_window_ms = $8, jitter_ms = $9, ` + setFiredThroughOnNewTimes + `
 WHERE name = $1 AND workflow_name = $2 AND owner = 'file'
   AND (cron, timezone, params, overlap, catchup, catchup_window_ms, jitter_ms)
       IS DISTINCT FROM ($3, $4, $5::jsonb, $6, $7, $8::bigint, $9::bigint)
RETURNING id`

// applyFileSchedule creates or updates c in tx and says which
// ("created", "updated", "unchanged"); ErrConflict when the name is held
// by a CLI schedule or another workflow's file.
func applyFileSchedule(ctx context.Context, tx *sqlx.Tx, c schedule.Definition) (string, error) {
	var ids []int64
	if err := tx.SelectContext(ctx, &ids, qInsertSchedule, scheduleArgs(c)...); err != nil {
		return "", fmt.Errorf("apply schedule %q: %w", c.Name, err)
	}
	if len(ids) == 1 {
		return "created", nil
	}
	var held struct {
		Owner    schedule.Owner `db:"owner"`
		Workflow string         `db:"workflow_name"`
	}
	err := tx.GetContext(ctx, &held, `SELECT owner, workflow_name FROM schedules WHERE name = $1 FOR UPDATE`, c.Name)
	if err != nil {
		return "", fmt.Errorf("apply schedule %q: read its owner: %w", c.Name, err)
	}
	switch {
	case held.Owner != schedule.OwnerFile:
		return "", fmt.Errorf("%w: schedule %q already exists, created with ffctl schedule create: rename it in the file or delete that one first (nothing applied)", ErrConflict, c.Name)
	case held.Workflow != c.Workflow:
		return "", fmt.Errorf("%w: schedule %q is declared in the workflow file of %s: rename it in one of the files (nothing applied)", ErrConflict, c.Name, held.Workflow)
	}
	if err := tx.SelectContext(ctx, &ids, qUpdateFileSchedule, c.Name, c.Workflow, c.Cron, c.Timezone, string(c.Params),
		string(c.Overlap), string(c.Catchup), c.CatchupWindow.Milliseconds(), c.Jitter.Milliseconds()); err != nil {
		return "", fmt.Errorf("apply schedule %q: %w", c.Name, err)
	}
	if len(ids) == 0 {
		return "unchanged", nil
	}
	return "updated", nil
}

// refuseFileOwned returns ErrConflict when schedule name is declared in a
// workflow file (it is deleted by removing it there), nil when it is not
// or does not exist.
func refuseFileOwned(ctx context.Context, tx *sqlx.Tx, name string) error {
	var wf string
	err := tx.GetContext(ctx, &wf, `SELECT workflow_name FROM schedules WHERE name = $1 AND owner = 'file'`, name)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete schedule %q: read its owner: %w", name, err)
	}
	return fmt.Errorf("%w: schedule %q is declared in the workflow file of %s; remove it there", ErrConflict, name, wf)
}
