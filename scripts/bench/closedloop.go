package main

// This file is compiled twice: into the driver (River's and the HTTP API's
// W6 loads) and, through the link fftrigger/closedloop.go and go build
// -overlay, into every FlowForge tree's fftrigger (its TriggerTx and
// TriggerMany modes). It may use the standard library only, and no name of
// either program.

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// closedLoad is a closed-loop load: Loops goroutines, each issuing one
// call, waiting for it, then the next. Each loop first makes Warm calls
// that are not timed (a connection's first statements prepare them, a
// client's first trigger caches the workflow), then all start together:
// with N > 0 they make N timed calls between them, else they call until
// Window has passed (a call under way at its end is waited for and
// counted).
type closedLoad struct {
	Loops  int
	Warm   int
	N      int
	Window time.Duration
}

// closedResult is what a closed loop did: the timed calls that returned
// without error, those that failed (with the first error), the seconds
// from the start to the last call's return, and each successful call's
// wall time in ms (in no particular order).
type closedResult struct {
	Calls      int64     `json:"calls"`
	Errors     int64     `json:"errors"`
	FirstError string    `json:"first_error,omitempty"`
	Seconds    float64   `json:"seconds"`
	LatMS      []float64 `json:"lat_ms"`
}

// runClosedLoop runs load, each call through call. A failed warm-up call
// ends the load before the start (the result holds it as the first
// error); a failed timed call is counted and its loop goes on. ctx ends
// the load early.
func runClosedLoop(ctx context.Context, load closedLoad, call func(context.Context) error) closedResult {
	loops := max(load.Loops, 1)
	var next, failed atomic.Int64
	var first sync.Once
	var firstErr string
	fail := func(err error) {
		failed.Add(1)
		first.Do(func() { firstErr = err.Error() })
	}
	warm := make(chan bool, loops)
	start := make(chan time.Time)
	lats := make([][]float64, loops)
	var wg sync.WaitGroup
	for l := range loops {
		wg.Go(func() {
			ok := true
			for range load.Warm {
				if err := call(ctx); err != nil {
					fail(err)
					ok = false
					break
				}
			}
			warm <- ok
			t0, open := <-start
			if !open {
				return
			}
			deadline := t0.Add(load.Window)
			for ctx.Err() == nil {
				if load.N > 0 && next.Add(1) > int64(load.N) || load.N <= 0 && !time.Now().Before(deadline) {
					return
				}
				t := time.Now()
				if err := call(ctx); err != nil {
					fail(err)
					continue
				}
				lats[l] = append(lats[l], float64(time.Since(t).Microseconds())/1000)
			}
		})
	}
	allWarm := true
	for range loops {
		allWarm = <-warm && allWarm
	}
	var t0 time.Time
	if allWarm {
		t0 = time.Now()
		for range loops {
			start <- t0
		}
	}
	close(start)
	wg.Wait()
	res := closedResult{Errors: failed.Load(), FirstError: firstErr, LatMS: []float64{}}
	if !allWarm {
		return res
	}
	res.Seconds = time.Since(t0).Seconds()
	for _, l := range lats {
		res.LatMS = append(res.LatMS, l...)
	}
	res.Calls = int64(len(res.LatMS))
	return res
}
