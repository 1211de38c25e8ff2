package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
)

// Flow control's admission (issue 27; migration 00018 says what the
// columns hold). A task run with a concurrency key or a rate limit is made
// READY by whatever statement promotes it (the trigger for a plain root)
// with flow_wait set and no outbox row; Admit dispatches it when its key
// has room.

// flowWait is what a task run made READY waits for first: its concurrency
// slot, else its rate limit, else nothing (NULL: dispatched at once, as
// without flow control); one constant per alias the statements give the
// task run (t, c, p).
const (
	flowWaitT = `CASE WHEN t.concurrency_key IS NOT NULL THEN 'concurrency' WHEN t.rate_key IS NOT NULL THEN 'rate' END`
	flowWaitC = `CASE WHEN c.concurrency_key IS NOT NULL THEN 'concurrency' WHEN c.rate_key IS NOT NULL THEN 'rate' END`
	flowWaitP = `CASE WHEN p.concurrency_key IS NOT NULL THEN 'concurrency' WHEN p.rate_key IS NOT NULL THEN 'rate' END`
)

// rateWindow is the window a rate limit counts starts over, for the
// period per_ms: the period plus a guard of 1 % of it (at most 250 ms), so
// that handler starts, which follow their admission by the dispatch's
// latency, also keep to the limit while that latency varies by less than
// the guard. One constant per alias (l, f).
const (
	rateWindowL = `((l.per_ms + least(l.per_ms / 100, 250)) * interval '1 millisecond')`
	rateWindowF = `((f.per_ms + least(f.per_ms / 100, 250)) * interval '1 millisecond')`
)

// PriorityAging is how long a waiter waits to gain a priority level: the
// admission orders a key's waiters by their priority plus one level per
// PriorityAging waited (at most core.PriorityMax), then oldest first. So a
// priority-1 task waits at most three PriorityAgings behind a stream of
// priority-4 tasks before it competes with them as an equal, and then,
// being older, goes first: no priority starves another.
const PriorityAging = time.Minute

// priorityLevels are the levels the admission scans, one index probe
// each: the oldest waiters of each level are the candidates (within a
// level, an older waiter has aged at least as much as a newer one).
const priorityLevels = `1, 4`

// atLevel and levelOrder select a priority level's waiters of one key in
// the waiting index's order (task_runs_waiting_concurrency, _rate: key,
// priority DESC, ready_at). Written `t.priority = lv`, with the order
// ready_at alone, the level was a constant to the planner, so READY's
// own index (task_runs_ready: ready_at) gave the same order, and with
// statistics that say every waiter has one priority it chose that index,
// filtering: a level with no waiter walked every READY row (W1 with a
// concurrency key: 4 levels × 20,000 rows, 50 of a round's 62 ms, and the
// admission a quarter of the drain's throughput). The level as a range
// keeps priority in the order, which only the waiting index gives.
const (
	atLevel    = `t.priority >= lv AND t.priority <= lv`
	levelOrder = `t.priority DESC, t.ready_at`
)

// agedPriority is a candidate c's priority with its aging
// (PriorityAging: 60 s).
const agedPriority = `least(4, c.priority + floor(extract(epoch FROM now() - c.ready_at) / 60))`

// AdmitBatchMax bounds the task runs one round admits per key. A rate
// key's room can be its whole limit (up to core.MaxRateLimit, 10,000) over
// a backlog, and one statement admitting 10,000 ran about 800 ms while no
// worker had a task (issue 27's W1 with a rate limit: its first round); a
// concurrency key's free slots can be its whole limit (up to
// core.MaxConcurrencyLimit, 100,000). A round that admits the batch of a
// rate key leaves it with room, so the round's due time
// (AdmitResult.RateDue) is now; one that admits the batch of a
// concurrency key with slots left says so (AdmitResult.More). Either way
// the scheduler runs the next round at once: the first tasks go out after
// one batch.
const AdmitBatchMax = 1000

// AdmitKeysMax bounds the keys of each kind one Admit round serves; the
// keys past it are served by the next rounds (AdmitResult.Next).
const AdmitKeysMax = 1000

