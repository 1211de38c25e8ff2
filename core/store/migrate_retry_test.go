package store_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// lockedAtVersion1 returns a throwaway database migrated to version 1 only
// and a connection holding ACCESS SHARE on outbox (which migration 2
// alters) in an open transaction; release ends that transaction.
func lockedAtVersion1(t *testing.T) (dbURL string, release func()) {
	t.Helper()
	ctx := t.Context()
	// A database of its own: the migration under test holds goose's
	// advisory lock, which every schema of the shared database waits for.
	dbURL = storetest.NewPrivateDatabase(t)
	db := storetest.MigrateTo(t, dbURL, 1)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `SELECT count(*) FROM outbox`); err != nil {
		t.Fatal(err)
	}
	// The holder's last query names it in the retry log.
	var once sync.Once
	release = func() { once.Do(func() { _ = tx.Rollback() }) }
	t.Cleanup(release)
	return dbURL, release
}

// TestMigrateRetryingWaitsOutALock: a migration whose lock is held by a
// long transaction times out after the session's lock_timeout, is retried
// (logged), and succeeds once the lock is released; while it stays held the
// retries are bounded and the error says why.
func TestMigrateRetryingWaitsOutALock(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		release bool
	}{{"released", true}, {"held", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dbURL, release := lockedAtVersion1(t)
			var logs bytes.Buffer
			var mu sync.Mutex
			log := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			s, err := store.Open(ctx, dbURL, store.Options{MaxConns: 2, LockTimeout: 100 * time.Millisecond, Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			if tc.release {
				go func() {
					// Release once the first retry was logged.
					for ctx.Err() == nil {
						mu.Lock()
						seen := strings.Contains(logs.String(), "retrying")
						mu.Unlock()
						if seen {
							release()
							return
						}
						time.Sleep(20 * time.Millisecond) // poll interval
					}
				}()
			}
			res, err := s.MigrateRetrying(ctx, store.MigrateRetry{Retries: 3, Backoff: 50 * time.Millisecond})
			mu.Lock()
			out := logs.String()
			mu.Unlock()
			if !strings.Contains(out, "migrate: lock not available; retrying") || !strings.Contains(out, "SELECT count(*) FROM outbox") {
				t.Errorf("no retry logged:\n%s", out)
			}
			if tc.release {
				if err != nil {
					t.Fatalf("migrate after the lock was released: %v\n%s", err, out)
				}
				if res.From != 1 || res.To < 2 || len(res.Applied) == 0 {
					t.Fatalf("result %+v, want from 1 to at least 2", res)
				}
				if err := s.CheckSchema(ctx); err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, store.ErrMigrationLockTimeout) || !store.IsLockTimeout(err) || !strings.Contains(err.Error(), "gave up after 4 attempts") {
				t.Fatalf("err %v, want ErrMigrationLockTimeout after 4 attempts", err)
			}
			if testing.Verbose() {
				t.Log(out)
			}
			if err := s.CheckSchema(ctx); !errors.Is(err, store.ErrSchemaOutdated) {
				t.Fatalf("schema after the failed migration: %v, want outdated", err)
			}
		})
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
