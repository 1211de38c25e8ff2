package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// A process id (the workers row's key) is held by one live process at a
// time. ClaimWorkerID takes it in one statement when it is free (no row) or
// its holder's heartbeat is older than the lease; the claim's started_at
// (database clock, microseconds) is the instance token: every later
// heartbeat (RenewWorkerID) and the release (ReleaseWorkerID) match it, so
// a process whose id another process took over notices at its next
// heartbeat. A takeover writes started_at = now() of a statement that saw
// the holder's last_seen_at older than the lease, so it is later than every
// started_at the row had: no two instances of an id share a token.

// WorkerClaim is the outcome of ClaimWorkerID: Since set when the id was
// claimed, Holder set when another live process holds it.
type WorkerClaim struct {
	// Since is the claimed row's started_at: the instance token of the
	// process's heartbeats and release. Zero when the id is held.
	Since time.Time
	// Holder is the row of the process holding the id, as it last
	// reported itself; nil when the id was claimed.
	Holder *Worker
}

// qClaimWorkerID inserts the row, or takes over one whose heartbeat is
// older than the lease ($6, milliseconds): a concurrent claim waits for the
// row lock and re-checks the WHERE on the row the winner wrote, which is
// fresh, so it returns nothing. The worker fields are cleared: the new
// holder's first heartbeat reports its own.
const qClaimWorkerID = `
INSERT INTO workers (id, role, hostname, pid, health_addr, clock_at) VALUES ($1, $2, $3, $4, $5, $7)
ON CONFLICT (id) DO UPDATE SET role = EXCLUDED.role, hostname = EXCLUDED.hostname, pid = EXCLUDED.pid,
       started_at = now(), last_seen_at = now(), handlers = NULL, queue = NULL, broker_connected = NULL,
       health_addr = EXCLUDED.health_addr, clock_at = EXCLUDED.clock_at
 WHERE workers.last_seen_at < now() - $6::bigint * interval '1 millisecond'
RETURNING started_at`

// ClaimWorkerID takes the id p.ID for the calling process when no row has
// it or its row's last heartbeat (last_seen_at) is more than lease old on
// the database clock (its holder is taken for dead), recording p (role,
// hostname, pid, health address; the worker fields are the heartbeat's).
// Of concurrent claims of one id exactly one wins. When a live process
// holds the id, it returns that process's row in Holder and writes
// nothing. Errors: the database's, wrapped.
func (s *Store) ClaimWorkerID(ctx context.Context, p Presence, lease time.Duration) (WorkerClaim, error) {
	var health *string
	if p.HealthAddr != "" {
		health = &p.HealthAddr
	}
	// A holder that releases the id between the claim and the read of its
	// row leaves nothing to read: claim again (bounded, in case releases
	// and claims keep crossing).
	for range 3 {
		var since time.Time
		err := s.db.QueryRowContext(ctx, qClaimWorkerID, p.ID, p.Role, p.Hostname, p.PID, health, lease.Milliseconds(), p.clockAt()).Scan(&since)
		if err == nil {
			return WorkerClaim{Since: since}, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return WorkerClaim{}, fmt.Errorf("claim worker id %s: %w", p.ID, err)
		}
		holder, err := s.workerByID(ctx, p.ID)
		if err != nil {
			return WorkerClaim{}, fmt.Errorf("claim worker id %s: %w", p.ID, err)
		}
		if holder != nil {
			return WorkerClaim{Holder: holder}, nil
		}
	}
	return WorkerClaim{}, fmt.Errorf("claim worker id %s: the row kept vanishing between the claim and its read", p.ID)
}

// workerByID reads one workers row (nil when there is none).
func (s *Store) workerByID(ctx context.Context, id string) (*Worker, error) {
	var w Worker
	err := s.db.GetContext(ctx, &w, `
SELECT w.id, w.role, w.hostname, w.pid, w.started_at, w.last_seen_at,
       extract(epoch FROM now() - w.last_seen_at)::float8 AS seen_seconds_ago,
       (SELECT count(*) FROM task_runs t WHERE t.state = 'RUNNING' AND t.worker_id = w.id) AS in_flight,
       to_jsonb(w.handlers) AS handlers, w.queue, w.broker_connected, w.health_addr
  FROM workers w WHERE w.id = $1`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &w, nil
}

// qRenewWorkerID is the heartbeat of the instance whose claim wrote
// started_at = $9.
const qRenewWorkerID = `
UPDATE workers SET last_seen_at = now(), role = $2, hostname = $3, pid = $4,
       handlers = CASE WHEN $5::jsonb IS NOT NULL THEN ARRAY(SELECT jsonb_array_elements_text($5::jsonb)) END,
       queue = $6, broker_connected = $7, health_addr = $8, clock_at = $10
 WHERE id = $1 AND started_at = $9`

// RenewWorkerID is the presence heartbeat of the process whose claim
// (ClaimWorkerID) returned since: it records p and moves last_seen_at to
// the database's now(). It reports false, writing nothing, when the row is
// no longer that claim's: another process took the id over (after this
// one's heartbeat lapsed), or the row was deleted. Errors: the database's.
func (s *Store) RenewWorkerID(ctx context.Context, p Presence, since time.Time) (bool, error) {
	handlers, err := handlersJSON(p.Handlers)
	if err != nil {
		return false, fmt.Errorf("renew worker id %s: %w", p.ID, err)
	}
	var queue, health *string
	if p.Queue != "" {
		queue = &p.Queue
	}
	if p.HealthAddr != "" {
		health = &p.HealthAddr
	}
	res, err := s.db.ExecContext(ctx, qRenewWorkerID, p.ID, p.Role, p.Hostname, p.PID, handlers, queue, p.BrokerConnected, health, since, p.clockAt())
	if err != nil {
		return false, fmt.Errorf("renew worker id %s: %w", p.ID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("renew worker id %s: %w", p.ID, err)
	}
	return n == 1, nil
}

// ReleaseWorkerID deletes the row of the claim that returned since, so
// that the id is free at once (a process that stops gracefully and is
// started again need not wait out its lease). A row another process took
// over is left alone. Errors: the database's.
func (s *Store) ReleaseWorkerID(ctx context.Context, id string, since time.Time) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM workers WHERE id = $1 AND started_at = $2`, id, since); err != nil {
		return fmt.Errorf("release worker id %s: %w", id, err)
	}
	return nil
}
