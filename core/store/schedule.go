package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/schedule"
)

// Schedule is a stored schedule.
type Schedule struct {
	ID int64 `json:"id"`
	schedule.Definition
	// CatchupWindowMS and JitterMS are CatchupWindow and Jitter in
	// milliseconds (the JSON shape).
	CatchupWindowMS int64 `json:"catchup_window_ms"`
	JitterMS        int64 `json:"jitter_ms"`
	// CreatedAt is when it was created; FiredThrough its last-fired point
	// (every tick at or before it is decided), both the database's clock.
	CreatedAt    time.Time `json:"created_at"`
	FiredThrough time.Time `json:"fired_through"`
	// Ticks: the newest ticks first; GetSchedule gives the last
	// ScheduleTicksShown, ListSchedules the last one.
	Ticks []Tick `json:"ticks"`
	// ReadAt is the database's clock when the schedule was read: the
	// "now" to compute its next fire times from (schedule.NextFireTimes).
	ReadAt time.Time `json:"read_at"`
}

// TickOutcome is what a tick did.
type TickOutcome string

// The tick outcomes.
const (
	// TickFired: the tick's run was created (Tick.RunID).
	TickFired TickOutcome = "fired"
	// TickSkipped: the previous run was open and the overlap policy is
	// skip (Tick.Reason names it).
	TickSkipped TickOutcome = "skipped"
	// TickDropped: the workflow is paused in drop mode
	// (ErrWorkflowPaused).
	TickDropped TickOutcome = "dropped"
	// TickFailed: the run could not be created (bad params for the
	// workflow's newest version, an unknown workflow); Reason says why.
	TickFailed TickOutcome = "failed"
)

// Tick is one tick of a schedule. As JSON:
//
//	{"id": 7, "scheduled_at": "...", "fired_at": "...", "manual": false,
//	 "outcome": "fired", "run_id": "uuid" | null, "run_state": "RUNNING" | "",
//	 "reason": "", "actor": "scheduler-1"}
type Tick struct {
	ID int64 `json:"id" db:"id"`
	// ScheduledAt is the cron time (for a manual tick, when it was asked
	// for); FiredAt when the tick's transaction ran. Database clock.
	ScheduledAt time.Time `json:"scheduled_at" db:"scheduled_at"`
	FiredAt     time.Time `json:"fired_at" db:"fired_at"`
	// Manual: `schedule trigger-now`, outside the cron.
	Manual  bool        `json:"manual" db:"manual"`
	Outcome TickOutcome `json:"outcome" db:"outcome"`
	// RunID is the run it created (nil unless fired); RunState the run's
	// state now ("" when the run is gone, pruned).
	RunID    *uuid.UUID `json:"run_id" db:"run_id"`
	RunState string     `json:"run_state" db:"run_state"`
	Reason   string     `json:"reason" db:"reason"`
	Actor    string     `json:"actor" db:"actor"`
}

// ScheduleTicksShown is how many ticks GetSchedule returns.
const ScheduleTicksShown = 10

// checkScheduleWorkflow checks that c's workflow exists and that its
// newest version's task idempotency keys and params templates render from
// c's params (core.RenderRunTasks) and its flow-control keys evaluate over
// them (core.FlowPrograms.Eval), as each tick's trigger will. Errors:
// ErrNotFound, core.ErrBadParams (also wrapping core.ErrBadFlowKey for a
// key).
func (s *Store) checkScheduleWorkflow(ctx context.Context, c schedule.Definition) error {
	wf, err := s.definition(ctx, SQLQuerier(s.db), c.Workflow, 0, true)
	if err != nil {
		return fmt.Errorf("schedule %q: %w", c.Name, err)
	}
	if _, err := core.RenderRunTasks(&wf.Definition, c.Params); err != nil {
		return fmt.Errorf("schedule %q: %w", c.Name, err)
	}
	flow, err := wf.flowPrograms()
	if err != nil {
		return fmt.Errorf("schedule %q: %w", c.Name, err)
	}
	params := c.Params
	if len(params) == 0 {
		params = json.RawMessage(`{}`)
	}
	if _, err := flow.Eval(ctx, params); err != nil {
		return fmt.Errorf("schedule %q: %w", c.Name, err)
	}
	return nil
}
