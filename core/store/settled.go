package store

import (
	"time"

	"github.com/flowforge/flowforge/core"
)

// SettledRun is a run a statement settled (set its finished_at): its
// workflow, final state (SUCCEEDED, FAILED or CANCELLED), and when it was
// triggered and settled, both on the database's clock. The finish returns
// the runs it settles (FinishResult.Run), a scheduler's pass the others
// (AdvanceResult.Settled): the run-duration histogram observes each once,
// where it settled, without a query of its own.
type SettledRun struct {
	Workflow   string        `db:"workflow_name"`
	State      core.RunState `db:"state"`
	CreatedAt  time.Time     `db:"created_at"`
	FinishedAt time.Time     `db:"finished_at"`
}

// Duration is the run's trigger to settle, FinishedAt - CreatedAt.
func (r SettledRun) Duration() time.Duration { return r.FinishedAt.Sub(r.CreatedAt) }