// qWaitingKeys finds, in key order after $1, up to $2 keys of each kind
// that task runs wait for (a loose scan of the waiting indexes: one probe
// per key, whatever the number of waiters), and records each key in
// flow_limits with the definition's limit of its first waiter (the highest
// priority, then the oldest: a key shared by definitions with different
// limits takes that one's; an operator's limit, operator_limit, wins over
// both). A waiting run's key takes its oldest waiter's.
const qWaitingKeys = `
WITH RECURSIVE ck AS (
    (SELECT t.concurrency_key AS key FROM task_runs t
      WHERE t.state = 'READY' AND t.flow_wait = 'concurrency' AND t.concurrency_key > $1::text
      ORDER BY t.concurrency_key LIMIT 1)
    UNION ALL
    SELECT (SELECT t.concurrency_key FROM task_runs t
             WHERE t.state = 'READY' AND t.flow_wait = 'concurrency' AND t.concurrency_key > ck.key
             ORDER BY t.concurrency_key LIMIT 1)
      FROM ck WHERE ck.key IS NOT NULL
), rk AS (
    (SELECT t.rate_key AS key FROM task_runs t
      WHERE t.state = 'READY' AND t.flow_wait = 'rate' AND t.rate_key > $1::text
      ORDER BY t.rate_key LIMIT 1)
    UNION ALL
    SELECT (SELECT t.rate_key FROM task_runs t
             WHERE t.state = 'READY' AND t.flow_wait = 'rate' AND t.rate_key > rk.key
             ORDER BY t.rate_key LIMIT 1)
      FROM rk WHERE rk.key IS NOT NULL
), uk AS (
    (SELECT r.concurrency_key AS key FROM workflow_runs r
      WHERE r.run_wait AND r.finished_at IS NULL AND r.concurrency_key > $1::text
      ORDER BY r.concurrency_key LIMIT 1)
    UNION ALL
    SELECT (SELECT r.concurrency_key FROM workflow_runs r
             WHERE r.run_wait AND r.finished_at IS NULL AND r.concurrency_key > uk.key
             ORDER BY r.concurrency_key LIMIT 1)
      FROM uk WHERE uk.key IS NOT NULL
), keys AS (
    SELECT 'run' AS kind, u.key, d.lim, NULL::bigint AS per_ms
      FROM (SELECT key FROM uk WHERE key IS NOT NULL LIMIT $2) u CROSS JOIN LATERAL (
               SELECT r.concurrency_limit AS lim FROM workflow_runs r
                WHERE r.run_wait AND r.finished_at IS NULL AND r.concurrency_key = u.key
                ORDER BY r.created_at LIMIT 1) d
    UNION ALL
    SELECT 'concurrency' AS kind, c.key, d.lim, NULL::bigint AS per_ms
      FROM (SELECT key FROM ck WHERE key IS NOT NULL LIMIT $2) c CROSS JOIN LATERAL (
               SELECT t.concurrency_limit AS lim FROM task_runs t
                WHERE t.state = 'READY' AND t.flow_wait = 'concurrency' AND t.concurrency_key = c.key
                ORDER BY t.priority DESC, t.ready_at LIMIT 1) d
    UNION ALL
    SELECT 'rate', r.key, d.lim, d.per_ms
      FROM (SELECT key FROM rk WHERE key IS NOT NULL LIMIT $2) r CROSS JOIN LATERAL (
               SELECT t.rate_limit AS lim, t.rate_per_ms AS per_ms FROM task_runs t
                WHERE t.state = 'READY' AND t.flow_wait = 'rate' AND t.rate_key = r.key
                ORDER BY t.priority DESC, t.ready_at LIMIT 1) d
), rec AS (
    INSERT INTO flow_limits AS f (kind, key, lim, per_ms)
    SELECT kind, key, lim, per_ms FROM keys ORDER BY kind, key
    ON CONFLICT (kind, key) DO UPDATE SET lim = EXCLUDED.lim, per_ms = EXCLUDED.per_ms, updated_at = now()
     WHERE (f.lim, f.per_ms) IS DISTINCT FROM (EXCLUDED.lim, EXCLUDED.per_ms)
)
SELECT kind, key FROM keys ORDER BY kind, key`

