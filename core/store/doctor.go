package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// FindingKind names what `ffctl doctor` found: a state no daemon should
// leave behind.
type FindingKind string

// The findings of Diagnose. The repairable ones are fixed by Repair; the
// others are left to a person (Finding.Repairable false).
const (
	// FindingStrandedReady: a READY task with no pending dispatch and none
	// confirmed recently, past the scheduler's redispatch (repair: a fresh
	// outbox row with its current fencing token).
	FindingStrandedReady FindingKind = "stranded_ready"
	// FindingLeaseExpired: a RUNNING task whose lease expired more than two
	// sweeps ago, which the reaper should have taken (repair: reaped).
	FindingLeaseExpired FindingKind = "lease_expired"
	// FindingNoLease: a RUNNING task (kind task) with no lease at all: a
	// restore or a hand edit (repair: reaped as an expired lease).
	FindingNoLease FindingKind = "running_without_lease"
	// FindingUnsettledRun: a run not settled although nothing of it is
	// active, two full sweeps after its last task ended (repair: settled
	// by the scheduler's own pass).
	FindingUnsettledRun FindingKind = "unsettled_run"
	// FindingFinishedOutbox: an unpublished outbox row whose task has
	// ended (repair: the row is marked dropped, kept, never sent).
	FindingFinishedOutbox FindingKind = "finished_task_outbox"
	// FindingKeyOwnerEnded: an idempotency key not completed whose owner
	// has ended (or is gone) and will not run again. Left to a person.
	FindingKeyOwnerEnded FindingKind = "idempotency_key_owner_ended"
	// FindingQuarantined: an outbox row the broker refused permanently,
	// set aside. Left to a person (ffctl outbox retry|drop).
	FindingQuarantined FindingKind = "quarantined_outbox"
	// FindingSchemaDrift: the live schema differs from the one the
	// migrations produce. Left to a person.
	FindingSchemaDrift FindingKind = "schema_drift"
	// FindingClockOffset: a live daemon's clock is off the database's by
	// more than the threshold. Left to a person (NTP).
	FindingClockOffset FindingKind = "clock_offset"
)

// Repairable reports whether Repair fixes findings of kind k.
func (k FindingKind) Repairable() bool {
	switch k {
	case FindingStrandedReady, FindingLeaseExpired, FindingNoLease, FindingUnsettledRun, FindingFinishedOutbox:
		return true
	}
	return false
}

// Finding is one thing Diagnose found, with the ids it concerns (those
// that do not apply are nil or empty) and a one-line explanation.
type Finding struct {
	Kind      FindingKind `db:"kind" json:"kind"`
	RunID     *uuid.UUID  `db:"run_id" json:"run_id,omitempty"`
	TaskRunID *uuid.UUID  `db:"task_run_id" json:"task_run_id,omitempty"`
	OutboxID  *int64      `db:"outbox_id" json:"outbox_id,omitempty"`
	// Key is the idempotency key of FindingKeyOwnerEnded.
	Key *string `db:"key" json:"idempotency_key,omitempty"`
	// WorkerID is the daemon of FindingClockOffset, the lease holder of
	// FindingLeaseExpired.
	WorkerID *string `db:"worker_id" json:"worker_id,omitempty"`
	// Token is the task's fencing token as found: a repair acts only if it
	// is still the same (FindingStrandedReady, FindingLeaseExpired,
	// FindingNoLease), or the outbox row's token snapshot.
	Token *int64 `db:"fencing_token" json:"fencing_token,omitempty"`
	// Detail says in one line what is wrong, with its measures.
	Detail     string `db:"detail" json:"detail"`
	Repairable bool   `db:"-" json:"repairable"`
}

