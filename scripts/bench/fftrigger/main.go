// Command fftrigger is the benchmark's load generator for FlowForge: it
// creates runs through store.Trigger, the call `ffctl run trigger` makes,
// from several goroutines at once. The driver builds it inside each
// FlowForge tree it measures (go build -overlay adds this file there), so
// every column triggers through its own tree's store.
//
// Modes (-mode):
//
//	bulk    create -n runs with -loops goroutines, then exit
//	loop    -loops closed-loop triggerers for -duration: each waits for its
//	        trigger to commit, never for the run to finish
//	serial  -n runs one at a time, each waited for (SUCCEEDED) before the
//	        next is triggered (polling the run's state every -poll through
//	        -poll-db, which the driver gives as another role than the
//	        daemons', so that the polls stay out of their statistics)
//
// It prints one JSON object: {"triggered":N,"errors":E,"seconds":S,
// "first_error":"..."}; exit status 1 on a set-up error or when -mode serial
// saw a run end in another state than SUCCEEDED.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flowforge/flowforge/core/store"
)

type options struct {
	db, pollDB, workflow, mode string
	n, loops                   int
	duration, poll             time.Duration
}

type result struct {
	Triggered  int64   `json:"triggered"`
	Errors     int64   `json:"errors"`
	Seconds    float64 `json:"seconds"`
	FirstError string  `json:"first_error,omitempty"`
}

func main() {
	var o options
	flag.StringVar(&o.db, "db", "", "database URL")
	flag.StringVar(&o.pollDB, "poll-db", "", "database URL of the state polls (serial; default -db), so that they can run as another role")
	flag.StringVar(&o.workflow, "workflow", "", "workflow name")
	flag.StringVar(&o.mode, "mode", "bulk", "bulk, loop or serial")
	flag.IntVar(&o.n, "n", 1, "runs (bulk, serial)")
	flag.IntVar(&o.loops, "loops", 8, "concurrent triggerers (bulk, loop)")
	flag.DurationVar(&o.duration, "duration", 20*time.Second, "how long (loop)")
	flag.DurationVar(&o.poll, "poll", 2*time.Millisecond, "state poll period (serial)")
	flag.Parse()
	res, err := run(context.Background(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fftrigger:", err)
		os.Exit(1)
	}
	_ = json.NewEncoder(os.Stdout).Encode(res)
}

func run(ctx context.Context, o options) (result, error) {
	s, err := store.Open(ctx, o.db, store.Options{MaxConns: o.loops + 2})
	if err != nil {
		return result{}, fmt.Errorf("open store: %w", err)
	}
	defer s.Close()
	start := time.Now()
	var res result
	switch o.mode {
	case "bulk":
		res = parallel(ctx, s, o, func(int64) bool { return true })
	case "loop":
		deadline := start.Add(o.duration)
		res = parallel(ctx, s, o, func(int64) bool { return time.Now().Before(deadline) })
	case "serial":
		res, err = serial(ctx, s, o)
	default:
		return result{}, fmt.Errorf("unknown -mode %q", o.mode)
	}
	res.Seconds = time.Since(start).Seconds()
	return res, err
}

// parallel runs o.loops goroutines that trigger while more(i) for the i-th
// trigger overall (bulk stops at o.n of them).
func parallel(ctx context.Context, s *store.Store, o options, more func(int64) bool) result {
	var next, ok, failed atomic.Int64
	var first sync.Once
	var firstErr string
	var wg sync.WaitGroup
	for range o.loops {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if (o.mode == "bulk" && i > int64(o.n)) || !more(i) {
					return
				}
				if _, err := s.Trigger(ctx, store.TriggerRequest{Workflow: o.workflow, Actor: "bench"}); err != nil {
					failed.Add(1)
					first.Do(func() { firstErr = err.Error() })
					continue
				}
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	return result{Triggered: ok.Load(), Errors: failed.Load(), FirstError: firstErr}
}

func serial(ctx context.Context, s *store.Store, o options) (result, error) {
	var res result
	url := o.pollDB
	if url == "" {
		url = o.db
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return res, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	for range o.n {
		tr, err := s.Trigger(ctx, store.TriggerRequest{Workflow: o.workflow, Actor: "bench"})
		if err != nil {
			return res, fmt.Errorf("trigger: %w", err)
		}
		res.Triggered++
		if err := waitSucceeded(ctx, conn, tr, o.poll); err != nil {
			return res, err
		}
	}
	return res, nil
}

func waitSucceeded(ctx context.Context, conn *pgx.Conn, tr store.TriggerResult, poll time.Duration) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		var state string
		var finished bool
		err := conn.QueryRow(ctx,
			`SELECT state, finished_at IS NOT NULL FROM workflow_runs WHERE id = $1`, tr.RunID).Scan(&state, &finished)
		if err != nil {
			return fmt.Errorf("poll run %s: %w", tr.RunID, err)
		}
		if finished && state == "SUCCEEDED" {
			return nil
		}
		if finished {
			return fmt.Errorf("run %s ended %s", tr.RunID, state)
		}
		time.Sleep(poll)
	}
	return errors.New("run " + tr.RunID.String() + " not SUCCEEDED within 2m")
}