// qLockFlowKeys locks the flow_limits rows of the keys ($1 kinds, $2
// keys) in (kind, key) order, every admitter's order, and returns their
// effective limits. It is a statement of its own so that the admission's
// statements, which count slots and starts, take their snapshots after
// the lock was granted: they see every admission committed before.
const qLockFlowKeys = `
SELECT f.kind, f.key, coalesce(f.operator_limit, f.lim) AS lim, coalesce(f.per_ms, 0) AS per_ms
  FROM flow_limits f JOIN unnest($1::text[], $2::text[]) AS k(kind, key) ON f.kind = k.kind AND f.key = k.key
 ORDER BY f.kind, f.key
   FOR UPDATE OF f`

// notPausedSQL holds for a task run t whose workflow is not paused. The
// admission passes over the waiters of a paused workflow: their claims
// would be refused until the resume, and a slot or a start given to them
// would be held through the pause, starving the key's other workflows. A
// pause committed after an admission's snapshot leaves what it admitted
// dispatched (held by the claim's pause check, re-sent by the resume), as
// it does any task dispatched before the pause.
//
// The uncorrelated first test is evaluated once per statement (an
// InitPlan), as notPaused's is: with no pause at all, no waiter pays for
// the look-up of its run.
const notPausedSQL = `(NOT EXISTS (SELECT 1 FROM workflow_pauses) OR NOT ` + runPausedSQL + `)`

// runPausedSQL holds for a task run t whose workflow is paused: its
// run's workflow is among the pauses (primary-key look-ups). The
// admission passes such waiters over (notPausedSQL); run show and task
// show say so (TaskRun.FlowPaused).
const runPausedSQL = `EXISTS (SELECT 1 FROM workflow_runs pr JOIN workflow_pauses pp ON pp.workflow_name = pr.workflow_name
                              WHERE pr.id = t.run_id)`

// qAdmitConcurrency admits, key by key ($1 keys, $2 their limits), the
// oldest waiters of each key while the key has free slots: the
// limit less the task runs holding one (kind 'task', READY or RUNNING, not
// waiting for one: the partial index task_runs_slots), $3 at most a key
// (AdmitBatchMax). An admitted task run with a rate
// limit goes on to wait for it; the others get their outbox row and their
// admitted_at here (migration 00019: no history row, which cost an insert
// and a foreign-key check per admission). A waiter another transaction
// holds (a cancel) is skipped. It returns what it dispatched, what went on
// to its rate limit, how many slot holders it counted (the round's
// cost: AdmitResult.Counted), and whether a key admitted $3 and had
// slots left (AdmitResult.More).
//
// Its plan must not depend on statistics, which lag a backlog inserted
// since the last ANALYZE (TestAnAdmissionRoundReadsOnlyTheWaitersItAdmits
// holds it to this): slots is computed once
// (MATERIALIZED: inlined, its count ran once per waiter picked); each
// priority level's waiters are read in the waiting index's own order
// (key, priority, ready_at: no sort of every waiter of the level); and the
// UPDATE finds the rows picked by their ctids, the row versions pick
// locked, given as one array (ctid = ANY: a Tid Scan whatever the
// estimates; a partial index estimated empty was scanned whole, once per
// waiter, and with statistics that know the backlog the picked rows were
// hashed against a scan of every waiter). With 20,000 waiters and no
// ANALYZE since, a round that admitted 1,000 took 11 s, and 100 took
// 0.3 s; now 3 ms. With statistics, a round that admitted 67 of 19,000
// took 9 ms, 6 of them in that scan; now 3 ms.
const qAdmitConcurrency = `
WITH lim AS (
    SELECT * FROM unnest($1::text[], $2::int[]) AS l(key, lim)
), slots AS MATERIALIZED (
    SELECT lim.key, lim.lim,
           (SELECT count(*) FROM task_runs h
             WHERE h.concurrency_key = lim.key AND h.kind = 'task' AND h.state IN ('READY', 'RUNNING')
               AND h.flow_wait IS DISTINCT FROM 'concurrency') AS held
      FROM lim
), pick AS MATERIALIZED (
    SELECT w.id, w.ctid, slots.key, slots.lim, slots.held FROM slots CROSS JOIN LATERAL (
        SELECT c.id, c.ctid FROM generate_series(` + priorityLevels + `) lv CROSS JOIN LATERAL (
                 SELECT t.id, t.ctid, t.ready_at, t.priority FROM task_runs t
                  WHERE t.state = 'READY' AND t.flow_wait = 'concurrency' AND t.concurrency_key = slots.key AND ` + atLevel + `
                    AND ` + notPausedSQL + `
                  ORDER BY ` + levelOrder + `
                  LIMIT least(greatest(slots.lim - slots.held, 0), $3::int)
                    FOR UPDATE OF t SKIP LOCKED) c
         ORDER BY ` + agedPriority + ` DESC, c.ready_at, c.id
         LIMIT least(greatest(slots.lim - slots.held, 0), $3::int)) w
), adm AS (
    UPDATE task_runs t SET flow_wait = CASE WHEN t.rate_key IS NOT NULL THEN 'rate' END,
                           admitted_at = CASE WHEN t.rate_key IS NULL THEN now() END
      FROM pick
     WHERE t.ctid = ANY (ARRAY(SELECT p.ctid FROM pick p)) AND t.ctid = pick.ctid AND t.id = pick.id
       AND t.state = 'READY' AND t.flow_wait = 'concurrency'
 RETURNING t.id, t.run_id, t.task_name, t.handler, t.fencing_token, t.flow_wait
), ob AS (
    INSERT INTO outbox (task_run_id, fencing_token_snapshot, payload)
    SELECT id, fencing_token, ` + dispatchPayloadSQL + `
      FROM adm WHERE flow_wait IS NULL
    ON CONFLICT (task_run_id, fencing_token_snapshot, dispatch) DO NOTHING
)
SELECT count(*) FILTER (WHERE flow_wait IS NULL) AS dispatched, count(*) FILTER (WHERE flow_wait = 'rate') AS to_rate,
       (SELECT coalesce(sum(held), 0) FROM slots) AS counted,
       EXISTS (SELECT 1 FROM slots WHERE slots.lim - slots.held > $3::int
                  AND (SELECT count(*) FROM pick WHERE pick.key = slots.key) = $3::int) AS more
  FROM adm`

