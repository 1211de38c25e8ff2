package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

func noopWorkers() *river.Workers {
	w := river.NewWorkers()
	river.AddWorker(w, noopWorker{})
	return w
}

// burnDown is River's W1: n jobs inserted with InsertMany before the client
// starts; the clock runs from starting the client to the last completion's
// commit, awaited through the client's completion feed.
func (s *riverSystem) burnDown(ctx context.Context, variant string, n int) (sample, error) {
	smp := sample{}
	d, err := s.openDB(ctx, s.base)
	if err != nil {
		return smp, err
	}
	defer d.close(ctx, s.env)
	params := make([]river.InsertManyParams, 0, 10000)
	for done := 0; done < n; done += len(params) {
		params = params[:0]
		for range min(10000, n-done) {
			params = append(params, river.InsertManyParams{Args: noopArgs{}})
		}
		if _, err := d.insert.InsertMany(ctx, params); err != nil {
			return smp, fmt.Errorf("river InsertMany: %w", err)
		}
	}
	start := time.Now()
	rc, err := startClient(ctx, d, variant, noopWorkers(), n)
	if err != nil {
		return smp, err
	}
	err = awaitEvents(ctx, rc.events, n, 10*time.Minute)
	if serr := rc.stop(ctx); err == nil {
		err = serr
	}
	if err == nil {
		err = d.waitSettled(ctx, time.Minute)
	}
	if err != nil {
		return smp, err
	}
	_, _, last, err := d.jobTimes(ctx, "noop", time.Time{}, time.Time{})
	if err != nil {
		return smp, err
	}
	secs := last.Sub(start).Seconds()
	smp.Metrics = map[string]float64{metricN: float64(n), metricDrainS: secs, metricTasksPerS: float64(n) / secs}
	return smp, nil
}

