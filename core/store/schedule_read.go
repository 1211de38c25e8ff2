package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/flowforge/flowforge/core/schedule"
)

// scheduleRow is a schedules row as scanned.
type scheduleRow struct {
	ID              int64          `db:"id"`
	Name            string         `db:"name"`
	Workflow        string         `db:"workflow_name"`
	Cron            string         `db:"cron"`
	Timezone        string         `db:"timezone"`
	Params          JSON           `db:"params"`
	Overlap         string         `db:"overlap"`
	Catchup         string         `db:"catchup"`
	CatchupWindowMS int64          `db:"catchup_window_ms"`
	JitterMS        int64          `db:"jitter_ms"`
	Paused          bool           `db:"paused"`
	Owner           schedule.Owner `db:"owner"`
	CreatedAt       time.Time      `db:"created_at"`
	FiredThrough    time.Time      `db:"fired_through"`
	ReadAt          time.Time      `db:"read_at"`
}

func (r scheduleRow) schedule() Schedule {
	return Schedule{
		ID: r.ID,
		Definition: schedule.Definition{
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

// ListSchedulesLimit is ListSchedules bounded: the first limit schedules by
// name (limit <= 0: 100), each with its newest tick.
func (s *Store) ListSchedulesLimit(ctx context.Context, limit int) ([]Schedule, error) {
	if limit <= 0 {
		limit = 100
	}
	return s.listSchedules(ctx, &limit)
}

// listSchedules is ListSchedules with LIMIT limit (nil: every schedule).
func (s *Store) listSchedules(ctx context.Context, limit *int) ([]Schedule, error) {
	var rows []scheduleRow
	if err := s.db.SelectContext(ctx, &rows, `SELECT `+scheduleColumns+` FROM schedules ORDER BY name LIMIT $1`, limit); err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	out := make([]Schedule, len(rows))
	for i, r := range rows {
		out[i] = r.schedule()
	}
	if err := s.attachTicks(ctx, out, 1); err != nil {
		return nil, err
	}
	return out, nil
}