// qAdmitRate admits, key by key ($1 keys, $2 limits, $3 periods in ms),
// the oldest waiters of each rate key while fewer than its
// limit started within its window (rateWindowL) on the database clock,
// $4 at most (AdmitBatchMax),
// records their starts (now(), the last `limit` kept, oldest first) and
// writes their outbox rows. Its plan is shaped as qAdmitConcurrency's.
const qAdmitRate = `
WITH lim AS (
    SELECT * FROM unnest($1::text[], $2::int[], $3::bigint[]) AS l(key, lim, per_ms)
), room AS MATERIALIZED (
    SELECT l.key, l.lim, l.per_ms,
           least(greatest(l.lim - (SELECT count(*) FROM unnest(f.starts) s WHERE s > now() - ` + rateWindowL + `), 0), $4::int) AS free
      FROM lim l JOIN flow_limits f ON f.kind = 'rate' AND f.key = l.key
), pick AS MATERIALIZED (
    SELECT w.id, w.ctid FROM room CROSS JOIN LATERAL (
        SELECT c.id, c.ctid FROM generate_series(` + priorityLevels + `) lv CROSS JOIN LATERAL (
                 SELECT t.id, t.ctid, t.ready_at, t.priority FROM task_runs t
                  WHERE t.state = 'READY' AND t.flow_wait = 'rate' AND t.rate_key = room.key AND ` + atLevel + `
                    AND ` + notPausedSQL + `
                  ORDER BY ` + levelOrder + `
                  LIMIT room.free
                    FOR UPDATE OF t SKIP LOCKED) c
         ORDER BY ` + agedPriority + ` DESC, c.ready_at, c.id
         LIMIT room.free) w
), adm AS (
    UPDATE task_runs t SET flow_wait = NULL, admitted_at = now()
      FROM pick
     WHERE t.ctid = ANY (ARRAY(SELECT p.ctid FROM pick p)) AND t.ctid = pick.ctid AND t.id = pick.id
       AND t.state = 'READY' AND t.flow_wait = 'rate'
 RETURNING t.id, t.run_id, t.task_name, t.handler, t.fencing_token, t.attempt, t.rate_key
), n AS (
    SELECT a.rate_key AS key, count(*) AS n FROM adm a GROUP BY a.rate_key
), upd AS (
    UPDATE flow_limits f
       SET starts = ARRAY(SELECT s FROM (SELECT s FROM unnest(f.starts || array_fill(now(), ARRAY[n.n::int])) s
                                          WHERE s > now() - ((room.per_ms + least(room.per_ms / 100, 250)) * interval '1 millisecond')
                                          ORDER BY s DESC LIMIT room.lim) x ORDER BY s),
           updated_at = now()
      FROM n JOIN room ON room.key = n.key
     WHERE f.kind = 'rate' AND f.key = n.key
), ob AS (
    INSERT INTO outbox (task_run_id, fencing_token_snapshot, payload)
    SELECT id, fencing_token, ` + dispatchPayloadSQL + ` FROM adm
    ON CONFLICT (task_run_id, fencing_token_snapshot, dispatch) DO NOTHING
)
SELECT count(*) FROM adm`

