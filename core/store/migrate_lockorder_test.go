package store_test

import (
	"io/fs"
	"path"
	"regexp"
	"strings"

	"context"
	migrations "github.com/flowforge/flowforge/sql"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// TestAMigrationAlteringTwoTablesNeverDeadlocksATrigger forces the
// interleaving of the rolling-upgrade test's deadlock: a trigger's
// transaction holds workflow_runs (its run row is inserted) when `ffctl
// migrate` starts migrations 17 and 18, which alter task_runs and
// workflow_runs; once the migration waits on a lock, the trigger inserts
// into task_runs. A migration that altered task_runs first held it while
// waiting for workflow_runs: a cycle, and PostgreSQL aborted one of the
// two (the trigger, or the migration, which was not retried). The
// migration now takes both tables first, in a trigger's order, waiting
// less than deadlock_timeout, so it is the one to back off: the trigger
// commits and the migration, retried, completes.
func TestAMigrationAlteringTwoTablesNeverDeadlocksATrigger(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dbURL := storetest.NewPrivateDatabase(t)
	db := storetest.MigrateTo(t, dbURL, 16)

	trigger, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = trigger.Rollback() })
	var triggerPID int
	if err := trigger.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&triggerPID); err != nil {
		t.Fatal(err)
	}
	// What a trigger's INSERT INTO workflow_runs takes.
	if _, err := trigger.ExecContext(ctx, `LOCK TABLE workflow_runs IN ROW EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}

	s, err := store.Open(ctx, dbURL, store.Options{MaxConns: 2, LockTimeout: store.MigrateLockTimeoutDefault})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	type outcome struct {
		res store.MigrationResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := s.MigrateRetrying(ctx, store.MigrateRetry{Retries: 20, Backoff: 50 * time.Millisecond})
		done <- outcome{res, err}
	}()

	// The migration waits on a lock the trigger holds.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_locks WHERE NOT granted AND pid <> $1`, triggerPID).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the migration never waited on the trigger's lock")
		}
		time.Sleep(5 * time.Millisecond) // poll interval
	}
	// What the trigger's INSERT INTO task_runs takes, then its commit.
	if _, err := trigger.ExecContext(ctx, `LOCK TABLE task_runs IN ROW EXCLUSIVE MODE`); err != nil {
		t.Fatalf("the trigger's insert into task_runs, while the migration waits: %v", err)
	}
	if err := trigger.Commit(); err != nil {
		t.Fatalf("the trigger's commit: %v", err)
	}
	got := <-done
	if got.err != nil {
		t.Fatalf("migrate after the trigger committed: %v", got.err)
	}
	w, err := store.EmbeddedSchemaWindow()
	if err != nil {
		t.Fatal(err)
	}
	if got.res.To != w.Latest {
		t.Fatalf("migrated to %d, want %d", got.res.To, w.Latest)
	}
}

// hotTables are the tables every trigger writes, in the order it takes
// them (sql/migrations/README.md, "Locks under load").
var hotTables = []string{"workflow_runs", "task_runs", "outbox"}

// TestMigrationsAlteringSeveralHotTablesLockThemFirst: an Up section that
// alters two or more of the hot tables starts (before its first ALTER) with
// a short lock_timeout and a LOCK TABLE naming them in a trigger's order.
func TestMigrationsAlteringSeveralHotTablesLockThemFirst(t *testing.T) {
	t.Parallel()
	ms, err := store.EmbeddedMigrations()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		body, err := fs.ReadFile(migrations.Migrations, path.Join(migrations.Dir, m.Path))
		if err != nil {
			t.Fatal(err)
		}
		up, _, _ := strings.Cut(string(body), "-- +goose Down")
		_, up, _ = strings.Cut(up, "-- +goose Up")
		var altered []string
		for _, tbl := range hotTables {
			if regexp.MustCompile(`(?i)ALTER TABLE\s+` + tbl + `\b`).MatchString(up) {
				altered = append(altered, tbl)
			}
		}
		if len(altered) < 2 {
			continue
		}
		firstAlter := regexp.MustCompile(`(?i)ALTER TABLE`).FindStringIndex(up)[0]
		lock := regexp.MustCompile(`(?i)LOCK TABLE ([a-z_, ]+) IN ACCESS EXCLUSIVE MODE`).FindStringSubmatchIndex(up)
		timeout := strings.Index(up, "set_config('lock_timeout'")
		if lock == nil || lock[0] > firstAlter || timeout < 0 || timeout > lock[0] {
			t.Errorf("%s alters %v: it must first set a short lock_timeout and LOCK TABLE %s IN ACCESS EXCLUSIVE MODE (sql/migrations/README.md)",
				m.Path, altered, strings.Join(altered, ", "))
			continue
		}
		if got := strings.Join(strings.Fields(strings.ReplaceAll(up[lock[2]:lock[3]], ",", " ")), ", "); got != strings.Join(altered, ", ") {
			t.Errorf("%s locks %q, want %q (every altered hot table, in a trigger's order)", m.Path, got, strings.Join(altered, ", "))
		}
	}
}
