//go:build ffdash

// Command ffdash times the dashboard's refresh: the reads `ffctl tui`
// makes every refresh (tui.StoreSource: Runs, Leases, Outbox, Dead,
// Workers), -n times one after another after a warm-up, against -db. The
// driver builds it inside the current tree only (go build -overlay, as
// fftrigger, with -tags ffdash: the benchmark's own module does not
// require the dashboard's dependencies), for the retention workload W7.
//
// It prints one JSON object: {"refreshes":N,"ms_per_refresh":M}.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/tui"
)

func main() {
	db := flag.String("db", "", "database URL")
	n := flag.Int("n", 200, "refreshes timed")
	flag.Parse()
	ms, err := run(context.Background(), *db, *n)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ffdash:", err)
		os.Exit(1)
	}
	_ = json.NewEncoder(os.Stdout).Encode(map[string]any{"refreshes": *n, "ms_per_refresh": ms})
}

func run(ctx context.Context, db string, n int) (float64, error) {
	s, err := store.Open(ctx, db, store.Options{MaxConns: 2})
	if err != nil {
		return 0, fmt.Errorf("open store: %w", err)
	}
	defer s.Close()
	src := tui.NewStoreSource(s, "ffdash")
	refresh := func() error {
		if _, err := src.Runs(ctx, tui.RunFilter{}); err != nil {
			return fmt.Errorf("runs: %w", err)
		}
		if _, err := src.Leases(ctx); err != nil {
			return fmt.Errorf("leases: %w", err)
		}
		if _, err := src.Outbox(ctx); err != nil {
			return fmt.Errorf("outbox: %w", err)
		}
		if _, err := src.Dead(ctx); err != nil {
			return fmt.Errorf("dead: %w", err)
		}
		if _, err := src.Workers(ctx); err != nil {
			return fmt.Errorf("workers: %w", err)
		}
		return nil
	}
	for range 10 {
		if err := refresh(); err != nil {
			return 0, err
		}
	}
	start := time.Now()
	for range n {
		if err := refresh(); err != nil {
			return 0, err
		}
	}
	return float64(time.Since(start).Microseconds()) / 1000 / float64(n), nil
}
