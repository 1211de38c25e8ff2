package main

import (
	"context"
	"fmt"
	"time"
)

// riverSystem is the River column: River riverVersion on the same private
// PostgreSQL, its client inside the driver process.
type riverSystem struct {
	env  *benchEnv
	seq  int
	w1N  map[string]int
	base string // migrated: template of every River database
	hist string // base plus the W5 history
}

func (s *riverSystem) key() string { return sysRiver }

func (s *riverSystem) info() systemInfo {
	return systemInfo{Label: "River", Version: riverVersion, Notes: []string{
		"client in the driver process (pgx pool of 40), a no-op worker; " + varRiverBench +
			": MaxWorkers 2000, FetchCooldown 2 ms, FetchPollInterval 20 ms; " + varRiverDefaults +
			": River's default fetch settings (100 ms, 1 s), MaxWorkers 2000; " + varRiverMW100 + " (W1): the same with MaxWorkers 100",
		"W1 backlog inserted with InsertMany (batches of 10,000); W2/W5 one InsertTx per transaction from 8 closed loops; " +
			"W2o one InsertTx per transaction on the open loop's schedule (32 triggerers, a pool of their own), the client at " + varRiverDefaults +
			"; W6 InsertTx in a transaction that also inserts an order (serial, and 8 loops) and InsertMany in batches of 500, no client working the jobs",
		"River's insert → completion committed compares with FlowForge's trigger → SUCCEEDED committed; finalized_at is River's own stamp, taken before its batch completer commits",
	}}
}

func (s *riverSystem) setup(ctx context.Context) error {
	s.base, s.hist = "river_base", "river_hist"
	if err := s.env.pg.createDB(ctx, s.base, ""); err != nil {
		return err
	}
	if err := migrateRiver(ctx, s.env.pg.URL(s.base, "postgres")); err != nil {
		return err
	}
	if err := execIn(ctx, s.env, s.base, `CREATE TABLE bench_fan (run int PRIMARY KEY, remaining int NOT NULL)`); err != nil {
		return err
	}
	if !s.env.plan.wants(sysRiver, "W5") {
		return nil
	}
	return s.buildHistory(ctx, s.env.plan.History)
}

// buildHistory makes hist: base with n completed no-op jobs spread over the
// last historySpan (inside River's 24 h retention, so its cleaner leaves
// them alone during the run, as FlowForge keeps its history).
func (s *riverSystem) buildHistory(ctx context.Context, n int) error {
	start := time.Now()
	if err := s.env.pg.createDB(ctx, s.hist, s.base); err != nil {
		return err
	}
	step := historySpan.Seconds() / float64(n)
	q := fmt.Sprintf(`INSERT INTO river_job (args, attempt, attempted_at, attempted_by, created_at, finalized_at, kind, max_attempts, queue, state, scheduled_at)
SELECT '{}', 1, t + interval '3 ms', '{bench}', t, t + interval '5 ms', 'noop', 25, 'default', 'completed', t
  FROM (SELECT now() - make_interval(secs => %g * ($1::int - i + 1)) AS t, i FROM generate_series(1, $1::int) AS i) g`, step)
	pool, err := s.env.pg.pool(ctx, s.hist)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, q, n); err != nil {
		return fmt.Errorf("river history: %w", err)
	}
	pool.Close()
	for _, q := range []string{"VACUUM ANALYZE", "CHECKPOINT"} {
		if err := execIn(ctx, s.env, s.hist, q); err != nil {
			return err
		}
	}
	s.env.log("  River: history of %d completed jobs built in %.0f s", n, time.Since(start).Seconds())
	return nil
}

func (s *riverSystem) jobs() []job {
	p := s.env.plan
	s.w1N = map[string]int{varRiverBench: p.W1N[sysRiver], varRiverDefaults: p.W1N[sysRiver], varRiverMW100: p.W1N[w1NRiverMW100]}
	var out []job
	for _, v := range []string{varRiverBench, varRiverDefaults, varRiverMW100} {
		out = append(out, job{System: sysRiver, Workload: "W1", Variant: v, run: func(ctx context.Context, _ int) (sample, error) {
			n := s.w1N[v]
			smp, err := p.burnDownSized(&n, func(n int) (sample, error) { return s.burnDown(ctx, v, n) })
			s.w1N[v] = n
			return smp, err
		}})
	}
	return append(append(out,
		job{System: sysRiver, Workload: "W2", Variant: varRiverBench, run: func(ctx context.Context, _ int) (sample, error) {
			return s.continuous(ctx, s.base, p.Continuous)
		}},
		job{System: sysRiver, Workload: "W3", Variant: varRiverBench, run: func(ctx context.Context, _ int) (sample, error) {
			return s.chain(ctx, p.ChainRuns)
		}},
		job{System: sysRiver, Workload: "W4", Variant: varRiverBench, run: func(ctx context.Context, _ int) (sample, error) {
			return s.fanOut(ctx)
		}},
		job{System: sysRiver, Workload: "W5", Variant: varRiverBench, run: func(ctx context.Context, _ int) (sample, error) {
			return s.continuous(ctx, s.hist, p.Continuous)
		}},
	), append(s.openJobs(), s.triggerJobs()...)...)
}
