package main

import (
	"context"
	"fmt"
	"path/filepath"
)

// ffSystem is a FlowForge column: the current tree, or beforeCommit
// exported from the repository's history.
type ffSystem struct {
	sysKey string
	commit string // "" for the current tree
	env    *benchEnv
	ff     *flowforge
	w1N    map[string]int // next burn-down backlog by daemon layout
	// histFrom, when set up first with its history, lends it (see
	// deriveHistory); histReady says this system built its own.
	histFrom  *ffSystem
	histReady bool
	setupDone chan struct{} // closed when setup has returned
	// ffdash (the current tree only) times the dashboard's refresh;
	// pruneStats is what W7's pruning of its template took.
	ffdash     string
	pruneStats map[string]float64
	// defaults is what the tree's "defaults" variants ran with (the
	// worker's default --concurrency, read from its ffctl).
	defaults string
}

func (s *ffSystem) key() string { return s.sysKey }

func (s *ffSystem) info() systemInfo {
	i := systemInfo{Label: systemLabels[s.sysKey], Notes: []string{
		"real daemons (ffctl daemon all, or scheduler + publisher + worker as three processes) with the defaults the tree ships " +
			"(no FLOWFORGE_* setting but the URLs and the queue; see defaults) and the built-in noop handler; health servers off",
		"runs are created with store.Trigger, the call `ffctl run trigger` makes, by fftrigger built from the same tree; " +
			"W6 also through the tree's core/client (TriggerTx, TriggerMany: fftrigger -mode tx, many) and its `ffctl daemon api`, where the tree has them",
		fmt.Sprintf("W2–W5 use `daemon %s`", s.env.plan.FFMode),
	}}
	if s.ff != nil {
		i.Version = s.ff.build.Commit
	}
	i.Defaults = s.defaults
	return i
}

// build exports beforeCommit (for the old column) and builds the tree; it
// needs no server, so it runs while they start.
func (s *ffSystem) build(ctx context.Context) error {
	tree, label := s.env.repo, systemLabels[s.sysKey]
	commit := treeCommit(ctx, s.env.repo)
	if s.commit != "" {
		tree = filepath.Join(s.env.workDir, "tree-"+s.commit)
		if err := exportCommit(ctx, s.env.repo, s.commit, tree); err != nil {
			return err
		}
		commit = s.commit
	}
	src := filepath.Join(s.env.repo, "scripts", "bench", "fftrigger")
	b, err := buildTree(ctx, tree, src, filepath.Join(s.env.workDir, "bin-"+s.sysKey), label)
	if err != nil {
		return err
	}
	b.Commit = commit
	s.ff = newFlowForge(b, s.env)
	if s.commit == "" && s.env.plan.wants(s.sysKey, "W7") {
		dash := filepath.Join(s.env.repo, "scripts", "bench", "ffdash", "main.go")
		if s.ffdash, err = buildDash(ctx, tree, dash, filepath.Join(s.env.workDir, "bin-"+s.sysKey)); err != nil {
			return err
		}
	}
	return nil
}

// setup prepares the template databases (after histFrom's setup, whose
// history it takes).
func (s *ffSystem) setup(ctx context.Context) error {
	defer close(s.setupDone)
	if s.histFrom != nil && s.env.plan.wantsSystem(s.histFrom.sysKey) && s.histFrom.ff != nil {
		<-s.histFrom.setupDone
	}
	if s.ff == nil {
		return fmt.Errorf("not built")
	}
	if err := s.ff.setup(ctx); err != nil {
		return err
	}
	s.defaults = s.ff.workerDefaults(ctx)
	if s.commit == "" && s.env.plan.wants(s.sysKey, "W7") {
		st, err := s.ff.buildPruned(ctx, s.env.plan.Pruned)
		if err != nil {
			return err
		}
		s.pruneStats = st
	}
	if !s.env.plan.wants(s.sysKey, "W5") {
		return nil
	}
	if src := s.histFrom; src != nil && src.histReady {
		return s.ff.deriveHistory(ctx, src.ff)
	}
	if err := s.ff.buildHistory(ctx, s.env.plan.History); err != nil {
		return err
	}
	s.histReady = true
	return nil
}

