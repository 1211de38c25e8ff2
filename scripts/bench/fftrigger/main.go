// Command fftrigger is the benchmark's load generator for FlowForge: it
// creates runs through store.Trigger, the call `ffctl run trigger` makes,
// from several goroutines at once, or (-mode tx, many) through
// core/client as an application does. The driver builds it inside each
// FlowForge tree it measures (go build -overlay adds this directory's
// files there), so every column triggers through its own tree's store and
// client.
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
//	open    an open loop: -rate triggers a second for -duration, each
//	        issued at its due time by the first of -loops triggerers free
//	        (openloop.go, shared with the driver's River load)
//	tx      client.TriggerTx inside a transaction that also runs
//	        -app-insert: -loops closed loops for -duration, or -n
//	        transactions between them when -n > 0, after -warm untimed
//	        ones per loop (client.go; closedloop.go, shared with the
//	        driver's River and HTTP loads)
//	many    client.TriggerMany of -batch runs, -n runs in all, one batch
//	        at a time, after -warm untimed batches (client.go)
//
// A tree without core/client is built with -tags ffnoclient, and refuses
// tx and many.
//
// It prints one JSON object: {"triggered":N,"errors":E,"seconds":S,
// "first_error":"..."}, with -mode open also "lags_ms" (by trigger, how
// late it was issued), with tx and many "lat_ms" (each timed call's wall
// time: a transaction begin → commit, a batch) and "seconds" the timed
// calls' (from their start to the last one's return); exit status 1 on a
// set-up error or when -mode serial saw a run end in another state than
// SUCCEEDED.
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
	appInsert                  string
	n, loops, warm, batch      int
	rate                       float64
	duration, poll             time.Duration
}

type result struct {
	Triggered  int64     `json:"triggered"`
	Errors     int64     `json:"errors"`
	Seconds    float64   `json:"seconds"`
	FirstError string    `json:"first_error,omitempty"`
	LagsMS     []float64 `json:"lags_ms,omitempty"`
	LatMS      []float64 `json:"lat_ms,omitempty"`
}

func main() {
	var o options
	flag.StringVar(&o.db, "db", "", "database URL")
	flag.StringVar(&o.pollDB, "poll-db", "", "database URL of the state polls (serial; default -db), so that they can run as another role")
	flag.StringVar(&o.workflow, "workflow", "", "workflow name")
	flag.StringVar(&o.mode, "mode", "bulk", "bulk, loop, serial, open, tx or many")
	flag.IntVar(&o.n, "n", 1, "runs (bulk, serial, many), transactions (tx; 0: for -duration)")
	flag.IntVar(&o.loops, "loops", 8, "concurrent triggerers (bulk, loop, open, tx)")
	flag.IntVar(&o.warm, "warm", 3, "untimed calls per loop before the timed ones (tx, many)")
	flag.IntVar(&o.batch, "batch", 500, "runs per TriggerMany (many)")
	flag.StringVar(&o.appInsert, "app-insert", "", "the application's own statement in each transaction (tx)")
	flag.Float64Var(&o.rate, "rate", 500, "triggers a second (open)")
	flag.DurationVar(&o.duration, "duration", 20*time.Second, "how long (loop, open, tx)")
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
	if o.mode == "tx" || o.mode == "many" {
		return clientMode(ctx, o)
	}
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
	case "open":
		r := runOpenLoop(ctx, openSchedule{Rate: o.rate, Window: o.duration}, o.loops, func(ctx context.Context) error {
			_, err := s.Trigger(ctx, store.TriggerRequest{Workflow: o.workflow, Actor: "bench"})
			return err
		})
		res = result{Triggered: r.Triggered, Errors: r.Errors, FirstError: r.FirstError, LagsMS: r.LagsMS}
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