// DiagnoseConfig holds the thresholds of Diagnose. Every duration must be
// positive.
type DiagnoseConfig struct {
	// SweepInterval is the scheduler's sweep period: a lease expired more
	// than two of them ago is reported.
	SweepInterval time.Duration
	// FullSweepInterval is the period of the scheduler's full pass: a run
	// left unsettled two of them after its last task ended is reported.
	FullSweepInterval time.Duration
	// RedispatchAfter is the scheduler's redispatch delay: a READY task
	// with no dispatch pending nor confirmed within RedispatchAfter plus
	// two sweeps is reported, and so is an unpublished outbox row of an
	// ended task that old.
	RedispatchAfter time.Duration
	// ClockOffsetMax is the largest daemon clock offset not reported.
	ClockOffsetMax time.Duration
	// LiveWithin: a daemon whose heartbeat is older than this is not live
	// and its clock is not judged.
	LiveWithin time.Duration
	// Limit bounds the findings of each check (at least 1).
	Limit int
}

// ErrBadDiagnoseConfig wraps the error of a DiagnoseConfig Diagnose
// refuses (nothing is asked of the database).
var ErrBadDiagnoseConfig = errors.New("bad doctor configuration")

func (c DiagnoseConfig) validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"sweep interval", c.SweepInterval}, {"full sweep interval", c.FullSweepInterval},
		{"redispatch delay", c.RedispatchAfter}, {"clock offset threshold", c.ClockOffsetMax},
		{"live window", c.LiveWithin},
	} {
		if d.v <= 0 {
			return fmt.Errorf("%w: the %s must be positive, got %s", ErrBadDiagnoseConfig, d.name, d.v)
		}
	}
	if c.Limit < 1 {
		return fmt.Errorf("%w: the limit must be at least 1, got %d", ErrBadDiagnoseConfig, c.Limit)
	}
	return nil
}

// recent is how long a READY task may go without a dispatch in flight
// before doctor reports it: the redispatch's delay plus two sweeps (the
// redispatch runs once a sweep).
func (c DiagnoseConfig) recent() time.Duration { return c.RedispatchAfter + 2*c.SweepInterval }

