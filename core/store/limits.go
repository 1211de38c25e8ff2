package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jmoiron/sqlx"

	"github.com/flowforge/flowforge/core"
)

// The operator's view of flow control (issue 27): the keys with their
// limits, holders and waiters (`ffctl limits list`), and the operator's
// limit of a key (`ffctl limits set` and `reset`), audited in
// flow_limit_events. Migration 00018 says what the columns hold.

// Flow-control kinds: the values of flow_limits.kind and task_runs.flow_wait.
const (
	FlowConcurrency = "concurrency"
	FlowRate        = "rate"
	// FlowRun is a workflow's run-level concurrency key (flow_limits.kind
	// only: a waiting run has workflow_runs.run_wait set).
	FlowRun = "run"
)

// ErrBadLimit is matched by SetLimit's refusal of a kind other than
// FlowConcurrency, FlowRate or FlowRun, or of a limit out of its kind's
// range.
var ErrBadLimit = errors.New("invalid flow limit")

// LimitsShownMax bounds ListLimits' limit (0 or less: LimitsShownDefault).
const (
	LimitsShownDefault = 100
	LimitsShownMax     = 1000
)

// FlowLimit is one key of one kind (a flow_limits row) as operators see it.
type FlowLimit struct {
	Kind string `db:"kind" json:"kind"` // FlowConcurrency or FlowRate
	Key  string `db:"key" json:"key"`
	// Limit is the effective limit: OperatorLimit when set, else
	// DefinitionLimit.
	Limit int `db:"lim" json:"limit"`
	// DefinitionLimit is the limit of the definition of the key's oldest
	// waiter when it last waited (or the limit an operator created the
	// key with).
	DefinitionLimit int `db:"definition_limit" json:"definition_limit"`
	// OperatorLimit is the limit an operator set (SetLimit); nil when none.
	OperatorLimit *int `db:"operator_limit" json:"operator_limit"`
	// Per is a rate key's period; 0 for a concurrency key.
	Per time.Duration `db:"-" json:"-"`
	// PerMs is Per in milliseconds (null for a concurrency key).
	PerMs *int64 `db:"per_ms" json:"per_ms,omitempty"`
	// InUse is, for a concurrency key, the task runs holding one of its
	// slots (READY and admitted, or RUNNING); for a rate key, the starts
	// within its window (the period plus its guard, database clock).
	InUse int `db:"in_use" json:"in_use"`
	// Waiting counts the READY task runs waiting for this key and kind.
	Waiting int `db:"waiting" json:"waiting"`
	// OldestWaitSeconds is how long the oldest waiter has been READY
	// (database clock), in seconds; 0 when none waits.
	OldestWaitSeconds float64   `db:"oldest_wait_seconds" json:"oldest_wait_seconds"`
	UpdatedAt         time.Time `db:"updated_at" json:"updated_at"`
}

// Operator reports whether the effective limit is one an operator set.
func (l FlowLimit) Operator() bool { return l.OperatorLimit != nil }

// LimitText is the effective limit as `ffctl limits list` and the
// dashboard show it: "5", "100/1m0s" for a rate key, with " (set)" when an
// operator set it.
func (l FlowLimit) LimitText() string {
	s := strconv.Itoa(l.Limit)
	if l.Kind == FlowRate {
		s += "/" + l.Per.String()
	}
	if l.Operator() {
		s += " (set)"
	}
	return s
}

