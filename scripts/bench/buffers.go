package main

import (
	"context"
	"sort"
	"strconv"
)

// bufferRow compares one statement's shared buffers (hit + read) per call
// between a fresh database and the one with the history.
type bufferRow struct {
	Query   string  `json:"query"`
	Fresh   float64 `json:"fresh_buffers_per_call"`
	History float64 `json:"history_buffers_per_call"`
	Ratio   float64 `json:"ratio"`
}

// buffersCheck is W5's deterministic check: the same serial workload (runs
// single-task runs, one at a time) on a fresh database and on one with the
// history; every statement the daemons and the trigger ran should touch as
// many buffers per call on both. The worst ratio is the figure; statements
// seen fewer than 3 times on either side are listed but not ranked.
func (f *flowforge) buffersCheck(ctx context.Context, mode string, runs int) (sample, error) {
	s := sample{}
	fresh, err := f.bufferProfile(ctx, f.baseDB, mode, runs)
	if err != nil {
		return s, err
	}
	hist, err := f.bufferProfile(ctx, f.histDB, mode, runs)
	if err != nil {
		return s, err
	}
	s.Buffers = compareBuffers(fresh, hist)
	worst, growth := 1.0, 0.0
	for _, b := range s.Buffers {
		if b.Ratio > worst {
			worst, s.Note = b.Ratio, "worst: "+firstLine(b.Query)
		}
		growth = max(growth, b.History-b.Fresh)
	}
	s.Metrics = map[string]float64{metricBufRatioMax: worst, metricBufGrowthMax: growth, "statements": float64(len(s.Buffers))}
	return s, nil
}

// compareBuffers pairs the statements seen on both sides (at least 3 calls
// each), the largest ratio first.
func compareBuffers(fresh, hist map[string]statementCost) []bufferRow {
	var out []bufferRow
	for q, a := range fresh {
		b, ok := hist[q]
		if !ok || a.Calls < 3 || b.Calls < 3 {
			continue
		}
		r := 1.0
		if a.BuffersPerCall > 0 {
			r = b.BuffersPerCall / a.BuffersPerCall
		} else if b.BuffersPerCall > 0 {
			r = b.BuffersPerCall + 1
		}
		out = append(out, bufferRow{Query: q, Fresh: a.BuffersPerCall, History: b.BuffersPerCall, Ratio: r})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Ratio != out[j].Ratio {
			return out[i].Ratio > out[j].Ratio
		}
		return out[i].Query < out[j].Query
	})
	return out
}

// bufferProfile runs the serial workload on a clone of template and returns
// its statements by text.
func (f *flowforge) bufferProfile(ctx context.Context, template, mode string, runs int) (map[string]statementCost, error) {
	db, err := f.freshDB(ctx, template)
	if err != nil {
		return nil, err
	}
	defer f.env.pg.dropDB(context.WithoutCancel(ctx), db)
	run, err := f.startRun(ctx, db, mode)
	if err != nil {
		return nil, err
	}
	if err := f.env.resetStatements(ctx); err != nil {
		run.close(ctx)
		return nil, err
	}
	_, err = f.trigger(ctx, db, "-mode", "serial", "-n", strconv.Itoa(runs), "-workflow", wfOne)
	run.close(ctx)
	if err != nil {
		return nil, err
	}
	if err := f.env.waitSessionsGone(ctx, db); err != nil {
		return nil, err
	}
	list, err := f.env.statements(ctx, db, 1, 10000)
	if err != nil {
		return nil, err
	}
	out := map[string]statementCost{}
	for _, s := range list {
		out[s.Query] = s
	}
	return out, nil
}