func (s *ffSystem) jobs() []job {
	p := s.env.plan
	s.w1N = map[string]int{"all": p.W1N[s.sysKey], "separate": p.W1N[s.sysKey], modeSeparate64: p.W1N[s.sysKey]}
	mode := p.FFMode
	var out []job
	for _, m := range []string{"all", "separate", modeSeparate64} {
		out = append(append(out, job{System: s.sysKey, Workload: "W1", Variant: "daemon " + m,
			run: func(ctx context.Context, _ int) (sample, error) { return s.burnDown(ctx, m) }}), append(s.flowW1Jobs(m), s.logW1Jobs(m)...)...)
	}
	out = append(append(out,
		job{System: s.sysKey, Workload: "W2", Variant: "daemon " + mode, run: func(ctx context.Context, _ int) (sample, error) {
			return s.ff.continuous(ctx, "W2", s.ff.baseDB, mode, wfOne, p.Continuous)
		}}), append(s.flowW2Jobs(mode), s.obsW2Jobs(mode)...)...)
	out = append(append(out,
		job{System: s.sysKey, Workload: "W2", Variant: "daemon " + modeAll64, run: func(ctx context.Context, _ int) (sample, error) {
			return s.ff.continuous(ctx, "W2", s.ff.baseDB, modeAll64, wfOne, p.Continuous)
		}},
		job{System: s.sysKey, Workload: "W3", Variant: "daemon " + mode, run: func(ctx context.Context, _ int) (sample, error) {
			return s.ff.chain(ctx, mode, p.ChainRuns)
		}},
		job{System: s.sysKey, Workload: "W4", Variant: "daemon " + mode, run: func(ctx context.Context, _ int) (sample, error) {
			return s.ff.fanOut(ctx, mode)
		}},
	), s.forEachJobs()...)
	return append(append(out,
		job{System: s.sysKey, Workload: "W5", Variant: "daemon " + mode, run: func(ctx context.Context, _ int) (sample, error) {
			return s.ff.continuous(ctx, "W5", s.ff.histDB, mode, wfOne, p.Continuous)
		}},
		job{System: s.sysKey, Workload: "W5", Variant: "buffers", FirstRoundOnly: true, run: func(ctx context.Context, _ int) (sample, error) {
			return s.ff.buffersCheck(ctx, mode, p.BufferRuns)
		}},
	), append(append(s.openJobs(), s.triggerJobs()...), s.retentionJobs()...)...)
}

// forEachJobs is W4e, for a tree that has for_each (the before column
// predates it).
func (s *ffSystem) forEachJobs() []job {
	if s.ff == nil || !s.ff.build.HasForEach {
		return nil
	}
	mode := s.env.plan.FFMode
	return []job{{System: s.sysKey, Workload: workloadForEach, Variant: "daemon " + mode, run: func(ctx context.Context, round int) (sample, error) {
		return s.ff.forEachFanOut(ctx, mode, round)
	}}}
}

// retentionJobs is W7 (the current tree only: the earlier one has no
// pruner).
func (s *ffSystem) retentionJobs() []job {
	if s.commit != "" {
		return nil
	}
	p := s.env.plan
	return []job{{System: s.sysKey, Workload: "W7", Variant: varPruned, run: func(ctx context.Context, _ int) (sample, error) {
		return s.ff.afterPruning(ctx, p.FFMode, p.Continuous, s.ffdash, s.pruneStats)
	}}}
}

// burnDown runs W1 with the layout's backlog, sized to drain long enough.
func (s *ffSystem) burnDown(ctx context.Context, mode string) (sample, error) {
	return s.burnDownWF(ctx, mode, mode, wfOne)
}

// burnDownWF runs W1 of workflow wf with the backlog kept under key (a
// layout, or a flow variant: each sized on its own).
func (s *ffSystem) burnDownWF(ctx context.Context, mode, key, wf string) (sample, error) {
	n := s.w1N[key]
	smp, err := s.env.plan.burnDownSized(&n, func(n int) (sample, error) { return s.ff.burnDown(ctx, mode, wf, n) })
	s.w1N[key] = n
	return smp, err
}
