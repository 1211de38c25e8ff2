package schedule

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/flowforge/flowforge/core"
)

// Owner says who manages a schedule: the CLI (`ffctl schedule create`) or
// a workflow file's `schedules:` section. A name belongs to one owner: the
// store refuses to create or change a schedule of the other.
type Owner string

// The schedule owners.
const (
	OwnerCLI  Owner = "cli"
	OwnerFile Owner = "file"
)

// Definition is what an operator (or a workflow file) says about a
// schedule. As JSON (the shape of `ffctl schedule ... -o json`, where the
// stored schedule adds its id, times and ticks):
//
//	{"name": "nightly", "workflow": "etl", "cron": "30 2 * * *",
//	 "timezone": "Europe/Berlin", "params": {"k": "v"},
//	 "overlap": "skip", "catchup": "one", "catchup_window_ms": 3600000,
//	 "jitter_ms": 0, "paused": false, "owner": "cli"}
type Definition struct {
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
	// a trigger's are (core.ValidateParams; the store also checks that
	// every task idempotency key of the workflow's newest version renders
	// from it).
	Params json.RawMessage `json:"params"`
	// Overlap: what a tick does while the previous run is open ("" is
	// skip).
	Overlap Overlap `json:"overlap"`
	// Catchup and CatchupWindow: what happens to missed ticks ("" is
	// none); one and all need a window > 0 (how far back from now a
	// missed tick may still fire), none takes no window (0).
	Catchup       Catchup       `json:"catchup"`
	CatchupWindow time.Duration `json:"-"`
	// Jitter delays each tick's run by up to this (deterministic per
	// tick; 0: none).
	Jitter time.Duration `json:"-"`
	// Paused: a paused schedule fires no tick; the ticks it would have
	// fired are not caught up when it resumes.
	Paused bool `json:"paused"`
	// Owner: "" is OwnerCLI.
	Owner Owner `json:"owner"`
}

// JitterGapTicks is how many fire times (from a fixed reference, see
// Spec.MinGap) the smallest gap a schedule's jitter must stay below is
// taken over.
const JitterGapTicks = 10

// IdempotencyKey is the idempotency key of the run of the tick of
// schedule name at tick: "schedule:<name>:<RFC3339 UTC time>".
func IdempotencyKey(name string, tick time.Time) string {
	return "schedule:" + name + ":" + tick.UTC().Format(time.RFC3339)
}

// badSchedule wraps msg with ErrBadSchedule.
func badSchedule(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadSchedule}, args...)...)
}

// Validate checks d's fields, without the database (the workflow's
// existence and its task keys are the store's to check: store
// CreateSchedule), and returns d with its defaults filled in: Timezone
// "UTC", Overlap skip, Catchup none, Owner cli, Params {}. The CLI refuses
// bad input with it before it connects; the store checks every schedule
// it writes with it. Errors wrap ErrBadSchedule, or core.ErrBadParams for
// params.
func Validate(d Definition) (Definition, error) {
	c := d
	if err := core.ValidateName("schedule", d.Name); err != nil {
		return c, badSchedule("%s", strings.TrimPrefix(err.Error(), core.ErrBadWorkflow.Error()+": "))
	}
	if err := core.ValidateName("workflow", d.Workflow); err != nil {
		return c, badSchedule("%s", strings.TrimPrefix(err.Error(), core.ErrBadWorkflow.Error()+": "))
	}
	cron, err := Parse(d.Cron, d.Timezone)
	if err != nil {
		return c, err
	}
	if c.Timezone == "" {
		c.Timezone = "UTC"
	}
	if c.Overlap, err = ParseOverlap(string(d.Overlap)); err != nil {
		return c, err
	}
	if c.Catchup, err = ParseCatchup(string(d.Catchup)); err != nil {
		return c, err
	}
	if err := checkDurations(cron, c); err != nil {
		return c, err
	}
	switch c.Owner {
	case "":
		c.Owner = OwnerCLI
	case OwnerCLI, OwnerFile:
	default:
		return c, badSchedule("owner %q: want cli or file", d.Owner)
	}
	if len(c.Params) == 0 {
		c.Params = json.RawMessage(`{}`)
	}
	if err := core.ValidateParams(c.Params); err != nil {
		return c, err
	}
	return c, nil
}

// checkDurations checks c's catch-up window and jitter against its
// catch-up policy (parsed) and its cron's fire times.
func checkDurations(cron *Spec, c Definition) error {
	switch {
	case c.CatchupWindow < 0:
		return badSchedule("catch-up window %v is negative", c.CatchupWindow)
	case c.Jitter < 0:
		return badSchedule("jitter %v is negative", c.Jitter)
	case c.Catchup != CatchupNone && c.CatchupWindow <= 0:
		return badSchedule("catch-up %s needs a catch-up window (how far back a missed tick may still fire)", c.Catchup)
	case c.Catchup == CatchupNone && c.CatchupWindow > 0:
		// It would be stored and never read: the operator meant a
		// catch-up that the schedule does not do.
		return badSchedule("a catch-up window (%v) applies only with catch-up one or all, and catch-up is none (set catch-up, or leave the window out)", c.CatchupWindow)
	}
	// Ticks fire in order: a jitter at or above the gap between fire
	// times would hold back every later tick behind the delayed one.
	if gap := cron.MinGap(JitterGapTicks); c.Jitter > 0 && gap > 0 && c.Jitter >= gap {
		return badSchedule("jitter %v is not below the gap between the schedule's fire times (%v): ticks fire in order, so a larger jitter delays every later tick", c.Jitter, gap)
	}
	return nil
}
