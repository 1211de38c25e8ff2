package store

import (
	"context"
	"fmt"
	"time"
)

// Worker is a daemon process as last reported by its heartbeat.
type Worker struct {
	ID         string    `db:"id" json:"id"`
	Role       string    `db:"role" json:"role"`
	Hostname   string    `db:"hostname" json:"hostname"`
	PID        int       `db:"pid" json:"pid"`
	StartedAt  time.Time `db:"started_at" json:"started_at"`
	LastSeenAt time.Time `db:"last_seen_at" json:"last_seen_at"`
	// SecondsSinceSeen is measured on the database clock.
	SecondsSinceSeen float64 `db:"seen_seconds_ago" json:"seconds_since_seen"`
	// InFlight counts RUNNING tasks this process holds leases for.
	InFlight int `db:"in_flight" json:"in_flight"`
}

// TouchWorker records that a daemon process is alive (upsert, database
// clock).
func (s *Store) TouchWorker(ctx context.Context, id, role, hostname string, pid int) error {
	_, err := s.db.ExecContext(ctx, `
INSERT INTO workers (id, role, hostname, pid) VALUES ($1, $2, $3, $4)
ON CONFLICT (id) DO UPDATE SET last_seen_at = now(), role = EXCLUDED.role`, id, role, hostname, pid)
	if err != nil {
		return fmt.Errorf("record worker %s: %w", id, err)
	}
	return nil
}

// ListWorkers returns processes seen within the last `within`, most
// recently seen first, at most 200.
func (s *Store) ListWorkers(ctx context.Context, within time.Duration) ([]Worker, error) {
	var out []Worker
	err := s.db.SelectContext(ctx, &out, `
SELECT w.id, w.role, w.hostname, w.pid, w.started_at, w.last_seen_at,
       extract(epoch FROM now() - w.last_seen_at)::float8 AS seen_seconds_ago,
       (SELECT count(*) FROM task_runs t WHERE t.state = 'RUNNING' AND t.worker_id = w.id) AS in_flight
  FROM workers w WHERE w.last_seen_at > now() - $1::bigint * interval '1 millisecond'
 ORDER BY w.last_seen_at DESC LIMIT 200`, within.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	return out, nil
}