// qListLimits reads every flow_limits row with its holders and waiters,
// hottest first (waiting, then in use), at most $1. The holders of a
// concurrency key are counted with the predicate of the partial index
// task_runs_slots; the waiters through task_runs_waiting_concurrency and
// task_runs_waiting_rate.
const qListLimits = `
SELECT f.kind, f.key, coalesce(f.operator_limit, f.lim) AS lim, f.lim AS definition_limit, f.operator_limit, f.per_ms,
       CASE f.kind WHEN 'concurrency' THEN
            (SELECT count(*) FROM task_runs h
              WHERE h.concurrency_key = f.key AND h.kind = 'task' AND h.state IN ('READY', 'RUNNING')
                AND h.flow_wait IS DISTINCT FROM 'concurrency')
       WHEN 'run' THEN
            (SELECT count(*) FROM workflow_runs h
              WHERE h.concurrency_key = f.key AND h.finished_at IS NULL AND NOT h.run_wait)
       ELSE (SELECT count(*) FROM unnest(f.starts) s WHERE s > now() - ` + rateWindowF + `) END AS in_use,
       w.waiting,
       coalesce(extract(epoch FROM now() - w.oldest), 0)::float8 AS oldest_wait_seconds,
       f.updated_at
  FROM flow_limits f CROSS JOIN LATERAL (
        SELECT count(*) AS waiting, min(t.ready_at) AS oldest FROM task_runs t
         WHERE f.kind = 'concurrency' AND t.state = 'READY' AND t.flow_wait = 'concurrency' AND t.concurrency_key = f.key
        UNION ALL
        SELECT count(*), min(t.ready_at) FROM task_runs t
         WHERE f.kind = 'rate' AND t.state = 'READY' AND t.flow_wait = 'rate' AND t.rate_key = f.key
        UNION ALL
        SELECT count(*), min(r.created_at) FROM workflow_runs r
         WHERE f.kind = 'run' AND r.run_wait AND r.finished_at IS NULL AND r.concurrency_key = f.key
        ORDER BY 1 DESC LIMIT 1) w
 ORDER BY w.waiting DESC, in_use DESC, f.key, f.kind
 LIMIT $1`

// ListLimits returns the flow-control keys (one per flow_limits row: a
// key appears once a task run waited for it, or once an operator set its
// limit), hottest first: most waiters, then most in use, then by key; at
// most limit (0 or less: LimitsShownDefault; capped at LimitsShownMax).
func (s *Store) ListLimits(ctx context.Context, limit int) ([]FlowLimit, error) {
	if limit <= 0 {
		limit = LimitsShownDefault
	}
	limit = min(limit, LimitsShownMax)
	var out []FlowLimit
	if err := s.db.SelectContext(ctx, &out, qListLimits, limit); err != nil {
		return nil, fmt.Errorf("list flow limits: %w", err)
	}
	for i := range out {
		if p := out[i].PerMs; p != nil {
			out[i].Per = time.Duration(*p) * time.Millisecond
		}
	}
	return out, nil
}

// SetLimitRequest is an operator's change of a key's limit.
type SetLimitRequest struct {
	// Kind is FlowConcurrency or FlowRate; "" changes every kind that has
	// the key.
	Kind string
	Key  string
	// Limit is the operator's limit: 1 to core.MaxConcurrencyLimit for a
	// concurrency key, 1 to core.MaxRateLimit for a rate key; nil resets
	// the key to its definitions' limit.
	Limit *int
	// Reason (required, core.ValidateReason) and Actor are audited.
	Reason, Actor string
}

// LimitChange is one key's limit before and after SetLimit (effective
// limits: the operator's, else the definitions'); Old is nil for a key
// SetLimit created.
type LimitChange struct {
	Kind string `json:"kind"`
	Key  string `json:"key"`
	Old  *int   `json:"old_limit"`
	New  int    `json:"new_limit"`
	// Forgotten says a reset dropped the key: no definition's limit
	// stands behind it, since no task run (or run) holds or waits for
	// it; New is then 0. A waiter brings it back with its definition's
	// limit.
	Forgotten bool `json:"forgotten,omitempty"`
	// Unchanged says the operator's limit already was New: nothing was
	// written, nor audited (a script that sets a limit again writes no
	// audit row each time).
	Unchanged bool `json:"unchanged,omitempty"`
}

// SetLimitResult says what SetLimit changed: one LimitChange per kind.
type SetLimitResult struct {
	Changes []LimitChange `json:"changes"`
}

// qLockLimits locks the flow_limits rows of key $1 ($2: one kind, or ""
// for both) in (kind, key) order, the admission's order.
const qLockLimits = `
SELECT kind, lim, operator_limit FROM flow_limits
 WHERE key = $1::text AND ($2::text = '' OR kind = $2::text)
 ORDER BY kind, key
   FOR UPDATE`

