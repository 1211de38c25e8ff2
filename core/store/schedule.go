package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/schedule"
)

// ScheduleOwner says who manages a schedule: the CLI (`ffctl schedule
// create`) or a workflow file's `schedules:` section. A name belongs to
// one owner: the store refuses to create or change a schedule of the other.
type ScheduleOwner string

// The schedule owners.
const (
	ScheduleOwnerCLI  ScheduleOwner = "cli"
	ScheduleOwnerFile ScheduleOwner = "file"
)

// ScheduleSpec is what an operator (or a workflow file) says about a
// schedule. As JSON (the shape of `ffctl schedule ... -o json`):
//
//	{"name": "nightly", "workflow": "etl", "cron": "30 2 * * *",
//	 "timezone": "Europe/Berlin", "params": {"k": "v"},
//	 "overlap": "skip", "catchup": "one", "catchup_window_ms": 3600000,
//	 "jitter_ms": 0, "paused": false, "owner": "cli"}
type ScheduleSpec struct {
	// Name is the schedule's unique name, the charset of workflow names
	// ([a-z0-9][a-z0-9._-]*, at most core.MaxNameLength).
	Name string `json:"name"`
	// Workflow is the workflow each tick starts (its newest version at the
	// tick).
	Workflow string `json:"workflow"`
	// Cron is the cron expression: 5 fields, 6 with seconds first, or a
	// descriptor ("@hourly", "@daily", "@every 1h30m", ...).
	Cron string `json:"cron"`
	// Timezone is the IANA zone the expression is read in ("" is UTC).
	Timezone string `json:"timezone"`
	// Params is every run's params, a JSON object (nil is {}), checked as
	// a trigger's are (core.ValidateParams, and every task idempotency key
	// of the workflow's newest version must render from it).
	Params json.RawMessage `json:"params"`
	// Overlap: what a tick does while the previous run is open ("" is
	// skip).
	Overlap schedule.Overlap `json:"overlap"`
	// Catchup and CatchupWindow: what happens to missed ticks ("" is
	// none); one and all need a window > 0 (how far back from now a
	// missed tick may still fire), none takes no window (0).
	Catchup       schedule.Catchup `json:"catchup"`
	CatchupWindow time.Duration    `json:"-"`
	// Jitter delays each tick's run by up to this (deterministic per
	// tick; 0: none).
	Jitter time.Duration `json:"-"`
	// Paused: a paused schedule fires no tick; the ticks it would have
	// fired are not caught up when it resumes.
	Paused bool `json:"paused"`
	// Owner: "" is ScheduleOwnerCLI.
	Owner ScheduleOwner `json:"owner"`
}

// Schedule is a stored schedule.
type Schedule struct {
	ID int64 `json:"id"`
	ScheduleSpec
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

// ScheduleIdempotencyKey is the idempotency key of the run of the tick of
// schedule name at tick: "schedule:<name>:<RFC3339 UTC time>".
func ScheduleIdempotencyKey(name string, tick time.Time) string {
	return "schedule:" + name + ":" + tick.UTC().Format(time.RFC3339)
}

// checkedSchedule is a validated spec, ready to store.
type checkedSchedule struct {
	ScheduleSpec
	params json.RawMessage
}

// badSchedule wraps msg with schedule.ErrBadSchedule.
func badSchedule(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{schedule.ErrBadSchedule}, args...)...)
}

// JitterGapTicks is how many fire times (from a fixed reference, see
// schedule.Spec.MinGap) the smallest gap a schedule's jitter must stay
// below is taken over.
const JitterGapTicks = 10

// ValidateScheduleSpec checks spec as CreateSchedule does, writing nothing
// and without the database (the workflow's existence and its task keys are
// not checked): a CLI refuses bad input with it before it connects.
// Errors wrap schedule.ErrBadSchedule or core.ErrBadParams (see
// CreateSchedule).
func ValidateScheduleSpec(spec ScheduleSpec) error {
	_, err := validateSchedule(spec)
	return err
}

// validateSchedule checks spec's fields, writing nothing (the workflow's
// existence and the params against its tasks are checked by the caller).
// Errors wrap schedule.ErrBadSchedule, or core.ErrBadParams for params.
func validateSchedule(spec ScheduleSpec) (checkedSchedule, error) {
	c := checkedSchedule{ScheduleSpec: spec}
	if err := core.ValidateName("schedule", spec.Name); err != nil {
		return c, badSchedule("%s", strings.TrimPrefix(err.Error(), core.ErrBadWorkflow.Error()+": "))
	}
	if err := core.ValidateName("workflow", spec.Workflow); err != nil {
		return c, badSchedule("%s", strings.TrimPrefix(err.Error(), core.ErrBadWorkflow.Error()+": "))
	}
	cron, err := schedule.Parse(spec.Cron, spec.Timezone)
	if err != nil {
		return c, err
	}
	if c.Timezone == "" {
		c.Timezone = "UTC"
	}
	if c.Overlap, err = schedule.ParseOverlap(string(spec.Overlap)); err != nil {
		return c, err
	}
	if c.Catchup, err = schedule.ParseCatchup(string(spec.Catchup)); err != nil {
		return c, err
	}
	switch {
	case spec.CatchupWindow < 0:
		return c, badSchedule("catch-up window %v is negative", spec.CatchupWindow)
	case spec.Jitter < 0:
		return c, badSchedule("jitter %v is negative", spec.Jitter)
	case c.Catchup != schedule.CatchupNone && spec.CatchupWindow <= 0:
		return c, badSchedule("catch-up %s needs a catch-up window (how far back a missed tick may still fire)", c.Catchup)
	case c.Catchup == schedule.CatchupNone && spec.CatchupWindow > 0:
		// It would be stored and never read: the operator meant a
		// catch-up that the schedule does not do.
		return c, badSchedule("a catch-up window (%v) applies only with catch-up one or all, and catch-up is none (set catch-up, or leave the window out)", spec.CatchupWindow)
	}
	// Ticks fire in order: a jitter at or above the gap between fire
	// times would hold back every later tick behind the delayed one.
	if gap := cron.MinGap(JitterGapTicks); spec.Jitter > 0 && gap > 0 && spec.Jitter >= gap {
		return c, badSchedule("jitter %v is not below the gap between the schedule's fire times (%v): ticks fire in order, so a larger jitter delays every later tick", spec.Jitter, gap)
	}
	switch c.Owner {
	case "":
		c.Owner = ScheduleOwnerCLI
	case ScheduleOwnerCLI, ScheduleOwnerFile:
	default:
		return c, badSchedule("owner %q: want cli or file", spec.Owner)
	}
	if c.params, err = triggerParams(TriggerRequest{Params: spec.Params}); err != nil {
		return c, err
	}
	c.Params = c.params
	return c, nil
}

// checkScheduleWorkflow checks that c's workflow exists and that its
// newest version's task idempotency keys render from c's params. Errors:
// ErrNotFound, core.ErrBadParams.
func (s *Store) checkScheduleWorkflow(ctx context.Context, c checkedSchedule) error {
	wf, err := s.definition(ctx, c.Workflow, 0, true)
	if err != nil {
		return fmt.Errorf("schedule %q: %w", c.Name, err)
	}
	var rk runKeys
	if err := rk.add(&wf.Definition, c.params); err != nil {
		return fmt.Errorf("schedule %q: %w", c.Name, err)
	}
	return nil
}
