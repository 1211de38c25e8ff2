package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Defaults of MigrateRetry, used by `ffctl migrate`.
const (
	// MigrateLockTimeoutDefault is the lock_timeout of a migration's
	// session (Options.LockTimeout): the longest a migration's lock request
	// (ALTER TABLE wants ACCESS EXCLUSIVE) queues behind a long
	// transaction, and so the longest every daemon statement on that table
	// queues behind the migration.
	MigrateLockTimeoutDefault = 5 * time.Second
	// MigrateLockRetriesDefault is how many times a migration that timed
	// out on a lock is tried again.
	MigrateLockRetriesDefault = 5
	// MigrateRetryBackoffDefault is the first pause between attempts; it
	// doubles up to MigrateRetryBackoffMax.
	MigrateRetryBackoffDefault = time.Second
	// MigrateRetryBackoffMax caps the pause between attempts.
	MigrateRetryBackoffMax = 10 * time.Second
)

// ErrMigrationLockTimeout is wrapped by MigrateRetrying when every attempt
// timed out waiting for a lock.
var ErrMigrationLockTimeout = errors.New("migration could not take its locks")

// MigrateRetry bounds MigrateRetrying's retries of a migration that timed
// out waiting for a lock (the store's Options.LockTimeout, which must be
// set for a lock wait to time out at all).
type MigrateRetry struct {
	// Retries is how many times to try again after the first attempt; 0
	// tries once.
	Retries int
	// Backoff is the first pause between attempts (doubling, capped at
	// MigrateRetryBackoffMax); 0 means MigrateRetryBackoffDefault.
	Backoff time.Duration
}

// MigrateRetrying is Migrate, tried again (1+r.Retries attempts in all, with
// doubling pauses) while a migration fails with a lock timeout or is the
// victim of a deadlock (it rolled back; trying again is safe): a
// migration then never queues for long behind a long transaction while
// every daemon statement on the table queues behind it. Each retry is
// logged with the oldest transaction holding a lock on a table of the
// schema, the likely culprit. A migration
// that failed rolled back (goose runs each in a transaction) and the ones
// before it stay applied. Errors: as Migrate; after the last attempt timed
// out, one wrapping ErrMigrationLockTimeout and the last lock error; ctx's
// error when it ends during a pause.
func (s *Store) MigrateRetrying(ctx context.Context, r MigrateRetry) (MigrationResult, error) {
	pause := r.Backoff
	if pause <= 0 {
		pause = MigrateRetryBackoffDefault
	}
	var out MigrationResult
	for attempt := 1; ; attempt++ {
		res, err := s.Migrate(ctx)
		if attempt == 1 {
			out.From = res.From
		}
		out.Applied = append(out.Applied, res.Applied...)
		out.To = res.To
		if err == nil || !(IsLockTimeout(err) || isDeadlock(err)) {
			if err == nil && attempt > 1 {
				s.log.Info("migrate: locks taken after retrying", "attempt", attempt)
			}
			return out, err
		}
		holder := s.oldestLockHolder(ctx)
		if attempt > r.Retries {
			return out, fmt.Errorf("%w: gave up after %d attempts, each waiting on a lock held by another transaction (oldest holding a lock on a FlowForge table: %s): %w",
				ErrMigrationLockTimeout, attempt, holder, err)
		}
		s.log.Warn("migrate: lock not available; retrying", "attempt", attempt, "attempts", r.Retries+1,
			"retry_in", pause.String(), "lock_holder", holder, "error", err)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return out, fmt.Errorf("migrate: %w (while retrying after: %w)", ctx.Err(), err)
		case <-t.C:
		}
		pause = min(2*pause, MigrateRetryBackoffMax)
	}
}

const qOldestLockHolder = `
SELECT a.pid::text, coalesce(a.application_name, ''), coalesce(a.state, ''), left(coalesce(a.query, ''), 200),
       coalesce(extract(epoch FROM now() - a.xact_start), 0)::float8
FROM pg_locks l
JOIN pg_class c ON c.oid = l.relation
JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND c.relnamespace = current_schema()::regnamespace AND a.pid <> pg_backend_pid()
ORDER BY a.xact_start ASC NULLS LAST
LIMIT 1`

// isDeadlock reports whether err is PostgreSQL's deadlock_detected
// (SQLSTATE 40P01): the transaction was aborted to break a cycle.
func isDeadlock(err error) bool { return pgCode(err) == "40P01" }

// oldestLockHolder describes the oldest transaction holding a lock on a
// table of the current schema, for messages; "none seen" when there is
// none or the read fails.
func (s *Store) oldestLockHolder(ctx context.Context) string {
	h := HorizonHolder{Kind: "session"}
	err := s.db.QueryRowContext(ctx, qOldestLockHolder).Scan(&h.Name, &h.Application, &h.State, &h.Query, &h.Seconds)
	if err != nil {
		return "none seen"
	}
	return h.String()
}
