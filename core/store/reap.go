package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/flowforge/flowforge/core"
)

// BackoffFunc returns the delay before the retry that follows attempt under
// policy p. The scheduler passes core.RetryPolicy.Backoff.
type BackoffFunc func(p core.RetryPolicy, attempt int) time.Duration

type expiredLease struct {
	ID             uuid.UUID `db:"id"`
	Token          int64     `db:"fencing_token"`
	Attempt        int       `db:"attempt"`
	MaxAttempts    int       `db:"max_attempts"`
	InitialBackoff int64     `db:"initial_backoff_ms"`
	MaxBackoff     int64     `db:"max_backoff_ms"`
	Refund         bool      `db:"refund"`
	Companions     int       `db:"companions"`
	CrashRefunds   int       `db:"crash_refunds"`
}

// leaseGrace is the SQL condition, shared by the candidate query and the
// reap itself, that holds back a lapsed lease for one lease (its own
// length, lease_expires_at - heartbeat_at) after the reaper reached the
// database again ($2, NULL when it saw no outage). leaseRefund says the
// lease lapsed while the reaper could not see the database: after $3 (the
// last pass before the outage; NULL: no lower bound) and no later than $2.
// $4 (NULL: none) is the latest database time (clock_timestamp(), the
// moment the row is examined, after any lock wait) at which the reap may
// run: a reap that ran later stalled (an outage the reaper has not seen
// yet) and reaps nothing.
const (
	leaseGrace = `($2::timestamptz IS NULL OR now() >= $2::timestamptz + coalesce(t.lease_expires_at - t.heartbeat_at, interval '0'))
       AND ($4::timestamptz IS NULL OR clock_timestamp() <= $4::timestamptz)`
	leaseRefund = `($2::timestamptz IS NOT NULL AND t.lease_expires_at <= $2::timestamptz AND ($3::timestamptz IS NULL OR t.lease_expires_at > $3::timestamptz))`
)

// leaseLapsed holds for a RUNNING task run t whose lease has expired on
// the database clock, or that has no lease at all although it is a task
// (kind 'task': a restore or a hand edit left it so; migration 00022
// refuses new such writes, and held kinds run without a lease by design).
// Without the second half such a row was never reaped.
const leaseLapsed = `(t.lease_expires_at < now() OR (t.lease_expires_at IS NULL AND t.kind = 'task'))`

// CrashGiveBacksMax is K of the crash rule (see crashCompanions): a task
// gets its attempt back at most this many times for crashes of workers it
// was in flight on with other tasks; at the next such reap the attempt
// counts, so a task that keeps being reaped this way still ends.
const CrashGiveBacksMax = 3

// crashCompanions counts, for a RUNNING task run t whose lease lapsed,
// the other tasks of its worker that were in flight with it when the
// worker stopped renewing: those still RUNNING on that worker, whose lease
// was live at t's last renewal and that the worker claimed before t's
// lease lapsed (a claim after it is a later process under the same id, or
// a worker that is alive), and those reaped from that worker since t's
// last renewal (their reap's history row, crash_companions set, through
// task_events_crash_reaps). The last lease of a crash to lapse thus still
// counts the companions reaped before it. A task that was alone in flight
// (0) is the one that stopped its worker.
const crashCompanions = `(SELECT count(*) FROM (
    SELECT u.id FROM task_runs u
     WHERE u.state = 'RUNNING' AND u.lease_expires_at >= t.heartbeat_at AND u.worker_id = t.worker_id
       AND u.id <> t.id AND u.started_at < t.lease_expires_at
    UNION
    SELECT e.task_run_id FROM task_events e
     WHERE e.crash_companions IS NOT NULL AND e.worker_id = t.worker_id AND e.at >= t.heartbeat_at
       AND e.task_run_id <> t.id) c)`

const qExpiredLeases = `
SELECT t.id, t.fencing_token, t.attempt, t.max_attempts, t.initial_backoff_ms, t.max_backoff_ms,
       coalesce(` + leaseRefund + `, false) AS refund, ` + crashCompanions + ` AS companions, t.crash_refunds
  FROM task_runs t
 WHERE t.state = 'RUNNING' AND ` + leaseLapsed + ` AND ` + leaseGrace + `
 ORDER BY t.lease_expires_at NULLS FIRST
 LIMIT $1`

