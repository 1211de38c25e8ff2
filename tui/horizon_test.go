package tui

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flowforge/flowforge/core/store/storetest"
)

// TestOutboxWarnsOnlyPastTheHorizonThreshold: the Outbox screen shows the
// held-back-horizon warning (holder sanitised) only once the hold reaches
// the threshold; below it, the dimmed database line.
func TestOutboxWarnsOnlyPastTheHorizonThreshold(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		held    float64
		warn    bool
		wantSub string
	}{
		{"held past the threshold", 372, true, "xmin horizon held back 6m12s"},
		{"held below the threshold", 120, false, "database: oldest transaction 2m"},
		{"nothing held", 0, false, "xmin horizon 0ms · 6000 dead tuples"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			f.outbox.DB.HorizonSeconds = tc.held
			f.outbox.DB.OldestTransactionSeconds = tc.held
			if tc.held == 0 {
				f.outbox.DB.Holder = nil
			}
			h := newHarness(t, f, Options{})
			h.size(140, 30)
			h.keys("4")
			v := h.view()
			if got := strings.Contains(v, "xmin horizon held back"); got != tc.warn {
				t.Fatalf("warning shown %v, want %v:\n%s", got, tc.warn, v)
			}
			if !strings.Contains(v, tc.wantSub) {
				t.Fatalf("view lacks %q:\n%s", tc.wantSub, v)
			}
			if strings.Contains(v, "\x1b[2J") {
				t.Fatal("the holder's application name reached the terminal unsanitised")
			}
		})
	}
}

// TestStoreSourceOutboxReportsHeldHorizon: StoreSource.Outbox carries the
// database's horizon, read through store.DBHealth, and the threshold.
func TestStoreSourceOutboxReportsHeldHorizon(t *testing.T) {
	t.Parallel()
	s, url := storetest.Open(t, storetest.NewPrivateDatabase(t))
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
		t.Fatal(err)
	}
	src := NewStoreSource(s, "test")
	src.HorizonWarn = time.Second
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, err := src.Outbox(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d.HorizonWarn != time.Second {
			t.Fatalf("HorizonWarn %s, want 1s", d.HorizonWarn)
		}
		if d.DB.Holder != nil && d.DB.HorizonSeconds >= 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the held snapshot was not reported within 10s: %+v", d.DB)
		}
		time.Sleep(100 * time.Millisecond) // poll interval
	}
}
