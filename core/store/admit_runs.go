package store

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
)

// Run-level concurrency's admission (a workflow's `concurrency`), one part
// of Admit's transaction: see admit.go.

// qAdmitRuns admits, key by key ($1 keys, $2 their limits; $3
// AdmitRunsPerKey), the oldest
// runs waiting for their run-level slot while the key has free slots (the
// limit less its open runs that are not waiting: workflow_runs_slots), and
// applies the strategy of each waiter it cannot admit: queue leaves it
// waiting; cancel-newest cancels it (a cancel request with the reason);
// cancel-in-progress requests the cancellation of as many of the key's
// oldest running runs as there are such waiters, less those already being
// cancelled (the waiters start once those runs have ended). It returns each
// run it changed and what it did ("admitted", "refused", "displaced").
// The admitting and refusing UPDATEs reach their runs by the ctids picked
// (ctid = ANY of an array: a Tid Scan), as qAdmitConcurrency does: joined
// by ctid alone, statistics that know a backlog of waiters had them
// hashed against a scan of workflow_runs, every run kept
// (TestARunAdmissionUpdatesOnlyTheRunsItPicked).
const qAdmitRuns = `
WITH lim AS (
    SELECT * FROM unnest($1::text[], $2::int[]) AS l(key, lim)
), slots AS MATERIALIZED (
    SELECT lim.key, lim.lim,
           (SELECT count(*) FROM workflow_runs h
             WHERE h.concurrency_key = lim.key AND h.finished_at IS NULL AND NOT h.run_wait) AS held,
           (SELECT count(*) FROM workflow_runs h
             WHERE h.concurrency_key = lim.key AND h.finished_at IS NULL AND NOT h.run_wait
               AND h.cancel_requested_at IS NOT NULL) AS leaving
      FROM lim
), locked AS MATERIALIZED (
    SELECT w.id, w.ctid, w.created_at, w.strategy, slots.key, slots.lim, slots.held, slots.leaving FROM slots CROSS JOIN LATERAL (
        SELECT r.id, r.ctid, r.created_at, r.concurrency_strategy AS strategy FROM workflow_runs r
         WHERE r.run_wait AND r.finished_at IS NULL AND r.concurrency_key = slots.key AND r.cancel_requested_at IS NULL
         ORDER BY r.created_at
         LIMIT $3
           FOR UPDATE SKIP LOCKED) w
), ranked AS (
    SELECT l.*, row_number() OVER (PARTITION BY l.key ORDER BY l.created_at, l.id) AS rn,
           greatest(l.lim - l.held, 0) AS free
      FROM locked l
), admitted AS (
    UPDATE workflow_runs r SET run_wait = false
      FROM ranked k
     WHERE r.ctid = ANY (ARRAY(SELECT x.ctid FROM ranked x WHERE x.rn <= x.free)) AND r.ctid = k.ctid AND r.id = k.id AND k.rn <= k.free
 RETURNING r.id
), refused AS (
    UPDATE workflow_runs r
       SET cancel_requested_at = now(),
           cancel_reason = 'concurrency ' || k.key || ' is full (' || greatest(k.held, k.lim) || '/' || k.lim || '): strategy cancel-newest'
      FROM ranked k
     WHERE r.ctid = ANY (ARRAY(SELECT x.ctid FROM ranked x WHERE x.rn > x.free AND x.strategy = 'cancel-newest'))
       AND r.ctid = k.ctid AND r.id = k.id AND k.rn > k.free AND k.strategy = 'cancel-newest'
 RETURNING r.id
), excess AS (
    SELECT k.key, count(*) - max(k.leaving) AS n FROM ranked k
     WHERE k.rn > k.free AND k.strategy = 'cancel-in-progress'
     GROUP BY k.key
), displaced AS (
    UPDATE workflow_runs r
       SET cancel_requested_at = now(),
           cancel_reason = 'concurrency ' || e.key || ': a newer run of the key replaces it (strategy cancel-in-progress)'
      FROM excess e CROSS JOIN LATERAL (
               SELECT h.id FROM workflow_runs h
                WHERE h.concurrency_key = e.key AND h.finished_at IS NULL AND NOT h.run_wait AND h.cancel_requested_at IS NULL
                ORDER BY h.created_at, h.id
                LIMIT greatest(e.n, 0)
                  FOR UPDATE SKIP LOCKED) h
     WHERE r.id = h.id
 RETURNING r.id
)
SELECT 'admitted' AS what, id FROM admitted
UNION ALL SELECT 'refused', id FROM refused
UNION ALL SELECT 'displaced', id FROM displaced`

// AdmitRunsPerKey bounds the waiting runs of one key an admission round
// looks at (the oldest first).
const AdmitRunsPerKey = 1000

// admitRuns runs qAdmitRuns over the run keys uk (limits ul) in tx,
// counts what it did in res, cancels the unstarted tasks (PENDING, READY,
// RETRYING) of the runs whose cancellation it requested, as `run cancel`
// does and in the same transaction (qCancelTasks, audited as actor), and
// returns the notices to send: the runs it changed to the schedulers, the
// cancelled ones to their workers.
func admitRuns(ctx context.Context, tx *sqlx.Tx, uk []string, ul []int64, actor string, res *AdmitResult) ([]notice, error) {
	if len(uk) == 0 {
		return nil, nil
	}
	var changed []struct {
		What string    `db:"what"`
		ID   uuid.UUID `db:"id"`
	}
	if err := tx.SelectContext(ctx, &changed, qAdmitRuns, uk, ul, AdmitRunsPerKey); err != nil {
		return nil, fmt.Errorf("admit: run concurrency keys: %w", err)
	}
	var woken, refused, displaced []uuid.UUID
	for _, c := range changed {
		woken = append(woken, c.ID)
		switch c.What {
		case "admitted":
			res.Runs++
		case "refused":
			res.RunsRefused++
			refused = append(refused, c.ID)
		default:
			res.RunsDisplaced++
			displaced = append(displaced, c.ID)
		}
	}
	for _, c := range []struct {
		runs []uuid.UUID
		why  string
	}{
		{refused, "run cancelled: its concurrency key is full (strategy cancel-newest)"},
		{displaced, "run cancelled: a newer run of the key replaces it (strategy cancel-in-progress)"},
	} {
		if len(c.runs) == 0 {
			continue
		}
		if err := tx.GetContext(ctx, new(int), qCancelTasks, uuidArray(c.runs), actor, c.why); err != nil {
			return nil, fmt.Errorf("admit: cancel the tasks of the runs cancelled by their key's strategy: %w", err)
		}
	}
	notices := runsNotices(woken)
	if cancelled := append(refused, displaced...); len(cancelled) > 0 {
		notices = append(notices, cancelNotice(cancelled))
	}
	return notices, nil
}