// awaitEvents reads n completion events, or fails after timeout.
func awaitEvents(ctx context.Context, events <-chan *river.Event, n int, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for got := 0; got < n; got++ {
		select {
		case <-events:
		case <-t.C:
			return fmt.Errorf("river: %d of %d completions after %v", got, n, timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// continuous is River's W2 (template base) and W5 (template hist): 8
// closed loops, each inserting one job per transaction for dur; figures of
// the jobs inserted and completed inside the window, as FlowForge's.
func (s *riverSystem) continuous(ctx context.Context, template string, dur time.Duration) (sample, error) {
	smp := sample{}
	d, err := s.openDB(ctx, template)
	if err != nil {
		return smp, err
	}
	defer d.close(ctx, s.env)
	rc, err := startClient(ctx, d, varRiverBench, noopWorkers(), 1000)
	if err != nil {
		return smp, err
	}
	defer rc.stop(ctx)
	t0, err := dbNow(ctx, d.pool)
	if err != nil {
		return smp, err
	}
	triggered, err := insertLoops(ctx, d, 8, dur)
	if err != nil {
		return smp, err
	}
	t1, err := dbNow(ctx, d.pool)
	if err != nil {
		return smp, err
	}
	committed, stamped, _, err := d.jobTimes(ctx, "noop", t0, t1)
	if err != nil {
		return smp, err
	}
	smp.Metrics = windowMetrics(committed, stamped, triggered, t1.Sub(t0))
	return smp, nil
}

// insertLoops runs loops goroutines inserting one noop job per transaction
// (InsertTx, then commit) until dur has passed; it returns the inserts.
func insertLoops(ctx context.Context, d *riverDB, loops int, dur time.Duration) (int64, error) {
	deadline := time.Now().Add(dur)
	var n atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, loops)
	for range loops {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
					_, err := d.insert.InsertTx(ctx, tx, noopArgs{}, nil)
					return err
				})
				if err != nil {
					errs <- fmt.Errorf("river insert: %w", err)
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	return n.Load(), <-errs
}

// chainArgs is a step of W3's chain emulation.
type chainArgs struct {
	Chain int `json:"chain"`
	Step  int `json:"step"`
}

func (chainArgs) Kind() string { return "chain" }

// chainWorker completes its job and inserts the next step in one
// transaction (JobCompleteTx + InsertTx); the last step signals the driver
// after its commit.
type chainWorker struct {
	river.WorkerDefaults[chainArgs]
	d    *riverDB
	done *doneSignal
}

func (w *chainWorker) Work(ctx context.Context, job *river.Job[chainArgs]) error {
	err := pgx.BeginFunc(ctx, w.d.pool, func(tx pgx.Tx) error {
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return err
		}
		if job.Args.Step == chainSteps {
			return nil
		}
		_, err := w.d.insert.InsertTx(ctx, tx, chainArgs{Chain: job.Args.Chain, Step: job.Args.Step + 1}, nil)
		return err
	})
	if err == nil && job.Args.Step == chainSteps {
		w.done.fire()
	}
	return err
}

// chain is River's W3: runs chains one at a time, each waited for.
func (s *riverSystem) chain(ctx context.Context, runs int) (sample, error) {
	smp := sample{}
	d, err := s.openDB(ctx, s.base)
	if err != nil {
		return smp, err
	}
	defer d.close(ctx, s.env)
	done := &doneSignal{}
	workers := river.NewWorkers()
	river.AddWorker(workers, &chainWorker{d: d, done: done})
	rc, err := startClient(ctx, d, varRiverBench, workers, 1000)
	if err != nil {
		return smp, err
	}
	defer rc.stop(ctx)
	for i := range runs {
		ch := done.reset()
		if _, err := d.insert.Insert(ctx, chainArgs{Chain: i, Step: 1}, nil); err != nil {
			return smp, fmt.Errorf("river insert: %w", err)
		}
		select {
		case <-ch:
		case <-time.After(time.Minute):
			return smp, fmt.Errorf("river chain %d not done within 1m", i)
		}
	}
	lat, err := chainLatencies(ctx, d)
	if err != nil {
		return smp, err
	}
	smp.Metrics = map[string]float64{metricP50: percentile(lat, 50), metricP99: percentile(lat, 99)}
	return smp, nil
}

// chainLatencies is, per chain, step 1's created_at → the last step's
// completion committed, in ms.
func chainLatencies(ctx context.Context, d *riverDB) ([]float64, error) {
	rows, err := d.pool.Query(ctx, `
SELECT extract(epoch FROM max(pg_xact_commit_timestamp(xmin)) FILTER (WHERE (args->>'step')::int = $1)
                          - min(created_at)) * 1000
  FROM river_job WHERE kind = 'chain' AND state = 'completed' GROUP BY args->>'chain'`, chainSteps)
	if err != nil {
		return nil, fmt.Errorf("river chain times: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[float64])
}

// fanArgs is a W4 job: Join false for the fanWidth parallel jobs, true for
// the join the last of them inserts.
type fanArgs struct {
	Run  int  `json:"run"`
	Join bool `json:"join"`
}

func (fanArgs) Kind() string { return "fan" }

// fanWorker completes its job and decrements the run's counter in one
// transaction; the one that takes it to zero inserts the join there too.
type fanWorker struct {
	river.WorkerDefaults[fanArgs]
	d    *riverDB
	done *doneSignal
}

func (w *fanWorker) Work(ctx context.Context, job *river.Job[fanArgs]) error {
	err := pgx.BeginFunc(ctx, w.d.pool, func(tx pgx.Tx) error {
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return err
		}
		if job.Args.Join {
			return nil
		}
		var left int
		if err := tx.QueryRow(ctx, `UPDATE bench_fan SET remaining = remaining - 1 WHERE run = $1 RETURNING remaining`, job.Args.Run).Scan(&left); err != nil {
			return err
		}
		if left > 0 {
			return nil
		}
		_, err := w.d.insert.InsertTx(ctx, tx, fanArgs{Run: job.Args.Run, Join: true}, nil)
		return err
	})
	if err == nil && job.Args.Join {
		w.done.fire()
	}
	return err
}

// fanOut is River's W4: fanWidth jobs and the counter row inserted in one
// transaction; wall time to the join's completion committed.
func (s *riverSystem) fanOut(ctx context.Context) (sample, error) {
	smp := sample{}
	d, err := s.openDB(ctx, s.base)
	if err != nil {
		return smp, err
	}
	defer d.close(ctx, s.env)
	done := &doneSignal{}
	workers := river.NewWorkers()
	river.AddWorker(workers, &fanWorker{d: d, done: done})
	rc, err := startClient(ctx, d, varRiverBench, workers, 1000)
	if err != nil {
		return smp, err
	}
	defer rc.stop(ctx)
	ch := done.reset()
	params := make([]river.InsertManyParams, fanWidth)
	for i := range params {
		params[i] = river.InsertManyParams{Args: fanArgs{Run: 1}}
	}
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO bench_fan (run, remaining) VALUES (1, $1)`, fanWidth); err != nil {
			return err
		}
		_, err := d.insert.InsertManyTx(ctx, tx, params)
		return err
	})
	if err != nil {
		return smp, fmt.Errorf("river fan-out insert: %w", err)
	}
	select {
	case <-ch:
	case <-time.After(5 * time.Minute):
		return smp, fmt.Errorf("river fan-out join not done within 5m")
	}
	var wall float64
	err = d.pool.QueryRow(ctx, `SELECT extract(epoch FROM max(pg_xact_commit_timestamp(xmin)) FILTER (WHERE args->>'join' = 'true') - min(created_at))
  FROM river_job WHERE kind = 'fan' AND state = 'completed'`).Scan(&wall)
	if err != nil {
		return smp, fmt.Errorf("river fan-out time: %w", err)
	}
	smp.Metrics = map[string]float64{metricWallS: wall}
	return smp, nil
}