// crashGiveBack is the crash rule, for a reaped row t and its request u:
// the attempt is given back (max_attempts grows by one, crash_refunds
// counts it, the task becomes a suspect) when other tasks of its worker
// were in flight with it (u.companions, see crashCompanions), its handler
// did not run alone as a suspect in this attempt (alone_token: one that
// ran alone is the culprit), and it was given back fewer than $9
// (CrashGiveBacksMax) times before; a task RUNNING without a lease (a
// restore) was not in a crash. A lease that lapsed during the
// reaper's outage is refunded for that reason instead (u.refund), and
// neither counts nor suspects.
const crashGiveBack = `(NOT u.refund AND u.companions > 0 AND t.alone_token IS DISTINCT FROM t.fencing_token
                       AND t.crash_refunds < $9::int AND t.lease_expires_at IS NOT NULL)`

// reapCounts holds when the reaped attempt counts toward max_attempts.
const reapCounts = `(NOT u.refund AND NOT ` + crashGiveBack + `)`

// qReap is RUNNING -> RETRYING | DEAD for expired leases, in one statement
// guarded by state, fencing token, the (database-clock) expiry and the
// outage grace, bumping the token so the lost worker's later writes match
// nothing. A refunded reap (the lease lapsed during an outage the reaper
// saw) and a reap the crash rule gives the attempt back (crashGiveBack) do
// not use up the attempt (given_back compares crash_refunds with the
// value the candidate query read, u.refunds_seen: only a reap writes it,
// and a reap bumps the token this one is fenced by): max_attempts grows by one and the task goes
// RETRYING even on its last attempt. Every reaped task in flight with
// others of its worker becomes a suspect, and its history row records the
// count (crash_companions). A task it makes DEAD takes its PENDING
// descendants to UPSTREAM_FAILED (buryDownstream).
const qReap = `
WITH RECURSIVE reaped AS (
    UPDATE task_runs t
       SET state = CASE WHEN ` + reapCounts + ` AND t.attempt >= t.max_attempts THEN 'DEAD' ELSE 'RETRYING' END,
           max_attempts = CASE WHEN NOT ` + reapCounts + ` THEN t.max_attempts + 1 ELSE t.max_attempts END,
           crash_refunds = CASE WHEN ` + crashGiveBack + ` THEN t.crash_refunds + 1 ELSE t.crash_refunds END,
           suspect = t.suspect OR (NOT u.refund AND u.companions > 0),
           fencing_token = t.fencing_token + 1,
           lease_expires_at = NULL,
           next_attempt_at = CASE WHEN ` + reapCounts + ` AND t.attempt >= t.max_attempts THEN NULL
                                  ELSE now() + u.delay_ms * interval '1 millisecond' END,
           finished_at = CASE WHEN ` + reapCounts + ` AND t.attempt >= t.max_attempts THEN now() END,
           error = CASE WHEN u.refund
                        THEN 'lease expired during a database outage: worker ' || coalesce(t.worker_id, '?') ||
                             ' did not renew it within one lease after the database returned (attempt ' || t.attempt || ' not counted)'
                        WHEN t.lease_expires_at IS NULL
                        THEN 'RUNNING without a lease (a restore or a hand edit?): reaped as expired (attempt ' || t.attempt || ')'
                        WHEN ` + crashGiveBack + `
                        THEN 'lease expired: worker ' || coalesce(t.worker_id, '?') || ' stopped renewing it (attempt ' || t.attempt ||
                             ' given back: reaped with ' || u.companions || ' other tasks of worker ' || coalesce(t.worker_id, '?') ||
                             '; a crash suspect now, it runs alone)'
                        WHEN u.companions > 0 AND t.alone_token = t.fencing_token
                        THEN 'lease expired: worker ' || coalesce(t.worker_id, '?') || ' stopped renewing it while this task ran alone as a crash suspect (attempt ' || t.attempt || ' counted)'
                        WHEN u.companions > 0
                        THEN 'lease expired: worker ' || coalesce(t.worker_id, '?') || ' stopped renewing it with ' || u.companions ||
                             ' other tasks in flight (attempt ' || t.attempt || ' counted: given back ' || t.crash_refunds || ' times already)'
                        ELSE 'lease expired: worker ' || coalesce(t.worker_id, '?') || ' stopped renewing it (attempt ' || t.attempt || ')' END
      FROM unnest($1::uuid[], $5::bigint[], $6::bigint[], $7::bool[], $10::int[], $11::int[]) AS u(id, tok, delay_ms, refund, companions, refunds_seen)
     WHERE t.id = u.id AND t.state = 'RUNNING' AND t.fencing_token = u.tok AND ` + leaseLapsed + `
       AND ` + leaseGrace + ` AND (NOT u.refund OR ` + leaseRefund + `)
 RETURNING t.id, t.run_id, t.state, t.attempt, t.fencing_token, t.error, t.worker_id, u.refund, u.companions,
           t.crash_refunds > u.refunds_seen AS given_back
), ev AS (
    INSERT INTO task_events (task_run_id, run_id, from_state, to_state, attempt, fencing_token, worker_id, actor, reason, crash_companions)
    SELECT id, run_id, 'RUNNING', state, attempt, fencing_token, worker_id, $8, error, companions FROM reaped
), buried (id, actor) AS (
    SELECT id, $8::text FROM reaped WHERE state = 'DEAD'
), ` + buryDownstream + `
SELECT count(*) AS reaped, count(*) FILTER (WHERE refund) AS refunded, count(*) FILTER (WHERE state = 'DEAD') AS dead,
       count(*) FILTER (WHERE given_back) AS given_back,
       coalesce(string_agg(DISTINCT run_id::text, ','), '') AS runs FROM reaped`

