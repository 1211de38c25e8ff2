package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// riverVersion is the River release in scripts/bench/go.mod.
const riverVersion = "v0.51.2"

// noopArgs is the River job of W1, W2 and W5: a worker that does nothing.
type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// riverConfig is a client configuration: "benchmark settings" (River's own
// benchmark's: MaxWorkers 2000, FetchCooldown 2 ms, FetchPollInterval
// 20 ms), "defaults" (River's default fetch settings, FetchCooldown
// 100 ms and FetchPollInterval 1 s; MaxWorkers, which has no default,
// stays 2000) or varRiverMW100 (the default fetch settings with
// MaxWorkers 100, a setting River's documentation uses).
func riverConfig(variant string, workers *river.Workers) *river.Config {
	maxWorkers := 2000
	if variant == varRiverMW100 {
		maxWorkers = 100
	}
	c := &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
		Workers: workers,
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if variant == varRiverBench {
		c.FetchCooldown, c.FetchPollInterval = 2*time.Millisecond, 20*time.Millisecond
	}
	return c
}

// riverDB is a River database: a pool as role postgres, and a client that
// only inserts.
type riverDB struct {
	name   string
	pool   *pgxpool.Pool
	insert *river.Client[pgx.Tx]
}

func (s *riverSystem) openDB(ctx context.Context, template string) (*riverDB, error) {
	s.seq++
	name := fmt.Sprintf("river_%d", s.seq)
	if err := s.env.pg.createDB(ctx, name, template); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(s.env.pg.URL(name, "postgres"))
	if err != nil {
		return nil, fmt.Errorf("river pool: %w", err)
	}
	cfg.MaxConns = 40
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("river pool: %w", err)
	}
	ins, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("river insert client: %w", err)
	}
	return &riverDB{name: name, pool: pool, insert: ins}, nil
}

func (d *riverDB) close(ctx context.Context, env *benchEnv) {
	d.pool.Close()
	_ = env.pg.dropDB(context.WithoutCancel(ctx), d.name)
}

// runningClient is a started River client with a feed of completions.
type runningClient struct {
	client *river.Client[pgx.Tx]
	events <-chan *river.Event
	cancel func()
}

// startClient starts a working client on d with the variant's settings.
func startClient(ctx context.Context, d *riverDB, variant string, workers *river.Workers, feed int) (*runningClient, error) {
	c, err := river.NewClient(riverpgxv5.New(d.pool), riverConfig(variant, workers))
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	events, cancel := c.SubscribeConfig(&river.SubscribeConfig{ChanSize: max(feed, 1000), Kinds: []river.EventKind{river.EventKindJobCompleted}})
	if err := c.Start(ctx); err != nil {
		cancel()
		return nil, fmt.Errorf("river start: %w", err)
	}
	return &runningClient{client: c, events: events, cancel: cancel}, nil
}

// stop stops the client, letting its completer write what it holds.
func (r *runningClient) stop(ctx context.Context) error {
	defer r.cancel()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := r.client.Stop(sctx); err != nil {
		return fmt.Errorf("river stop: %w", err)
	}
	return nil
}

// waitSettled waits until no job of d is left to run (polling every
// 100 ms), then checks every job completed.
func (d *riverDB) waitSettled(ctx context.Context, timeout time.Duration) error {
	err := pollEvery(100*time.Millisecond, timeout, func() (bool, error) {
		var open int
		err := d.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state IN ('available', 'running', 'retryable', 'scheduled', 'pending')`).Scan(&open)
		return open == 0, err
	})
	if err != nil {
		return fmt.Errorf("river: waiting for the jobs: %w", err)
	}
	var bad int
	if err := d.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state <> 'completed'`).Scan(&bad); err != nil {
		return fmt.Errorf("river: %w", err)
	}
	if bad > 0 {
		return fmt.Errorf("river: %d jobs did not complete", bad)
	}
	return nil
}

// jobTimes returns, for jobs of kind created at or after since whose
// completion committed before until (zero: any time), insert → completion
// committed and insert → finalized_at (ms), and the latest commit.
func (d *riverDB) jobTimes(ctx context.Context, kind string, since, until time.Time) (committed, stamped []float64, last time.Time, err error) {
	rows, err := d.pool.Query(ctx, `
SELECT extract(epoch FROM pg_xact_commit_timestamp(xmin) - created_at) * 1000,
       extract(epoch FROM finalized_at - created_at) * 1000, pg_xact_commit_timestamp(xmin)
  FROM river_job WHERE kind = $1 AND created_at >= $2 AND state = 'completed'
   AND ($3::timestamptz IS NULL OR pg_xact_commit_timestamp(xmin) < $3)`, kind, since, nullTime(until))
	if err != nil {
		return nil, nil, last, fmt.Errorf("river job times: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var c, s float64
		var at time.Time
		if err := rows.Scan(&c, &s, &at); err != nil {
			return nil, nil, last, fmt.Errorf("river job times: %w", err)
		}
		committed, stamped = append(committed, c), append(stamped, s)
		if at.After(last) {
			last = at
		}
	}
	return committed, stamped, last, rows.Err()
}

// migrateRiver runs River's migrations on database url.
func migrateRiver(ctx context.Context, url string) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return fmt.Errorf("river migrate: %w", err)
	}
	defer pool.Close()
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return fmt.Errorf("river migrate: %w", err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrate: %w", err)
	}
	return nil
}

// doneSignal is a one-shot completion notice from a worker to the driver.
type doneSignal struct {
	mu sync.Mutex
	ch chan struct{}
}

func (s *doneSignal) reset() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ch = make(chan struct{})
	return s.ch
}

func (s *doneSignal) fire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}