// qSetLimit sets the operator's limit of key $2 of kind $1 to $3 (NULL:
// none) and audits the change (old effective limit $4, actor $5, reason
// $6), returning the new effective limit.
const qSetLimit = `
WITH up AS (
    UPDATE flow_limits SET operator_limit = $3::int, updated_at = now()
     WHERE kind = $1::text AND key = $2::text
 RETURNING kind, key, coalesce(operator_limit, lim) AS lim
), ev AS (
    INSERT INTO flow_limit_events (kind, key, old_limit, new_limit, actor, reason)
    SELECT kind, key, $4::int, lim, $5::text, $6::text FROM up
)
SELECT lim FROM up`

// qCreateLimit records key $1 of kind $5 (concurrency or run) that nothing waited for yet
// with the operator's limit $2 (as its definitions' limit too, until a
// waiter brings its definition's), audited (actor $3, reason $4).
const qCreateLimit = `
WITH ins AS (
    INSERT INTO flow_limits (kind, key, lim, operator_limit) VALUES ($5::text, $1::text, $2::int, $2::int)
), ev AS (
    INSERT INTO flow_limit_events (kind, key, old_limit, new_limit, actor, reason)
    VALUES ($5::text, $1::text, NULL, $2::int, $3::text, $4::text)
)
SELECT 1`

// qKeyInUse says whether key $2 of kind $1 (concurrency or run; a rate
// key is never forgotten) has a holder or a waiter: a task run of the key
// READY or RUNNING, or an open run of the run key.
const qKeyInUse = `
SELECT CASE $1::text
         WHEN 'run' THEN EXISTS (SELECT 1 FROM workflow_runs r WHERE r.concurrency_key = $2::text AND r.finished_at IS NULL)
         ELSE EXISTS (SELECT 1 FROM task_runs t WHERE t.concurrency_key = $2::text AND t.state IN ('READY', 'RUNNING'))
       END`

// qForgetLimit drops key $2 of kind $1 (a reset of a key no task uses)
// and audits it (old effective limit $3, actor $4, reason $5; new limit
// NULL).
const qForgetLimit = `
WITH del AS (
    DELETE FROM flow_limits WHERE kind = $1::text AND key = $2::text RETURNING kind, key
)
INSERT INTO flow_limit_events (kind, key, old_limit, new_limit, actor, reason)
SELECT kind, key, $3::int, NULL, $4::text, $5::text FROM del`

// SetLimit sets (req.Limit) or resets (nil) the operator's limit of key
// req.Key, of kind req.Kind or of every kind that has the key, in ONE
// transaction with an audit row per kind in flow_limit_events (the old and
// new effective limits, the actor and the reason), and wakes the
// schedulers (a notice on TasksChannel with AnyRun) so a raised limit
// admits at once. A limit below the number of holders takes no slot back:
// the running tasks finish, and the admission, which counts the holders,
// admits none until they are fewer than the limit. A concurrency key that
// no task waited for yet is created with req.Limit when req.Kind names it
// (so a limit can be set before the load arrives).
//
// Errors: one wrapping core.ErrBadReason for a reason core.ValidateReason
// refuses; ErrBadLimit for a kind other than FlowConcurrency, FlowRate, FlowRun or
// "", or a limit out of its kind's range; ErrNotFound naming the key when
// no key of that kind exists and none can be created (a reset, no kind,
// or a rate key, which exists once a task using it has waited: its period
// comes from the definition), or when a reset finds no operator's limit
// on any kind of the key (nothing to reset: nothing is written). A reset
// of a concurrency or run key that no task run (or run) holds or waits for
// forgets the key (LimitChange.Forgotten): the limit it had was the
// operator's, or a definition's no task uses now. A key created here must
// be one a trigger could give a task (1 to core.MaxFlowKeyLength bytes of
// valid UTF-8 without NUL) and, for kind run, name its workflow
// ("<workflow>/<key>"); ErrBadLimit otherwise. That workflow must have
// been applied; ErrNotFound naming it otherwise.
func (s *Store) SetLimit(ctx context.Context, req SetLimitRequest) (SetLimitResult, error) {
	what := fmt.Sprintf("set limit of %q", req.Key)
	if req.Limit == nil {
		what = fmt.Sprintf("reset limit of %q", req.Key)
	}
	if err := core.ValidateReason(req.Reason); err != nil {
		return SetLimitResult{}, fmt.Errorf("%s: %w", what, err)
	}
	if req.Kind != "" && req.Kind != FlowConcurrency && req.Kind != FlowRate && req.Kind != FlowRun {
		return SetLimitResult{}, fmt.Errorf("%s: %w: the kind is %s, %s or %s, not %q", what, ErrBadLimit, FlowConcurrency, FlowRate, FlowRun, req.Kind)
	}
	if req.Kind != "" {
		if err := checkLimit(req.Kind, req.Limit); err != nil {
			return SetLimitResult{}, fmt.Errorf("%s: %w", what, err)
		}
	}
	if req.Key == "" {
		return SetLimitResult{}, fmt.Errorf("%s: %w: the key is empty", what, ErrBadLimit)
	}
	if !utf8.ValidString(req.Key) || strings.ContainsRune(req.Key, 0) {
		return SetLimitResult{}, fmt.Errorf("%s: %w: a key is UTF-8 text without NUL", what, ErrBadLimit)
	}
	var res SetLimitResult
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		var rows []limitRow
		if err := tx.SelectContext(ctx, &rows, qLockLimits, req.Key, req.Kind); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if len(rows) == 0 {
			c, err := createLimit(ctx, tx, req)
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			res.Changes = append(res.Changes, c)
		}
		for _, r := range rows {
			if err := checkLimit(r.Kind, req.Limit); err != nil { // req.Kind "": each kind's range
				return fmt.Errorf("%s: %w", what, err)
			}
			if req.Limit == nil && r.Operator == nil {
				continue // a reset: nothing to reset on this kind
			}
			c, err := changeLimit(ctx, tx, req, r)
			if err != nil {
				return fmt.Errorf("%s (%s): %w", what, r.Kind, err)
			}
			res.Changes = append(res.Changes, c)
		}
		if len(res.Changes) == 0 {
			return fmt.Errorf("%s: %w: key %q has no operator's limit (nothing to reset)", what, ErrNotFound, req.Key)
		}
		return notifyAll(ctx, tx, notice{TasksChannel, AnyRun})
	})
	if err != nil {
		return SetLimitResult{}, err
	}
	return res, nil
}

