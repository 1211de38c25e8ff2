package main

// This file is compiled twice: into the driver (River's W2o) and, through
// the link fftrigger/openloop.go and go build -overlay, into every
// FlowForge tree's fftrigger (FlowForge's W2o). It may use the standard
// library only, and no name of either program.

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// openSchedule is an open-loop load: Rate triggers a second for Window,
// trigger i due i/Rate after the start whether or not the earlier ones
// have returned (a closed loop, as W2's, waits for each before the next
// and so offers less when the system slows down).
type openSchedule struct {
	Rate   float64
	Window time.Duration
}

// count is the number of triggers: ⌊Rate × Window⌋ (0 for no rate).
func (s openSchedule) count() int {
	if s.Rate <= 0 || s.Window <= 0 {
		return 0
	}
	return int(math.Floor(s.Rate*s.Window.Seconds() + 1e-9))
}

// due is when trigger i is due, after the start.
func (s openSchedule) due(i int) time.Duration {
	return time.Duration(float64(i) * float64(time.Second) / s.Rate)
}

// openResult is what an open loop did. LagsMS holds, by trigger in
// schedule order, how late it was issued (ms): the time it waited for a
// free triggerer, or for the dispatcher that fell behind.
type openResult struct {
	Triggered  int64     `json:"triggered"`
	Errors     int64     `json:"errors"`
	FirstError string    `json:"first_error,omitempty"`
	Seconds    float64   `json:"seconds"` // start → the last trigger returned
	LagsMS     []float64 `json:"lags_ms"`
}

// runOpenLoop issues sched's triggers, each at its due time, through
// triggerers goroutines calling fire (one trigger, committed when it
// returns). A trigger due while every triggerer is busy is issued by the
// first one free, late by as much, and the dispatcher waits with it: its
// lag is recorded, never hidden. A failed trigger is counted and the load
// goes on; ctx ends it early.
func runOpenLoop(ctx context.Context, sched openSchedule, triggerers int, fire func(context.Context) error) openResult {
	n := sched.count()
	lags := make([]float64, n)
	issued := make(chan int)
	var ok, failed atomic.Int64
	var firstErr string
	var first sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for range max(triggerers, 1) {
		wg.Go(func() {
			for i := range issued {
				lags[i] = float64(time.Since(start)-sched.due(i)) / float64(time.Millisecond)
				if err := fire(ctx); err != nil {
					failed.Add(1)
					first.Do(func() { firstErr = err.Error() })
					continue
				}
				ok.Add(1)
			}
		})
	}
	sent := 0
	for sent < n && ctx.Err() == nil {
		if d := time.Until(start.Add(sched.due(sent))); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				continue
			}
		}
		select {
		case issued <- sent:
			sent++
		case <-ctx.Done():
		}
	}
	close(issued)
	wg.Wait()
	return openResult{Triggered: ok.Load(), Errors: failed.Load(), FirstError: firstErr,
		Seconds: time.Since(start).Seconds(), LagsMS: lags[:sent]}
}
