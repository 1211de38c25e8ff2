package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flowforge/flowforge/core"
)

// ErrBadRunFilter is wrapped by ListRuns' refusal of a filter that can
// select nothing or cannot be read: a time bound with both a time and an
// age, a negative age, a window whose start is after its end, a param
// filter core.ParamFilter.Validate refuses.
var ErrBadRunFilter = errors.New("invalid run filter")

// RunFilter narrows ListRuns. Zero values mean "any".
type RunFilter struct {
	Workflow string
	State    core.RunState
	Limit    int // 0 means 50
	// Before pages backwards: only runs created before this time.
	Before *time.Time
	// Since and Until keep the runs created at or after Since and at or
	// before Until.
	Since, Until TimeBound
	// Params keeps the runs whose params match every filter (AND; see
	// core.ParamFilter for what matches).
	Params []core.ParamFilter
}

// TimeBound is one end of a window of created_at: the time At, or Ago
// before the database's now() when the query runs (never the process
// clock). The zero value is no bound; setting both is ErrBadRunFilter.
type TimeBound struct {
	At  *time.Time
	Ago time.Duration
}

// IsZero reports whether b bounds nothing.
func (b TimeBound) IsZero() bool { return b.At == nil && b.Ago == 0 }

// args are b's two parameters of qListRuns and qRunWindow: the time and
// the age in microseconds, each NULL when not set.
func (b TimeBound) args() (*time.Time, *int64) {
	if b.Ago == 0 {
		return b.At, nil
	}
	us := b.Ago.Microseconds()
	return nil, &us
}

// check refuses a bound with both forms or a negative age; what names it.
func (b TimeBound) check(what string) error {
	switch {
	case b.At != nil && b.Ago != 0:
		return fmt.Errorf("%w: %s has both a time and an age", ErrBadRunFilter, what)
	case b.Ago < 0:
		return fmt.Errorf("%w: %s: a negative age (%v)", ErrBadRunFilter, what, b.Ago)
	}
	return nil
}

// qListRuns lists runs newest first. Every bound on created_at is an
// expression of the parameters and now() (stable), never of the row, and
// an absent bound is an infinite one: each plan, custom or generic, walks
// an index on created_at (workflow_runs_created, or
// workflow_runs_workflow_created with a workflow) inside the window, and
// stops at the limit. The param filters ($8 keys, $9 and $10 the two
// candidate values of each, see core.ParamFilter.Candidates) are checked
// on the runs that walk meets: a run fails when some filter's key has
// neither candidate value (a missing key is NULL, distinct from both).
const qListRuns = `SELECT ` + runColumns + ` FROM workflow_runs r
 WHERE ($1::text = '' OR r.workflow_name = $1::text) AND ($2::text = '' OR r.state = $2::text)
   AND r.created_at < coalesce($3::timestamptz, 'infinity')
   AND r.created_at >= coalesce($4::timestamptz, now() - $5::bigint * interval '1 microsecond', '-infinity')
   AND r.created_at <= coalesce($6::timestamptz, now() - $7::bigint * interval '1 microsecond', 'infinity')
   AND NOT EXISTS (SELECT 1 FROM unnest($8::text[], $9::jsonb[], $10::jsonb[]) AS p(k, a, b)
                    WHERE (r.params -> p.k) IS DISTINCT FROM p.a AND (r.params -> p.k) IS DISTINCT FROM p.b)
 ORDER BY r.created_at DESC LIMIT $11::int`

// qRunWindow resolves a window's two bounds on the database clock and says
// whether its start is after its end.
const qRunWindow = `
SELECT s, u, s > u AS inverted FROM (
  SELECT coalesce($1::timestamptz, now() - $2::bigint * interval '1 microsecond') AS s,
         coalesce($3::timestamptz, now() - $4::bigint * interval '1 microsecond') AS u) w`

// ListRuns returns the runs f selects, newest first, at most f.Limit.
// Errors: ErrBadRunFilter (wrapped, saying what is wrong) for a filter
// that cannot select anything (see ErrBadRunFilter), checked before the
// runs are read; the database's otherwise.
func (s *Store) ListRuns(ctx context.Context, f RunFilter) ([]Run, error) {
	if f.Limit <= 0 {
		f.Limit = 50
	}
	if err := s.checkRunFilter(ctx, f); err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	keys := make([]string, len(f.Params))
	first := make([]string, len(f.Params))
	second := make([]string, len(f.Params))
	for i, p := range f.Params {
		c := p.Candidates()
		keys[i], first[i], second[i] = p.Key, string(c[0]), string(c[len(c)-1])
	}
	sinceAt, sinceAgo := f.Since.args()
	untilAt, untilAgo := f.Until.args()
	var out []Run
	err := s.db.SelectContext(ctx, &out, qListRuns, s.args(f.Workflow, string(f.State), f.Before,
		sinceAt, sinceAgo, untilAt, untilAgo, keys, first, second, f.Limit)...)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	for i := range out {
		withRunWaiting(&out[i])
	}
	return out, nil
}

// checkRunFilter refuses what ErrBadRunFilter names. A window with both
// ends is resolved on the database clock (one statement) to tell whether
// it is inverted.
func (s *Store) checkRunFilter(ctx context.Context, f RunFilter) error {
	for _, p := range f.Params {
		if err := p.Validate(); err != nil {
			return fmt.Errorf("%w: param %w", ErrBadRunFilter, err)
		}
	}
	if err := f.Since.check("since"); err != nil {
		return err
	}
	if err := f.Until.check("until"); err != nil {
		return err
	}
	if f.Since.IsZero() || f.Until.IsZero() {
		return nil
	}
	sinceAt, sinceAgo := f.Since.args()
	untilAt, untilAgo := f.Until.args()
	var w struct {
		Since    time.Time `db:"s"`
		Until    time.Time `db:"u"`
		Inverted bool      `db:"inverted"`
	}
	if err := s.db.GetContext(ctx, &w, qRunWindow, s.args(sinceAt, sinceAgo, untilAt, untilAgo)...); err != nil {
		return fmt.Errorf("resolve the window: %w", err)
	}
	if w.Inverted {
		return fmt.Errorf("%w: since (%s) is after until (%s): the window holds no time",
			ErrBadRunFilter, w.Since.UTC().Format(time.RFC3339Nano), w.Until.UTC().Format(time.RFC3339Nano))
	}
	return nil
}
