package store

import (
	"context"
	"encoding/json"
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
	// Handlers is the handler set a worker process registers, sorted;
	// empty for other roles.
	Handlers StringList `db:"handlers" json:"handlers"`
	// Queue is the dispatch queue a worker process consumes; nil for other
	// roles.
	Queue *string `db:"queue" json:"queue"`
	// BrokerConnected reports whether a worker process was consuming from
	// the broker at its last heartbeat; nil for other roles.
	BrokerConnected *bool `db:"broker_connected" json:"broker_connected"`
	// HealthAddr is the host:port the process's health server listens on
	// (/health/live, /health/ready, /metrics); nil when it has none.
	HealthAddr *string `db:"health_addr" json:"health_addr"`
}

// Presence is what a daemon process reports about itself every few
// seconds. Handlers, Queue and BrokerConnected are for worker processes
// (zero values are stored as NULL).
type Presence struct {
	ID, Role, Hostname string
	PID                int
	Handlers           []string
	Queue              string
	BrokerConnected    *bool
	// HealthAddr is the bound address of the health server ("" for none).
	HealthAddr string
	// ClockAt is the process's own clock when it sent this heartbeat
	// (zero: unknown, stored as NULL). It is stored beside last_seen_at
	// (the database's now()) for `ffctl doctor`'s clock-offset check and
	// compared with nothing else: FlowForge runs on the database's clock.
	ClockAt time.Time
}

// clockAt is ClockAt as the heartbeat statements take it (nil: unknown).
func (p Presence) clockAt() *time.Time {
	if p.ClockAt.IsZero() {
		return nil
	}
	return &p.ClockAt
}

// TouchWorker records that a daemon process is alive (upsert, database
// clock). It is RecordPresence without the worker fields.
func (s *Store) TouchWorker(ctx context.Context, id, role, hostname string, pid int) error {
	return s.RecordPresence(ctx, Presence{ID: id, Role: role, Hostname: hostname, PID: pid})
}

// RecordPresence upserts the process's row in workers (last_seen_at on the
// database clock) with its handler set, queue and broker connection,
// whoever holds the id: for tools and tests. A daemon claims its id
// (ClaimWorkerID) and heartbeats through RenewWorkerID instead, so that two
// live processes never share one row.
func (s *Store) RecordPresence(ctx context.Context, p Presence) error {
	handlers, err := handlersJSON(p.Handlers)
	if err != nil {
		return fmt.Errorf("record worker %s: %w", p.ID, err)
	}
	var queue, health *string
	if p.Queue != "" {
		queue = &p.Queue
	}
	if p.HealthAddr != "" {
		health = &p.HealthAddr
	}
	_, err = s.db.ExecContext(ctx, `
INSERT INTO workers (id, role, hostname, pid, handlers, queue, broker_connected, health_addr, clock_at) VALUES ($1, $2, $3, $4,
        CASE WHEN $5::jsonb IS NOT NULL THEN ARRAY(SELECT jsonb_array_elements_text($5::jsonb)) END, $6, $7, $8, $9)
ON CONFLICT (id) DO UPDATE SET last_seen_at = now(), role = EXCLUDED.role,
       handlers = EXCLUDED.handlers, queue = EXCLUDED.queue, broker_connected = EXCLUDED.broker_connected,
       health_addr = EXCLUDED.health_addr, clock_at = EXCLUDED.clock_at`,
		p.ID, p.Role, p.Hostname, p.PID, handlers, queue, p.BrokerConnected, health, p.clockAt())
	if err != nil {
		return fmt.Errorf("record worker %s: %w", p.ID, err)
	}
	return nil
}

// handlersJSON is a handler set as the JSON array the workers statements
// take (nil for none).
func handlersJSON(hs []string) (*string, error) {
	if hs == nil {
		return nil, nil
	}
	b, err := json.Marshal(hs)
	if err != nil {
		return nil, err
	}
	h := string(b)
	return &h, nil
}

// ListWorkers returns processes seen within the last `within`, most
// recently seen first, at most 200.
func (s *Store) ListWorkers(ctx context.Context, within time.Duration) ([]Worker, error) {
	var out []Worker
	err := s.db.SelectContext(ctx, &out, `
SELECT w.id, w.role, w.hostname, w.pid, w.started_at, w.last_seen_at,
       extract(epoch FROM now() - w.last_seen_at)::float8 AS seen_seconds_ago,
       (SELECT count(*) FROM task_runs t WHERE t.state = 'RUNNING' AND t.worker_id = w.id) AS in_flight,
       to_jsonb(w.handlers) AS handlers, w.queue, w.broker_connected, w.health_addr
  FROM workers w WHERE w.last_seen_at > now() - $1::bigint * interval '1 millisecond'
 ORDER BY w.last_seen_at DESC LIMIT 200`, within.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	return out, nil
}

// LiveHandlers returns the handler sets of worker processes seen within
// the last `within` (database clock), keyed by handler name, each with the
// sorted queues whose workers register it; workers is how many worker
// processes were seen. A process that has claimed its id but not yet
// reported its handler set (handlers NULL: between the claim at start and
// its first heartbeat) counts as not seen, so that an apply in that window
// is not refused for a handler set nobody has reported.
func (s *Store) LiveHandlers(ctx context.Context, within time.Duration) (handlers map[string][]string, workers int, err error) {
	// One statement, so one snapshot: the handler sets and the count of
	// workers must describe the same moment. Read in two statements, a
	// worker that reported its handlers between them was counted without
	// its handlers, and apply refused every handler ("registered by none
	// of the 1 workers seen").
	var rows []struct {
		Workers int        `db:"workers"`
		Handler *string    `db:"handler"`
		Queues  StringList `db:"queues"`
	}
	err = s.db.SelectContext(ctx, &rows, `
WITH live AS (
    SELECT w.handlers, w.queue FROM workers w
     WHERE w.role IN ('worker', 'all') AND w.handlers IS NOT NULL AND w.last_seen_at > now() - $1::bigint * interval '1 millisecond'
)
SELECT (SELECT count(*) FROM live)::int AS workers, h AS handler,
       to_jsonb(array_agg(DISTINCT coalesce(l.queue, ''))) AS queues
  FROM live l LEFT JOIN LATERAL unnest(l.handlers) h ON true
 GROUP BY h`, within.Milliseconds())
	if err != nil {
		return nil, 0, fmt.Errorf("list live handlers: %w", err)
	}
	handlers = map[string][]string{}
	for _, r := range rows {
		workers = r.Workers
		if r.Handler != nil {
			handlers[*r.Handler] = r.Queues
		}
	}
	return handlers, workers, nil
}
