package main

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// system is one column of the table: it prepares itself once, then
// contributes jobs to the interleaved rounds.
type system interface {
	key() string
	// setup builds or installs what the system needs and prepares its
	// template databases; an error makes the whole column N/A with it.
	setup(ctx context.Context) error
	jobs() []job
	info() systemInfo
}

// builder is a system with a build step that needs no server: it runs
// while the servers start.
type builder interface {
	build(ctx context.Context) error
}

// buildAll runs every wanted builder in turn and returns the errors by
// system key.
func buildAll(ctx context.Context, env *benchEnv, systems []system) map[string]error {
	errs := map[string]error{}
	for _, s := range systems {
		if b, ok := s.(builder); ok && env.plan.wantsSystem(s.key()) {
			start := time.Now()
			if err := b.build(ctx); err != nil {
				errs[s.key()] = err
			}
			env.log("built %s (%.0f s)", s.key(), time.Since(start).Seconds())
		}
	}
	return errs
}

// runAll starts the private servers (building meanwhile), sets every
// system up, runs the interleaved rounds and computes the table.
func runAll(ctx context.Context, env *benchEnv) (results, error) {
	res := results{Started: time.Now(), Plan: env.plan, Systems: map[string]systemInfo{}}
	systems := newSystems(env)
	built := make(chan map[string]error, 1)
	go func() { built <- buildAll(ctx, env, systems) }()
	stop, err := startServers(ctx, env)
	buildErrs := <-built // a build never outlives the work directory
	if err != nil {
		return res, err
	}
	defer stop()
	if res.Servers, err = serverInfo(ctx, env); err != nil {
		return res, err
	}
	unavailable := map[string]string{}
	for k, e := range buildErrs {
		unavailable[k] = firstLine(e.Error())
	}
	keys, jobs := setupSystems(ctx, env, systems, unavailable, res.Systems)
	if ctx.Err() != nil {
		return res, fmt.Errorf("interrupted: %w", ctx.Err())
	}
	if env.plan.Jobs != "" && len(jobs) == 0 {
		return res, fmt.Errorf("-jobs %q matches no job that -only and the builds let run (a job's name is its workload, \" · \", its variant, as the table's rows)", env.plan.Jobs)
	}
	res.Samples = runSteps(ctx, env, schedule(env.plan.Rounds, keys, jobs))
	addFlowRatios(res.Samples)
	res.Rows = computeRows(tableRows(env.plan), res.Samples, unavailable)
	res.Notes = methodNotes(env.plan)
	return res, ctx.Err()
}

// startServers starts the private PostgreSQL and RabbitMQ; stop stops both.
func startServers(ctx context.Context, env *benchEnv) (stop func(), err error) {
	env.log("starting a private PostgreSQL and a private RabbitMQ node (builds run meanwhile)")
	if env.pg, err = startPostgres(ctx); err != nil {
		return nil, err
	}
	if env.mq, err = startRabbit(ctx); err != nil {
		env.pg.stop()
		return nil, err
	}
	return func() { env.mq.stop(); env.pg.stop() }, nil
}

// setupSystems sets up every wanted system that built, all at once (a
// system that depends on another waits for it in its own setup); one that
// fails is recorded in unavailable (its column N/A with the reason). It
// returns the keys of the systems that run, in order, and their wanted
// jobs, and fills infos.
func setupSystems(ctx context.Context, env *benchEnv, systems []system, unavailable map[string]string, infos map[string]systemInfo) ([]string, []job) {
	errs := make([]error, len(systems))
	var wg sync.WaitGroup
	for i, s := range systems {
		if !env.plan.wantsSystem(s.key()) || unavailable[s.key()] != "" {
			continue
		}
		wg.Go(func() {
			env.log("setting up %s", s.key())
			if errs[i] = s.setup(ctx); errs[i] != nil {
				env.log("  %s unavailable: %v", s.key(), errs[i])
			}
		})
	}
	wg.Wait()
	var keys []string
	var jobs []job
	for i, s := range systems {
		switch {
		case !env.plan.wantsSystem(s.key()) || unavailable[s.key()] != "":
			infos[s.key()] = systemInfo{Label: systemLabels[s.key()], Unavailable: unavailable[s.key()]}
			continue
		case errs[i] != nil:
			unavailable[s.key()] = firstLine(errs[i].Error())
		default:
			keys = append(keys, s.key())
			for _, j := range s.jobs() {
				if env.plan.wants(j.System, j.Workload) && env.plan.wantsJob(j) {
					jobs = append(jobs, j)
				}
			}
		}
		info := s.info()
		info.Unavailable = unavailable[s.key()]
		infos[s.key()] = info
	}
	return keys, jobs
}

// serverInfo records the versions and settings every system ran with.
func serverInfo(ctx context.Context, env *benchEnv) (map[string]string, error) {
	var pgVersion string
	if err := env.pg.admin.QueryRow(ctx, `SHOW server_version`).Scan(&pgVersion); err != nil {
		return nil, fmt.Errorf("postgres version: %w", err)
	}
	mqVersion, err := env.mq.ctl(ctx, "version")
	if err != nil {
		return nil, err
	}
	return map[string]string{
		"postgresql":          pgVersion,
		"postgresql_settings": fmt.Sprint(pgSettings),
		"rabbitmq":            firstLine(mqVersion),
		"rabbitmq_settings":   "single node, defaults, loopback only; rabbitmq_prometheus enabled for counters",
	}, nil
}

// newSystems lists every column's system in the order they are set up
// (and run in round 1): the before column first, since the current tree
// takes its W5 history from it.
func newSystems(env *benchEnv) []system {
	before := &ffSystem{sysKey: sysFFBefore, commit: beforeCommit, env: env, setupDone: make(chan struct{})}
	return []system{
		before,
		&ffSystem{sysKey: sysFF, env: env, histFrom: before, setupDone: make(chan struct{})},
		&riverSystem{env: env},
		&celerySystem{env: env},
		&ceilingSystem{env: env},
	}
}