// qLockRunsOfTasks locks the run rows of the tasks $1, in run id order.
const qLockRunsOfTasks = `
SELECT 1 FROM workflow_runs r
 WHERE r.id IN (SELECT t.run_id FROM task_runs t WHERE t.id = ANY ($1::uuid[]))
 ORDER BY r.id
   FOR UPDATE`

// Outage is what a reaper saw of its own loss of the database, on the
// database's clock: Since is the start of its last pass before the outage
// (zero: unknown), Until the first moment it reached the database again.
type Outage struct {
	Since, Until time.Time
}

// ReapRequest configures one Reap.
type ReapRequest struct {
	Limit   int // at most this many leases reaped
	Backoff BackoffFunc
	Actor   string // recorded in task history
	// Outage, when not nil, is the reaper's latest outage: a lease is then
	// reaped no earlier than Outage.Until plus its own length (one lease of
	// grace for the worker to renew once the database answers), and a
	// lease that lapsed during the outage (after Since, no later than
	// Until) is reaped without using up its attempt.
	Outage *Outage
	// NotAfter, when not zero, is a database time past which this Reap
	// reaps nothing: its statements ran so late that the database was
	// stalled or unreachable in between (an outage the caller will only
	// see at its next pass, and grant grace for then).
	NotAfter time.Time
}

// ReapResult says what one Reap did.
type ReapResult struct {
	Reaped   int // RUNNING -> RETRYING | DEAD
	Refunded int // of which reaped without using up the attempt (outage)
	Dead     int // of which made DEAD (their last attempt)
	// GivenBack counts the reaped whose attempt the crash rule gave back
	// (in flight with other tasks of a worker that stopped, not the
	// suspect that ran alone; see CrashGiveBacksMax): not used up, and
	// each is a suspect now.
	GivenBack int
	// Runs are the distinct ids of the runs reaped in (notified on
	// TasksChannel in the reap's transaction).
	Runs []uuid.UUID
}