// Each check below returns (kind, run_id, task_run_id, outbox_id, key,
// worker_id, fencing_token, detail), at most $6 rows. Their parameters:
// $1 recent (ms), $2 two sweeps (ms), $3 two full sweeps (ms), $4 the
// clock offset threshold (ms), $5 the live window (ms), $6 the limit.
const (
	qStrandedReady = `
(SELECT 'stranded_ready' AS kind, t.run_id, t.id AS task_run_id, NULL::bigint AS outbox_id, NULL::text AS key,
        NULL::text AS worker_id, t.fencing_token,
        'READY for ' || floor(extract(epoch FROM now() - t.ready_at)) || 's (attempt ' || t.attempt + 1 ||
        ') with no dispatch pending nor confirmed in the last ' || round($1::bigint / 1000.0) || 's: nothing will start it' AS detail
   FROM task_runs t JOIN workflow_runs r ON r.id = t.run_id
  WHERE ` + readyUndispatched + `
  ORDER BY t.ready_at LIMIT $6)`
	qLeaseExpired = `
(SELECT 'lease_expired', t.run_id, t.id, NULL::bigint, NULL::text, t.worker_id, t.fencing_token,
        'RUNNING on worker ' || coalesce(t.worker_id, '?') || ' (attempt ' || t.attempt || ') with a lease that expired ' ||
        floor(extract(epoch FROM now() - t.lease_expires_at)) || 's ago, more than two sweeps: no reaper took it'
   FROM task_runs t
  WHERE t.state = 'RUNNING' AND t.lease_expires_at < now() - $2::bigint * interval '1 millisecond'
  ORDER BY t.lease_expires_at LIMIT $6)`
	qNoLease = `
(SELECT 'running_without_lease', t.run_id, t.id, NULL::bigint, NULL::text, t.worker_id, t.fencing_token,
        'RUNNING with no lease (attempt ' || t.attempt || ', worker ' || coalesce(t.worker_id, '?') || '): a restore or a hand edit'
   FROM task_runs t
  WHERE t.state = 'RUNNING' AND t.lease_expires_at IS NULL AND t.kind = 'task'
  ORDER BY t.id LIMIT $6)`
	qUnsettledRun = `
(SELECT 'unsettled_run', r.id, NULL::uuid, NULL::bigint, NULL::text, NULL::text, NULL::bigint,
        'run ' || r.state || ' not settled although no task of it is PENDING, READY, RUNNING or RETRYING, ' ||
        floor(extract(epoch FROM now() - e.ended)) || 's after its last task ended'
   FROM workflow_runs r
  CROSS JOIN LATERAL (SELECT greatest(r.created_at, max(t.finished_at)) AS ended FROM task_runs t WHERE t.run_id = r.id) e
  WHERE r.finished_at IS NULL AND e.ended < now() - $3::bigint * interval '1 millisecond'
    AND NOT EXISTS (SELECT 1 FROM task_runs t WHERE t.run_id = r.id AND ` + taskStillActive + `)
  ORDER BY r.created_at LIMIT $6)`
	qFinishedOutbox = `
(SELECT 'finished_task_outbox', t.run_id, t.id, o.id, NULL::text, NULL::text, o.fencing_token_snapshot,
        'outbox row unpublished ' || floor(extract(epoch FROM now() - o.created_at)) || 's after it was written; its task is ' ||
        t.state || ' (token ' || t.fencing_token || '), a claim with it would lose'
   FROM outbox o JOIN task_runs t ON t.id = o.task_run_id JOIN workflow_runs r ON r.id = t.run_id
  WHERE ` + outboxOfEndedTask + ` AND o.created_at < now() - $1::bigint * interval '1 millisecond'
    AND NOT EXISTS (SELECT 1 FROM workflow_pauses p WHERE p.workflow_name = r.workflow_name)
  ORDER BY o.id LIMIT $6)`
	qKeyOwnerEnded = `
(SELECT 'idempotency_key_owner_ended', t.run_id, k.task_run_id, NULL::bigint, k.key, NULL::text, k.fencing_token,
        'idempotency key not completed, owned by a task run that is ' || coalesce(t.state, 'gone') ||
        ' and will not run again: the next task run with the key takes it over and runs its handler'
   FROM idempotency_keys k LEFT JOIN task_runs t ON t.id = k.task_run_id
  WHERE k.completed_at IS NULL AND (t.id IS NULL OR t.state NOT IN ('PENDING', 'READY', 'RUNNING', 'RETRYING'))
  ORDER BY k.created_at LIMIT $6)`
	qQuarantinedOutbox = `
(SELECT 'quarantined_outbox', t.run_id, o.task_run_id, o.id, NULL::text, NULL::text, o.fencing_token_snapshot,
        'quarantined ' || floor(extract(epoch FROM now() - o.quarantined_at)) || 's ago: ' || coalesce(o.quarantine_reason, '?')
   FROM outbox o LEFT JOIN task_runs t ON t.id = o.task_run_id
  WHERE o.published_at IS NULL AND o.quarantined_at IS NOT NULL AND o.dropped_at IS NULL
  ORDER BY o.id LIMIT $6)`
	qClockOffset = `
(SELECT 'clock_offset', NULL::uuid, NULL::uuid, NULL::bigint, NULL::text, w.id, NULL::bigint,
        w.role || ' daemon on ' || w.hostname || ' (pid ' || w.pid || '): its clock is ' ||
        round(abs(extract(epoch FROM w.clock_at - w.last_seen_at))::numeric, 3) || 's ' ||
        CASE WHEN w.clock_at > w.last_seen_at THEN 'ahead of' ELSE 'behind' END ||
        ' the database''s at its heartbeat ' || floor(extract(epoch FROM now() - w.last_seen_at)) || 's ago (threshold ' ||
        round($4::bigint / 1000.0, 3) || 's)'
   FROM workers w
  WHERE w.clock_at IS NOT NULL AND w.last_seen_at > now() - $5::bigint * interval '1 millisecond'
    AND abs(extract(epoch FROM w.clock_at - w.last_seen_at) * 1000) > $4::bigint
  ORDER BY w.id LIMIT $6)`
)

