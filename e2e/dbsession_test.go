package e2e

// Mode 39: bounded database sessions. A held snapshot (a forgotten BEGIN)
// is reported by every daemon (metrics and a log warning), and `ffctl
// migrate` never queues without bound behind a transaction holding a lock
// on a table it alters.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flowforge/flowforge/core/store/storetest"
	"github.com/flowforge/flowforge/e2e/harness"
)

// TestHeldSnapshotIsReportedByTheDaemon holds a REPEATABLE READ transaction
// with a snapshot open on the stack's private database (the horizon is per
// database: a schema in the shared one would see every other test's
// transactions). The scheduler's /metrics shows the horizon's age rising,
// its log warns (naming the holder) once the test-configured threshold
// passes, and both clear when the transaction ends.
func TestHeldSnapshotIsReportedByTheDaemon(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{DatabaseURL: storetest.NewPrivateDatabase(t)})
	d := s.DaemonWithHealth(t, "scheduler", "scheduler", "--db-health-interval", "200ms", "--xmin-horizon-warn", "3s")
	addr := d.Health
	d.WaitForLog(t, "daemon: started", 20*time.Second)
	const horizon = "flowforge_db_xmin_horizon_seconds"
	harness.Eventually(t, 10*time.Second, "horizon metric exported", func() (bool, error) {
		body, err := harness.MetricsText(addr)
		return strings.Contains(body, horizon+" "), err
	})

	ctx := t.Context()
	cfg, err := pgx.ParseConfig(s.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = "forgotten_begin"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT count(*) FROM task_runs`); err != nil { // takes the snapshot
		t.Fatal(err)
	}

	var first float64
	harness.Eventually(t, 10*time.Second, "the held snapshot's age on /metrics", func() (bool, error) {
		v, _, err := harness.Scrape(addr, horizon)
		first = v
		return v >= 0.5, err
	})
	if strings.Contains(d.Logs(), "xmin horizon held back") {
		t.Fatalf("warned before the %s threshold (age %.1fs)", "3s", first)
	}
	harness.Eventually(t, 10*time.Second, "the age rises", func() (bool, error) {
		v, _, err := harness.Scrape(addr, horizon)
		return v >= first+1, err
	})
	if v := harness.Metric(t, addr, "flowforge_db_oldest_transaction_seconds"); v < first {
		t.Errorf("flowforge_db_oldest_transaction_seconds %.1f below the horizon's %.1f", v, first)
	}
	d.WaitForLog(t, "dbhealth: xmin horizon held back", 15*time.Second)
	for _, want := range []string{`"holder_kind":"session"`, "forgotten_begin", "idle in transaction"} {
		if !strings.Contains(d.Logs(), want) {
			t.Errorf("the warning does not name the holder (%s):\n%s", want, d.Logs())
		}
	}

	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	d.WaitForLog(t, "dbhealth: xmin horizon released", 10*time.Second)
	harness.Eventually(t, 10*time.Second, "the horizon metric falls back", func() (bool, error) {
		v, _, err := harness.Scrape(addr, horizon)
		return v < 1, err
	})
}

// TestMigrateRetriesWhileALockIsHeld: a database at schema version 1 and a
// transaction holding ACCESS SHARE on outbox (which migration 2 alters).
// `ffctl migrate --lock-timeout 200ms` gives up each wait after 200ms (so
// daemons queue behind it at most that long), logs each retry naming the
// holder, and succeeds once the lock is released; with the lock never
// released it fails after its bounded retries with a clear error, exit 1,
// and the schema stays at version 1.
func TestMigrateRetriesWhileALockIsHeld(t *testing.T) {
	bin := harness.BuildFFCTL(t)
	for _, tc := range []struct {
		name    string
		release bool
	}{{"released", true}, {"held", false}} {
		t.Run(tc.name, func(t *testing.T) {
			// A database of its own: the migration under test holds
			// goose's advisory lock, which every schema of the shared
			// database would wait for.
			dbURL := storetest.NewPrivateDatabase(t)
			db := storetest.MigrateTo(t, dbURL, 1)
			ctx := t.Context()
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tx.Rollback() })
			if _, err := tx.ExecContext(ctx, `SELECT count(*) FROM outbox /* lock holder */`); err != nil {
				t.Fatal(err)
			}

			retries := "20"
			if !tc.release {
				retries = "2"
			}
			m := harness.StartProcess(t, "migrate", bin, []string{"migrate", "--lock-timeout", "200ms", "--lock-retries", retries},
				[]string{"FLOWFORGE_DATABASE_URL=" + dbURL, "FLOWFORGE_LOG_LEVEL=info"})
			m.WaitForLog(t, "migrate: lock not available; retrying", 20*time.Second)
			if !strings.Contains(m.Logs(), "lock holder") {
				t.Errorf("the retry does not name the lock holder:\n%s", m.Logs())
			}
			if tc.release {
				if err := tx.Rollback(); err != nil {
					t.Fatal(err)
				}
			}
			code, err := m.Wait(60 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var version int64
			if err := db.QueryRowContext(ctx, `SELECT max(version_id) FROM goose_db_version WHERE is_applied`).Scan(&version); err != nil {
				t.Fatal(err)
			}
			if tc.release {
				if code != 0 || !strings.Contains(m.Logs(), "migrated schema from version 1 to") || version < 2 {
					t.Fatalf("exit %d, schema version %d, want 0 and at least 2:\n%s", code, version, m.Logs())
				}
				return
			}
			for _, want := range []string{"migration could not take its locks", "gave up after 3 attempts", "lock holder"} {
				if !strings.Contains(m.Logs(), want) {
					t.Errorf("the failure does not say %q:\n%s", want, m.Logs())
				}
			}
			if code != 1 || version != 1 {
				t.Fatalf("exit %d, schema version %d, want 1 and 1:\n%s", code, version, m.Logs())
			}
		})
	}
}
