package store_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// pollDBHealth reads s.DBHealth until ok accepts it or 15s pass.
func pollDBHealth(t *testing.T, s *store.Store, what string, ok func(store.DBHealth) bool) store.DBHealth {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		h, err := s.DBHealth(t.Context())
		if err != nil {
			t.Fatalf("DBHealth: %v", err)
		}
		if ok(h) {
			return h
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 15s; last reading %+v (holder %+v)", what, h, h.Holder)
		}
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(100 * time.Millisecond): // poll interval
		}
	}
}

// TestDBHealthReportsHeldSnapshot: a REPEATABLE READ transaction that took
// its snapshot and then sits idle (a forgotten BEGIN in psql) is reported
// as the xmin horizon's holder, with an age that grows; once it ends the
// horizon is free again. Dead tuples of the hot tables are counted.
func TestDBHealthReportsHeldSnapshot(t *testing.T) {
	t.Parallel()
	s, dbURL := storetest.Open(t, storetest.NewPrivateDatabase(t))
	ctx := t.Context()

	if h := pollDBHealth(t, s, "nothing holds the horizon at start", func(h store.DBHealth) bool { return h.Holder == nil }); h.HorizonSeconds != 0 || len(h.DeadTuples) != len(store.HotTables()) {
		t.Fatalf("at start: %+v", h)
	}

	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = "forgotten_begin"
	holder, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Close(context.Background()) })
	tx, err := holder.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	isHolder := func(h store.DBHealth) bool {
		return h.Holder != nil && h.Holder.Kind == "session" && h.Holder.Name == strconv.Itoa(pid)
	}
	first := pollDBHealth(t, s, "the held snapshot is reported", func(h store.DBHealth) bool { return isHolder(h) && h.HorizonSeconds > 0.5 })
	if first.Holder.Application != "forgotten_begin" || first.Holder.State != "idle in transaction" {
		t.Errorf("holder %+v, want application forgotten_begin, idle in transaction", first.Holder)
	}
	if first.OldestTransactionSeconds < first.HorizonSeconds {
		t.Errorf("oldest transaction %.1fs younger than the horizon %.1fs", first.OldestTransactionSeconds, first.HorizonSeconds)
	}
	pollDBHealth(t, s, "the held snapshot's age grows", func(h store.DBHealth) bool {
		return isHolder(h) && h.HorizonSeconds >= first.HorizonSeconds+1
	})

	// Dead rows made while the snapshot is held stay (and are counted).
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO idempotency_keys (key, task_run_id, fencing_token)
		SELECT 'k' || g, gen_random_uuid(), 1 FROM generate_series(1, 50) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, `DELETE FROM idempotency_keys`); err != nil {
		t.Fatal(err)
	}
	pollDBHealth(t, s, "dead tuples of idempotency_keys are counted", func(h store.DBHealth) bool { return h.DeadTuples["idempotency_keys"] >= 50 })

	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	pollDBHealth(t, s, "the horizon is released", func(h store.DBHealth) bool { return !isHolder(h) && h.HorizonSeconds < first.HorizonSeconds })
}