// Reap routes up to req.Limit RUNNING tasks whose lease has expired (on
// the database clock), and whose outage grace (see ReapRequest.Outage) has
// passed, to RETRYING with a backoff, or to DEAD when their attempts are
// used up. A task renewed or finished meanwhile is left alone.
//
// The crash rule: a task reaped while other tasks of its worker were in
// flight with it (crashCompanions) cannot be told from the one that
// stopped the worker, so its attempt is given back (max_attempts + 1,
// history: "given back: reaped with N other tasks of worker W") and it
// becomes a suspect, which its next worker runs alone. Its attempt counts
// when it was alone in flight, when it was a suspect whose handler ran
// alone in this attempt, or once it was given back CrashGiveBacksMax
// times. A lease that lapsed during the reaper's own outage is refunded
// (ReapRequest.Outage) and not made a suspect. The errors are the
// database's, wrapped.
func (s *Store) Reap(ctx context.Context, req ReapRequest) (ReapResult, error) {
	if err := mustEdge(core.TaskRunning, core.TaskRetrying, core.TaskDead); err != nil {
		return ReapResult{}, err
	}
	if err := mustEdge(core.TaskPending, core.TaskUpstreamFailed); err != nil {
		return ReapResult{}, err
	}
	var until, since *time.Time
	if req.Outage != nil {
		until = &req.Outage.Until
		if !req.Outage.Since.IsZero() {
			since = &req.Outage.Since
		}
	}
	var notAfter *time.Time
	if !req.NotAfter.IsZero() {
		notAfter = &req.NotAfter
	}
	var rows []expiredLease
	if err := s.db.SelectContext(ctx, &rows, qExpiredLeases, req.Limit, until, since, notAfter); err != nil {
		return ReapResult{}, fmt.Errorf("find expired leases: %w", err)
	}
	if len(rows) == 0 {
		return ReapResult{}, nil
	}
	var out ReapResult
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		var err error
		out, err = reapRows(ctx, tx, rows, req, until, since, notAfter)
		return err
	})
	if err != nil {
		return ReapResult{}, err
	}
	return out, nil
}

// reapRows is the reap of the candidates rows in tx (qReap: each re-checked
// by state, token, expiry and grace, the window until/since/notAfter being
// req's): it locks the runs of the tasks it may bury, reaps, and notifies
// the schedulers of the runs reaped in.
func reapRows(ctx context.Context, tx *sqlx.Tx, rows []expiredLease, req ReapRequest, until, since, notAfter *time.Time) (ReapResult, error) {
	ids := make([]uuid.UUID, len(rows))
	toks := make([]int64, len(rows))
	delays := make([]int64, len(rows))
	refunds := make([]bool, len(rows))
	companions := make([]int32, len(rows))
	seen := make([]int32, len(rows))
	var dying []uuid.UUID
	for i, r := range rows {
		ids[i], toks[i], refunds[i] = r.ID, r.Token, r.Refund
		companions[i], seen[i] = int32(r.Companions), int32(r.CrashRefunds)
		// May die: the crash rule decides in the statement (it reads the
		// row's alone_token there), so a give-back is not known here and
		// the run is locked in case the attempt counts.
		if !r.Refund && r.Attempt >= r.MaxAttempts {
			dying = append(dying, r.ID)
		}
		p := core.RetryPolicy{MaxAttempts: r.MaxAttempts, InitialBackoff: time.Duration(r.InitialBackoff) * time.Millisecond, MaxBackoff: time.Duration(r.MaxBackoff) * time.Millisecond}
		delays[i] = req.Backoff(p, r.Attempt).Milliseconds()
	}
	var res struct {
		Reaped    int    `db:"reaped"`
		Refunded  int    `db:"refunded"`
		Dead      int    `db:"dead"`
		GivenBack int    `db:"given_back"`
		Runs      string `db:"runs"` // comma-separated ids of the runs reaped in
	}
	var out ReapResult
	if len(dying) > 0 {
		// A reap that buries a task buries its descendants too: lock
		// their runs first (in id order, so two reapers cannot deadlock),
		// as every writer of several task rows of a run does.
		if _, err := tx.ExecContext(ctx, qLockRunsOfTasks, uuidArray(dying)); err != nil {
			return ReapResult{}, fmt.Errorf("reap expired leases: lock runs: %w", err)
		}
	}
	if err := tx.GetContext(ctx, &res, qReap, uuidArray(ids), until, since, notAfter, toks, delays, refunds, req.Actor,
		CrashGiveBacksMax, companions, seen); err != nil {
		return ReapResult{}, fmt.Errorf("reap expired leases: %w", err)
	}
	runs, err := parseIDs(res.Runs)
	if err != nil {
		return ReapResult{}, fmt.Errorf("reap expired leases: %w", err)
	}
	out.Runs = runs
	out.Reaped, out.Refunded, out.Dead, out.GivenBack = res.Reaped, res.Refunded, res.Dead, res.GivenBack
	// The schedulers advance the runs reaped in (a DEAD task fails its
	// run; a RETRYING one is promoted when due by the sweep).
	if err := notifyAll(ctx, tx, runsNotices(runs)...); err != nil {
		return ReapResult{}, err
	}
	return out, nil
}