// qRateDue says in how many seconds (database clock; 0 or less: now) the
// first rate key that task runs wait for has room again; NULL when none
// waits.
const qRateDue = `
SELECT extract(epoch FROM min(
           CASE WHEN cardinality(f.starts) < coalesce(f.operator_limit, f.lim) THEN now()
                ELSE f.starts[cardinality(f.starts) - coalesce(f.operator_limit, f.lim) + 1] + ` + rateWindowF + ` END)
       - now())::float8
  FROM flow_limits f
 WHERE f.kind = 'rate'
   AND EXISTS (SELECT 1 FROM task_runs t WHERE t.state = 'READY' AND t.flow_wait = 'rate' AND t.rate_key = f.key)`

// AdmitResult says what one Admit round did.
type AdmitResult struct {
	Keys       int // keys that task runs waited for (of both kinds)
	Dispatched int // task runs admitted and given their outbox rows
	Slots      int // task runs given a slot of their concurrency key
	Starts     int // task runs given a start within their rate limit
	ToRate     int // of Slots, those that now wait for their rate limit
	// Runs counts the runs given a slot of their run-level key (their
	// tasks start at their next pass: they are named to the schedulers);
	// RunsRefused the waiting runs cancelled by strategy cancel-newest;
	// RunsDisplaced the running runs whose cancellation strategy
	// cancel-in-progress requested (their workers told on CancelChannel).
	Runs, RunsRefused, RunsDisplaced int
	// RateDue, when RateDueOK, is how long until a rate key that task runs
	// wait for has room again (0: now): the scheduler runs Admit then.
	RateDue   time.Duration
	RateDueOK bool
	// More says a concurrency key admitted AdmitBatchMax task runs and had
	// free slots left (its waiters may have more): the scheduler runs the
	// next round at once, without spacing it (see Counted).
	More bool
	// Counted is how many slot holders of its concurrency keys the round
	// counted to find their free slots: a round's cost grows with it, not
	// with what it admits (a key at its limit of 1,000 is counted whole to
	// admit the few whose slots came back). The scheduler spaces its
	// rounds by it (scheduler.AdmitSpacingPerCounted).
	Counted int
	// Next is the key after which the next round should start: "" when
	// this round served every key, else the last key served (more than
	// AdmitKeysMax keys of a kind wait).
	Next string
}

