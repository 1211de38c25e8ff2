package dbhealth

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon/metrics"
)

// fakeStore returns its readings in turn (the last one repeats).
type fakeStore struct {
	readings []store.DBHealth
	err      error
}

func (f *fakeStore) DBHealth(context.Context) (store.DBHealth, error) {
	if f.err != nil {
		return store.DBHealth{}, f.err
	}
	h := f.readings[0]
	if len(f.readings) > 1 {
		f.readings = f.readings[1:]
	}
	return h, nil
}

func reading(at time.Time, heldSeconds float64) store.DBHealth {
	h := store.DBHealth{Now: at, OldestTransactionSeconds: heldSeconds + 1, HorizonXIDs: 42,
		DeadTuples: map[string]int64{"task_runs": 7, "outbox": 3}}
	if heldSeconds > 0 {
		h.HorizonSeconds = heldSeconds
		h.Holder = &store.HorizonHolder{Kind: "session", Name: "4242", Application: "psql", State: "idle in transaction", Seconds: heldSeconds, Query: "SELECT 1"}
	}
	return h
}

// TestWatcherExportsAndWarnsRateLimited: each read sets the gauges; a hold
// past Warn is warned about once, again only after WarnEvery (database
// clock), and its release is logged; a failed read keeps the gauges.
func TestWatcherExportsAndWarnsRateLimited(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	fs := &fakeStore{readings: []store.DBHealth{
		reading(t0, 10),                     // held, below Warn
		reading(t0.Add(1*time.Minute), 70),  // past Warn: warn
		reading(t0.Add(2*time.Minute), 130), // within WarnEvery of the last warning: quiet
		reading(t0.Add(4*time.Minute), 250), // WarnEvery later: warn again
		reading(t0.Add(5*time.Minute), 0),   // released
	}}
	var logs bytes.Buffer
	m := metrics.New()
	w, err := New(Config{Store: fs, Warn: time.Minute, WarnEvery: 150 * time.Second, Logger: slog.New(slog.NewJSONHandler(&logs, nil)), Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	wantWarns := []int{0, 1, 1, 2, 2}
	wantHorizon := []float64{10, 70, 130, 250, 0}
	for i := range wantWarns {
		if _, ok := w.runOnce(ctx); !ok {
			t.Fatalf("read %d failed", i)
		}
		if got := strings.Count(logs.String(), "xmin horizon held back"); got != wantWarns[i] {
			t.Fatalf("after read %d: %d warnings, want %d:\n%s", i, got, wantWarns[i], logs.String())
		}
		if got := testutil.ToFloat64(m.DBXminHorizonSeconds); got != wantHorizon[i] {
			t.Fatalf("after read %d: flowforge_db_xmin_horizon_seconds %v, want %v", i, got, wantHorizon[i])
		}
	}
	if !strings.Contains(logs.String(), `"holder_name":"4242"`) || !strings.Contains(logs.String(), "xmin horizon released") {
		t.Fatalf("warning without the holder or no release line:\n%s", logs.String())
	}
	if got := testutil.ToFloat64(m.DBOldestTransactionSeconds); got != 1 {
		t.Errorf("flowforge_db_oldest_transaction_seconds %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.DBXminHorizonXIDs); got != 42 {
		t.Errorf("flowforge_db_xmin_horizon_xids %v, want 42", got)
	}
	if got := testutil.ToFloat64(m.DBDeadTuples.WithLabelValues("task_runs")); got != 7 {
		t.Errorf("flowforge_db_dead_tuples{table=task_runs} %v, want 7", got)
	}

	fs.err = errors.New("database down")
	if _, ok := w.runOnce(ctx); ok {
		t.Fatal("a failed read reported success")
	}
	if got := testutil.ToFloat64(m.DBDeadTuples.WithLabelValues("task_runs")); got != 7 {
		t.Errorf("a failed read changed the gauges: %v", got)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults", Config{Store: &fakeStore{}}, true},
		{"no store", Config{}, false},
		{"negative warn", Config{Store: &fakeStore{}, Warn: -time.Second}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := New(tc.cfg)
			if (err == nil) != tc.ok {
				t.Fatalf("err %v, want ok=%v", err, tc.ok)
			}
			if tc.ok && (w.cfg.Interval != IntervalDefault || w.cfg.Warn != WarnDefault || w.cfg.WarnEvery != WarnEveryDefault) {
				t.Fatalf("defaults not applied: %+v", w.cfg)
			}
		})
	}
}