// limitRow is a flow_limits row qLockLimits locked.
type limitRow struct {
	Kind     string `db:"kind"`
	Lim      int    `db:"lim"`
	Operator *int   `db:"operator_limit"`
}

// changeLimit sets (req.Limit) or resets (nil) the operator's limit of
// the locked row r in tx, audited, and returns the change: unchanged (no
// write, no audit) when the operator's limit already is req.Limit;
// forgotten when a reset finds a concurrency or run key no task (or run)
// holds or waits for. Errors: the database's.
func changeLimit(ctx context.Context, tx *sqlx.Tx, req SetLimitRequest, r limitRow) (LimitChange, error) {
	old := r.Lim
	if r.Operator != nil {
		old = *r.Operator
	}
	c := LimitChange{Kind: r.Kind, Key: req.Key, Old: &old}
	if req.Limit != nil && r.Operator != nil && *r.Operator == *req.Limit {
		c.New, c.Unchanged = old, true
		return c, nil
	}
	if req.Limit == nil && r.Kind != FlowRate { // a rate key keeps its window's starts
		var used bool
		if err := tx.GetContext(ctx, &used, qKeyInUse, r.Kind, req.Key); err != nil {
			return c, err
		}
		if !used {
			if _, err := tx.ExecContext(ctx, qForgetLimit, r.Kind, req.Key, old, req.Actor, req.Reason); err != nil {
				return c, err
			}
			c.Forgotten = true
			return c, nil
		}
	}
	if err := tx.GetContext(ctx, &c.New, qSetLimit, r.Kind, req.Key, req.Limit, old, req.Actor, req.Reason); err != nil {
		return c, err
	}
	return c, nil
}

