package main

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// burnDown is W1: n single-task runs are triggered (8 at a time through
// store.Trigger; FlowForge has no bulk trigger) before any daemon runs; the
// clock starts when the daemons of mode are started and stops at the last
// SUCCEEDED commit. The trigger and the drain are costed separately.
//
// wf is wfOne, or a flow variant's workflow (flowworkloads.go).
func (f *flowforge) burnDown(ctx context.Context, mode, wf string, n int) (sample, error) {
	s := sample{}
	db, err := f.freshDB(ctx, f.baseDB)
	if err != nil {
		return s, err
	}
	defer f.env.pg.dropDB(context.WithoutCancel(ctx), db)
	pool, err := f.env.pg.pool(ctx, db)
	if err != nil {
		return s, err
	}
	defer pool.Close()
	if err := f.env.resetStatements(ctx); err != nil {
		return s, err
	}
	s0, err := f.env.takeSnapshot(ctx, db)
	if err != nil {
		return s, err
	}
	tr, err := f.trigger(ctx, db, "-mode", "bulk", "-n", strconv.Itoa(n), "-workflow", wf)
	if err != nil {
		return s, err
	}
	trig, err := f.env.phaseCost(ctx, db, s0, int64(n), tr.cpu)
	if err != nil {
		return s, err
	}
	start := time.Now()
	d, err := f.startDaemons(db, mode)
	if err != nil {
		return s, err
	}
	err = ffWaitSettled(ctx, pool, 10*time.Minute, d.failed)
	usage := d.stop()
	f.env.deleteQueues(ctx, d.queue)
	if err != nil {
		return s, err
	}
	_, _, last, err := ffRunTimes(ctx, pool, wf, time.Time{}, time.Time{})
	if err != nil {
		return s, err
	}
	drain, err := f.env.phaseCost(ctx, db, trig.end, int64(n), sumCPU(usage))
	if err != nil {
		return s, err
	}
	drain.cost.Daemons = usage
	secs := last.Sub(start).Seconds()
	s.Metrics = map[string]float64{metricN: float64(n), metricDrainS: secs, metricTasksPerS: float64(n) / secs}
	if err := addPublisherShare(ctx, pool, time.Time{}, time.Time{}, s.Metrics); err != nil {
		return s, err
	}
	if u, ok := usage["worker"]; ok {
		s.Metrics[metricWorkerRSS] = u.PeakRSSMB
	}
	s.Metrics[metricDrainPgCPU], s.Metrics[metricDrainCommits] = drain.cost.PostgresCPUms, drain.cost.CommitsWAL
	s.Cost = map[string]cost{"trigger": trig.cost, "drain": drain.cost}
	return s, nil
}

func sumCPU(u map[string]daemonUsage) float64 {
	var t float64
	for _, x := range u {
		t += x.CPUSeconds
	}
	return t
}

// continuous is W2 (template baseDB) and W5 (template histDB): 8
// closed-loop triggerers for dur against running daemons; runs/s and the
// latencies are those of the runs triggered and SUCCEEDED inside the
// window (the daemons are stopped at its end). wf is wfOne, or a flow
// variant's workflow (flowworkloads.go).
func (f *flowforge) continuous(ctx context.Context, workload, template, mode, wf string, dur time.Duration) (sample, error) {
	return f.onFreshRun(ctx, template, mode, func(run *ffRun) (sample, error) {
		s := sample{}
		t0, err := dbNow(ctx, run.pool)
		if err != nil {
			return s, err
		}
		tr, err := f.trigger(ctx, run.db, "-mode", "loop", "-loops", "8", "-duration", dur.String(), "-workflow", wf)
		if err != nil {
			return s, err
		}
		t1, err := dbNow(ctx, run.pool)
		if err != nil {
			return s, err
		}
		if err := run.d.failed(); err != nil {
			return s, err
		}
		committed, stamped, _, err := ffRunTimes(ctx, run.pool, wf, t0, t1)
		if err != nil {
			return s, err
		}
		s.Metrics = windowMetrics(committed, stamped, tr.Triggered, t1.Sub(t0))
		return s, addPublisherShare(ctx, run.pool, t0, t1, s.Metrics)
	})
}

// chain is W3: runs chain-step runs one at a time (each waited for before
// the next), p50/p99 end to end.
func (f *flowforge) chain(ctx context.Context, mode string, runs int) (sample, error) {
	return f.onFreshRun(ctx, f.baseDB, mode, func(run *ffRun) (sample, error) {
		if _, err := f.trigger(ctx, run.db, "-mode", "serial", "-n", strconv.Itoa(runs), "-workflow", wfChain); err != nil {
			return sample{}, err
		}
		committed, stamped, _, err := ffRunTimes(ctx, run.pool, wfChain, time.Time{}, time.Time{})
		if err != nil {
			return sample{}, err
		}
		return sample{Metrics: latencyMetrics(committed, stamped)}, nil
	})
}

// fanOut is W4: one run of fanWidth parallel tasks and a join; wall time
// trigger → SUCCEEDED committed.
func (f *flowforge) fanOut(ctx context.Context, mode string) (sample, error) {
	return f.onFreshRun(ctx, f.baseDB, mode, func(run *ffRun) (sample, error) {
		wall, err := run.oneRun(ctx, wfFan)
		if err != nil {
			return sample{}, err
		}
		return sample{Metrics: map[string]float64{metricWallS: wall}}, nil
	})
}

// forEachFanOut is W4e: one run of a for_each over forEachWidth elements
// and a join (wfForEach), wall time trigger → SUCCEEDED committed; and, on
// the same daemons in the same job, one run of W4's static fan-out
// (wfFan), so that the ratio of the two (metricOverStatic) is paired: what
// the scheduler's expansion and join cost over a fan-out declared in the
// file. The two runs take turns going first (odd rounds the static one),
// so that neither always has the warmer caches.
func (f *flowforge) forEachFanOut(ctx context.Context, mode string, round int) (sample, error) {
	return f.onFreshRun(ctx, f.baseDB, mode, func(run *ffRun) (sample, error) {
		order := []string{wfFan, wfForEach}
		if round%2 == 0 {
			order = []string{wfForEach, wfFan}
		}
		wall := map[string]float64{}
		for _, wf := range order {
			w, err := run.oneRun(ctx, wf)
			if err != nil {
				return sample{}, err
			}
			wall[wf] = w
		}
		return sample{Metrics: map[string]float64{
			metricWallS: wall[wfForEach], metricStaticWallS: wall[wfFan], metricOverStatic: wall[wfForEach] / wall[wfFan],
		}}, nil
	})
}

// oneRun triggers one run of workflow wf on run's daemons, waits for every
// run of the database to settle SUCCEEDED, and returns that run's wall
// time, trigger → SUCCEEDED committed, in s (the database has no other run
// of wf).
func (run *ffRun) oneRun(ctx context.Context, wf string) (float64, error) {
	if _, err := run.f.trigger(ctx, run.db, "-mode", "bulk", "-n", "1", "-loops", "1", "-workflow", wf); err != nil {
		return 0, err
	}
	if err := ffWaitSettled(ctx, run.pool, 5*time.Minute, run.d.failed); err != nil {
		return 0, err
	}
	committed, _, _, err := ffRunTimes(ctx, run.pool, wf, time.Time{}, time.Time{})
	if err != nil {
		return 0, err
	}
	if len(committed) != 1 {
		return 0, fmt.Errorf("%s: %d SUCCEEDED runs, want 1", wf, len(committed))
	}
	return committed[0] / 1000, nil
}