// taskStillActive holds for a task run t that keeps its run open: one the
// scheduler or a worker will still move (PENDING: waiting for upstream
// tasks, its run's admission or a paused workflow; READY; RUNNING, a
// handler's or one the scheduler holds: a sleep, an event wait, a child
// run, a for_each; RETRYING).
const taskStillActive = `t.state IN ('PENDING', 'READY', 'RUNNING', 'RETRYING')`

// outboxOfEndedTask holds for an outbox row o, neither published nor
// quarantined, whose task run t has ended.
const outboxOfEndedTask = `o.published_at IS NULL AND o.quarantined_at IS NULL
    AND t.state IN ('SUCCEEDED', 'DEAD', 'CANCELLED', 'SKIPPED', 'UPSTREAM_FAILED')`

// qDiagnose runs the row-level checks in one snapshot.
const qDiagnose = qStrandedReady + " UNION ALL " + qLeaseExpired + " UNION ALL " + qNoLease +
	" UNION ALL " + qUnsettledRun + " UNION ALL " + qFinishedOutbox + " UNION ALL " + qKeyOwnerEnded +
	" UNION ALL " + qQuarantinedOutbox + " UNION ALL " + qClockOffset

// Diagnose checks the database for what no daemon should leave behind
// (the FindingKind constants) under cfg's thresholds, and compares the
// schema with the migrations' (SchemaFingerprintGolden) when the database
// is at this binary's newest migration; at another version it reports the
// difference of versions as the drift. Each check returns at most
// cfg.Limit findings, oldest first; the schema's come last. Errors: a wrapped
// ErrBadDiagnoseConfig (nothing read), or the database's, wrapped.
func (s *Store) Diagnose(ctx context.Context, cfg DiagnoseConfig) ([]Finding, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var out []Finding
	if err := s.db.SelectContext(ctx, &out, qDiagnose, cfg.recent().Milliseconds(), (2 * cfg.SweepInterval).Milliseconds(),
		(2 * cfg.FullSweepInterval).Milliseconds(), cfg.ClockOffsetMax.Milliseconds(), cfg.LiveWithin.Milliseconds(), cfg.Limit); err != nil {
		return nil, fmt.Errorf("diagnose: %w", err)
	}
	drift, err := s.schemaDrift(ctx, cfg.Limit)
	if err != nil {
		return nil, err
	}
	out = append(out, drift...)
	for i := range out {
		out[i].Repairable = out[i].Kind.Repairable()
	}
	return out, nil
}

// schemaDrift returns one FindingSchemaDrift per line the live schema
// lacks or has beyond the migrations' (at most limit), or one naming the
// version when the database is not at this binary's newest migration.
func (s *Store) schemaDrift(ctx context.Context, limit int) ([]Finding, error) {
	w, err := EmbeddedSchemaWindow()
	if err != nil {
		return nil, fmt.Errorf("diagnose schema: %w", err)
	}
	db, err := s.SchemaState(ctx)
	if err != nil {
		return nil, fmt.Errorf("diagnose schema: %w", err)
	}
	if db.Version != w.Latest {
		return []Finding{{Kind: FindingSchemaDrift, Detail: fmt.Sprintf(
			"the database is at schema version %d, this ffctl's migrations end at %d: its schema is not compared (use the ffctl of version %d, or run `ffctl migrate`)",
			db.Version, w.Latest, db.Version)}}, nil
	}
	live, err := s.SchemaFingerprint(ctx)
	if err != nil {
		return nil, err
	}
	missing, unexpected := SchemaDrift(live, SchemaFingerprintGolden())
	var out []Finding
	for _, l := range missing {
		out = append(out, Finding{Kind: FindingSchemaDrift, Detail: "missing from the database (the migrations create it): " + l})
	}
	for _, l := range unexpected {
		out = append(out, Finding{Kind: FindingSchemaDrift, Detail: "in the database, not made by the migrations: " + l})
	}
	return out[:min(len(out), limit)], nil
}