// createLimit creates the concurrency or run key req names with its limit, or
// says why it cannot: ErrNotFound for a reset, no kind, a rate key, or a
// run key whose workflow was never applied (a typo would otherwise make a
// key no run uses); ErrBadLimit for a key no trigger could give.
func createLimit(ctx context.Context, tx *sqlx.Tx, req SetLimitRequest) (LimitChange, error) {
	switch {
	case req.Limit == nil:
		return LimitChange{}, fmt.Errorf("%w: no flow-control key %q (nothing to reset)", ErrNotFound, req.Key)
	case req.Kind == "":
		return LimitChange{}, fmt.Errorf("%w: no flow-control key %q (name its kind to set the limit of a concurrency key no task waited for yet)", ErrNotFound, req.Key)
	case req.Kind == FlowRate:
		return LimitChange{}, fmt.Errorf("%w: no rate key %q: a rate key appears once a task using it has waited (its period comes from the definition)", ErrNotFound, req.Key)
	}
	if err := checkNewKey(req.Kind, req.Key); err != nil {
		return LimitChange{}, err
	}
	if req.Kind == FlowRun {
		wf, _, _ := strings.Cut(req.Key, "/")
		var known bool
		if err := tx.GetContext(ctx, &known, `SELECT EXISTS (SELECT 1 FROM workflows WHERE name = $1)`, wf); err != nil {
			return LimitChange{}, fmt.Errorf("look up workflow %q: %w", wf, err)
		}
		if !known {
			return LimitChange{}, fmt.Errorf("%w: no workflow %q: a run key is <workflow>/<key> of an applied workflow (ffctl workflow list)", ErrNotFound, wf)
		}
	}
	if _, err := tx.ExecContext(ctx, qCreateLimit, req.Key, *req.Limit, req.Actor, req.Reason, req.Kind); err != nil {
		return LimitChange{}, fmt.Errorf("create key: %w", err)
	}
	return LimitChange{Kind: req.Kind, Key: req.Key, New: *req.Limit}, nil
}

// checkNewKey checks a key SetLimit is to create: one a trigger could
// give a task (core.CheckFlowKey) or, for kind run, a run
// ("<workflow>/<key>", as core.FlowPrograms.Eval writes run keys, the key
// part as core.CheckFlowKey wants it).
func checkNewKey(kind, key string) error {
	if kind == FlowRun {
		wf, k, ok := strings.Cut(key, "/")
		if !ok || wf == "" {
			return fmt.Errorf("%w: a run key is <workflow>/<key> (the workflow's own, as limits list shows it), not %q", ErrBadLimit, key)
		}
		key = k
	}
	if err := core.CheckFlowKey(key); err != nil {
		return fmt.Errorf("%w: %w", ErrBadLimit, err)
	}
	return nil
}

// checkLimit checks an operator's limit of kind (nil, a reset, passes).
func checkLimit(kind string, limit *int) error {
	if limit == nil {
		return nil
	}
	hi := core.MaxConcurrencyLimit
	if kind == FlowRate {
		hi = core.MaxRateLimit
	}
	if *limit < 1 || *limit > hi {
		return fmt.Errorf("%w: a %s limit is 1 to %d, not %d", ErrBadLimit, kind, hi, *limit)
	}
	return nil
}

// LimitEvent is one row of the flow-limit audit (flow_limit_events): an
// operator's change of a key's effective limit.
type LimitEvent struct {
	ID       int64     `db:"id" json:"id"`
	Kind     string    `db:"kind" json:"kind"`
	Key      string    `db:"key" json:"key"`
	OldLimit *int      `db:"old_limit" json:"old_limit"`
	NewLimit *int      `db:"new_limit" json:"new_limit"`
	Actor    string    `db:"actor" json:"by"`
	Reason   string    `db:"reason" json:"reason"`
	At       time.Time `db:"at" json:"at"`
}

// LimitEvents returns the audit of key ("": every key) of kind ("": both),
// newest first, at most limit (0 or less: LimitsShownDefault; capped at
// LimitsShownMax).
func (s *Store) LimitEvents(ctx context.Context, kind, key string, limit int) ([]LimitEvent, error) {
	if limit <= 0 {
		limit = LimitsShownDefault
	}
	limit = min(limit, LimitsShownMax)
	var out []LimitEvent
	err := s.db.SelectContext(ctx, &out, `SELECT id, kind, key, old_limit, new_limit, actor, reason, at FROM flow_limit_events
 WHERE ($1::text = '' OR kind = $1::text) AND ($2::text = '' OR key = $2::text) ORDER BY id DESC LIMIT $3`, kind, key, limit)
	if err != nil {
		return nil, fmt.Errorf("read flow limit events: %w", err)
	}
	return out, nil
}