// Admit runs one admission round over the keys that task runs wait for,
// after key after ("": from the first), AdmitKeysMax of each kind at most:
// it records the keys (qWaitingKeys), then in one transaction locks them
// (qLockFlowKeys: concurrent admitters, such as two schedulers, queue per
// key and never admit past a limit), admits what each concurrency key
// has slots for and each rate key has room for, and wakes the publishers
// when it wrote outbox rows. It returns what it did and when a rate key
// has room next. A task run given its slot that also has a rate limit is
// admitted by the rate limit in a later round (ToRate > 0: run one at
// once).
func (s *Store) Admit(ctx context.Context, after, actor string) (AdmitResult, error) {
	var keys []struct {
		Kind string `db:"kind"`
		Key  string `db:"key"`
	}
	if err := sqlx.SelectContext(ctx, s.db, &keys, qWaitingKeys, after, AdmitKeysMax); err != nil {
		return AdmitResult{}, fmt.Errorf("admit: waiting keys: %w", err)
	}
	res := AdmitResult{Keys: len(keys)}
	if len(keys) == 0 {
		return res, nil
	}
	var nConc, nRate int
	kinds, names := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		kinds[i], names[i] = k.Kind, k.Key
		if k.Kind == "rate" {
			nRate++
		} else {
			nConc++
		}
	}
	if nConc == AdmitKeysMax || nRate == AdmitKeysMax {
		for _, n := range names {
			res.Next = max(res.Next, n)
		}
	}
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		var locked []struct {
			Kind  string `db:"kind"`
			Key   string `db:"key"`
			Lim   int64  `db:"lim"`
			PerMs int64  `db:"per_ms"`
		}
		if err := tx.SelectContext(ctx, &locked, qLockFlowKeys, kinds, names); err != nil {
			return fmt.Errorf("admit: lock keys: %w", err)
		}
		var ck, rk, uk []string
		var cl, rl, rp, ul []int64
		for _, l := range locked {
			switch l.Kind {
			case "rate":
				rk, rl, rp = append(rk, l.Key), append(rl, l.Lim), append(rp, l.PerMs)
			case "run":
				uk, ul = append(uk, l.Key), append(ul, l.Lim)
			default:
				ck, cl = append(ck, l.Key), append(cl, l.Lim)
			}
		}
		notices, err := admitRuns(ctx, tx, uk, ul, actor, &res)
		if err != nil {
			return err
		}
		batch := s.admitBatch
		if batch <= 0 {
			batch = AdmitBatchMax
		}
		if err := admitTasks(ctx, tx, ck, cl, rk, rl, rp, batch, &res); err != nil {
			return err
		}
		if s.midAdmit != nil {
			s.midAdmit()
		}
		if res.Dispatched > 0 {
			notices = append(notices, outboxNotice())
		}
		return notifyAll(ctx, tx, notices...)
	})
	if err != nil {
		return AdmitResult{}, err
	}
	if nRate > 0 || res.ToRate > 0 {
		if err := s.rateDue(ctx, &res); err != nil {
			return AdmitResult{}, err
		}
	}
	return res, nil
}

// admitTasks runs, in tx, qAdmitConcurrency over the concurrency keys ck
// (limits cl) and qAdmitRate over the rate keys rk (limits rl, periods rp
// in ms), each admitting at most batch a key, and counts what they did in
// res.
func admitTasks(ctx context.Context, tx *sqlx.Tx, ck []string, cl []int64, rk []string, rl, rp []int64, batch int, res *AdmitResult) error {
	if len(ck) > 0 {
		var c struct {
			Dispatched int  `db:"dispatched"`
			ToRate     int  `db:"to_rate"`
			Counted    int  `db:"counted"`
			More       bool `db:"more"`
		}
		if err := tx.GetContext(ctx, &c, qAdmitConcurrency, ck, cl, batch); err != nil {
			return fmt.Errorf("admit: concurrency keys: %w", err)
		}
		res.Dispatched, res.ToRate, res.Slots = c.Dispatched, c.ToRate, c.Dispatched+c.ToRate
		res.Counted += c.Counted
		res.More = c.More
	}
	if len(rk) > 0 {
		var n int
		if err := tx.GetContext(ctx, &n, qAdmitRate, rk, rl, rp, batch); err != nil {
			return fmt.Errorf("admit: rate limits: %w", err)
		}
		res.Dispatched += n
		res.Starts = n
	}
	return nil
}

// rateDue sets res.RateDue (qRateDue) when a rate key has waiters.
func (s *Store) rateDue(ctx context.Context, res *AdmitResult) error {
	var due sql.NullFloat64
	if err := s.db.GetContext(ctx, &due, qRateDue); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("admit: next rate due: %w", err)
	}
	if due.Valid {
		res.RateDueOK = true
		res.RateDue = max(time.Duration(due.Float64*float64(time.Second)), 0)
	}
	return nil
}
