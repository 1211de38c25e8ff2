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

func (c checkedSchedule) args() []any {
	return []any{c.Name, c.Workflow, c.Cron, c.Timezone, string(c.params), string(c.Overlap), string(c.Catchup),
		c.CatchupWindow.Milliseconds(), c.Jitter.Milliseconds(), c.Paused, string(c.Owner)}
}

// CreateSchedule checks spec and stores it, audited (actor, reason: ""
// allowed) as "create". Its first tick is the first fire time after its
// creation (database clock). Errors: schedule.ErrBadSchedule (the message
// names the field: bad name, cron, zone, policy, duration, owner),
// core.ErrBadParams (params, also those the workflow's task idempotency
// keys cannot render from), ErrNotFound (no such workflow), ErrConflict (the
// name is taken; the message says by which owner when it is the other).
func (s *Store) CreateSchedule(ctx context.Context, spec ScheduleSpec, actor, reason string) (Schedule, error) {
	c, err := validateSchedule(spec)
	if err != nil {
		return Schedule{}, err
	}
	if err := s.checkScheduleWorkflow(ctx, c); err != nil {
		return Schedule{}, err
	}
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		var ids []int64
		if err := tx.SelectContext(ctx, &ids, qInsertSchedule, c.args()...); err != nil {
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
func (s *Store) ApplySchedule(ctx context.Context, spec ScheduleSpec, actor, reason string) (Schedule, bool, error) {
	c, err := validateSchedule(spec)
	if err != nil {
		return Schedule{}, false, err
	}
	if err := s.checkScheduleWorkflow(ctx, c); err != nil {
		return Schedule{}, false, err
	}
	created := false
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		var ids []int64
		if err := tx.SelectContext(ctx, &ids, qInsertSchedule, c.args()...); err != nil {
			return fmt.Errorf("apply schedule %q: %w", c.Name, err)
		}
		action := "create"
		if created = len(ids) == 1; !created {
			if err := tx.SelectContext(ctx, &ids, qUpdateSchedule, c.args()...); err != nil {
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
func scheduleTaken(ctx context.Context, tx *sqlx.Tx, name string, owner ScheduleOwner) error {
	var held ScheduleOwner
	if err := tx.GetContext(ctx, &held, `SELECT owner FROM schedules WHERE name = $1`, name); err != nil {
		return fmt.Errorf("schedule %q: read its owner: %w", name, err)
	}
	if held != owner {
		return fmt.Errorf("%w: schedule %q already exists, owned by %s (a %s schedule cannot take its name)", ErrConflict, name, ownerWords(held), owner)
	}
	return fmt.Errorf("%w: schedule %q already exists", ErrConflict, name)
}

func ownerWords(o ScheduleOwner) string {
	if o == ScheduleOwnerFile {
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

// scheduleRow is a schedules row as scanned.
type scheduleRow struct {
	ID              int64         `db:"id"`
	Name            string        `db:"name"`
	Workflow        string        `db:"workflow_name"`
	Cron            string        `db:"cron"`
	Timezone        string        `db:"timezone"`
	Params          JSON          `db:"params"`
	Overlap         string        `db:"overlap"`
	Catchup         string        `db:"catchup"`
	CatchupWindowMS int64         `db:"catchup_window_ms"`
	JitterMS        int64         `db:"jitter_ms"`
	Paused          bool          `db:"paused"`
	Owner           ScheduleOwner `db:"owner"`
	CreatedAt       time.Time     `db:"created_at"`
	FiredThrough    time.Time     `db:"fired_through"`
	ReadAt          time.Time     `db:"read_at"`
}

func (r scheduleRow) schedule() Schedule {
	return Schedule{
		ID: r.ID,
		ScheduleSpec: ScheduleSpec{
			Name: r.Name, Workflow: r.Workflow, Cron: r.Cron, Timezone: r.Timezone, Params: json.RawMessage(r.Params),
			Overlap: schedule.Overlap(r.Overlap), Catchup: schedule.Catchup(r.Catchup),
			CatchupWindow: time.Duration(r.CatchupWindowMS) * time.Millisecond, Jitter: time.Duration(r.JitterMS) * time.Millisecond,
			Paused: r.Paused, Owner: r.Owner,
		},
		CatchupWindowMS: r.CatchupWindowMS, JitterMS: r.JitterMS,
		CreatedAt: r.CreatedAt, FiredThrough: r.FiredThrough, ReadAt: r.ReadAt,
		Ticks: []Tick{},
	}
}

// Window is sc as the scheduler reads it (schedule.Due,
// schedule.NextFireTimes): its parsed cron in its zone, its last-fired
// point, catch-up policy and jitter. Errors: those of schedule.Parse (a
// stored zone the host's tzdata no longer has).
func (sc Schedule) Window() (schedule.Window, error) {
	spec, err := schedule.Parse(sc.Cron, sc.Timezone)
	if err != nil {
		return schedule.Window{}, err
	}
	return schedule.Window{
		Name: sc.Name, Spec: spec, After: sc.FiredThrough,
		Catchup: sc.Catchup, CatchupWindow: sc.CatchupWindow, Jitter: sc.Jitter,
	}, nil
}

const scheduleColumns = `id, name, workflow_name, cron, timezone, params, overlap, catchup, catchup_window_ms, jitter_ms,
       paused, owner, created_at, fired_through, now() AS read_at`

// qScheduleTicks is the newest $2 ticks of each schedule of $1, with their
// runs' states.
const qScheduleTicks = `
SELECT t.schedule_id, t.id, t.scheduled_at, t.fired_at, t.manual, t.outcome, t.run_id,
       COALESCE(r.state, '') AS run_state, COALESCE(t.reason, '') AS reason, t.actor
  FROM unnest($1::bigint[]) AS s(id)
  CROSS JOIN LATERAL (SELECT * FROM schedule_ticks t WHERE t.schedule_id = s.id ORDER BY t.id DESC LIMIT $2) t
  LEFT JOIN workflow_runs r ON r.id = t.run_id
 ORDER BY t.schedule_id, t.id DESC`

// ListSchedules returns every schedule by name, each with its newest tick
// (Ticks has at most one).
func (s *Store) ListSchedules(ctx context.Context) ([]Schedule, error) {
	return s.listSchedules(ctx, nil)
}

// attachTicks fills the Ticks of scheds with their newest n.
func (s *Store) attachTicks(ctx context.Context, scheds []Schedule, n int) error {
	if len(scheds) == 0 {
		return nil
	}
	ids := make([]int64, len(scheds))
	at := make(map[int64]int, len(scheds))
	for i, sc := range scheds {
		ids[i], at[sc.ID] = sc.ID, i
	}
	var ticks []struct {
		ScheduleID int64 `db:"schedule_id"`
		Tick
	}
	if err := s.db.SelectContext(ctx, &ticks, qScheduleTicks, ids, n); err != nil {
		return fmt.Errorf("read schedule ticks: %w", err)
	}
	for _, t := range ticks {
		i := at[t.ScheduleID]
		scheds[i].Ticks = append(scheds[i].Ticks, t.Tick)
	}
	return nil
}

// GetSchedule returns schedule name with its last ScheduleTicksShown ticks
// (newest first, with their runs' states). Errors: ErrNotFound.
func (s *Store) GetSchedule(ctx context.Context, name string) (Schedule, error) {
	var r scheduleRow
	err := s.db.GetContext(ctx, &r, `SELECT `+scheduleColumns+` FROM schedules WHERE name = $1`, name)
	if errors.Is(err, sql.ErrNoRows) {
		return Schedule{}, fmt.Errorf("schedule %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return Schedule{}, fmt.Errorf("read schedule %q: %w", name, err)
	}
	out := []Schedule{r.schedule()}
	if err := s.attachTicks(ctx, out, ScheduleTicksShown); err != nil {
		return Schedule{}, err
	}
	return out[0], nil
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

// TriggerScheduleNow starts a run of schedule name now, outside its cron
// (a manual tick, also when the schedule is paused; its overlap policy is
// not applied: the operator asked), audited as "trigger-now". It returns
// the tick: fired with its run, or dropped when the workflow is paused in
// drop mode; a fired tick's RunState is its run's state after the trigger
// (PENDING). Errors: core.ErrBadReason, ErrNotFound (schedule), and those
// of Trigger (the tick is then not recorded).
func (s *Store) TriggerScheduleNow(ctx context.Context, name, actor, reason string) (Tick, error) {
	if err := core.ValidateReason(reason); err != nil {
		return Tick{}, fmt.Errorf("trigger schedule %q: %w", name, err)
	}
	var tick Tick
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
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
			return res.err
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
	return tick, nil
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
	res, err := s.trigger(ctx, tx, req)
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
