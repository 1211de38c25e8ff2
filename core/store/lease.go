package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jmoiron/sqlx"

	"github.com/flowforge/flowforge/core"
)

// ErrLockTimeout wraps the error of a claim or renewal that waited longer
// than LockWaitFor for a lock: it was rolled back and wrote nothing (the
// error is not ambiguous).
var ErrLockTimeout = errors.New("lock wait exceeded its bound; nothing was written")

// asLockTimeout marks a lock_timeout error (SQLSTATE 55P03) with
// ErrLockTimeout.
func asLockTimeout(err error) error {
	if pgCode(err) == "55P03" {
		return fmt.Errorf("%w: %w", ErrLockTimeout, err)
	}
	return err
}

// LockWaitMin is the least lock wait LockWaitFor allows.
const LockWaitMin = 50 * time.Millisecond

// LockWaitFor is how long a claim or a renewal of a lease of length lease
// may wait for a row or table lock before it fails (lock_timeout, SQLSTATE
// 55P03) instead of committing late: a quarter of the lease, at least
// LockWaitMin. A renewal that fails so is retried at once by the worker's
// heartbeat, well within the lease.
func LockWaitFor(lease time.Duration) time.Duration {
	return max(lease/4, LockWaitMin)
}

// setLockTimeout bounds the lock waits of the rest of tx (SET LOCAL: the
// setting ends with the transaction, the pooled session keeps its own).
func setLockTimeout(ctx context.Context, tx *sqlx.Tx, d time.Duration) error {
	if _, err := tx.ExecContext(ctx, qLocalLockTimeout, lockTimeoutSetting(d)); err != nil {
		return fmt.Errorf("set lock_timeout: %w", err)
	}
	return nil
}

// RenewResult is the outcome of a heartbeat.
type RenewResult struct {
	// OK is false when the lease was lost: the task is no longer RUNNING
	// with this token. The handler's context must be cancelled and its
	// outcome discarded.
	OK bool
	// Stop is true when the run was cancelled (or failed under fail_fast):
	// the handler's context should be cancelled with core.ErrRunCancelled.
	Stop bool
}

// qRenew extends a lease, measured from clock_timestamp() (the moment the
// row is written, after any lock wait: a renewal that waited behind a lock
// does not commit a lease already spent), and never backwards: of two
// renewals queued behind one lock, the one computed earlier may commit
// last, and GREATEST keeps the later expiry. $4 is the state the task must
// be in (RUNNING; a parameter rather than a literal: see claimFence).
const qRenew = `
UPDATE task_runs t
   SET lease_expires_at = GREATEST(t.lease_expires_at, clock_timestamp() + $3::bigint * interval '1 millisecond'),
       heartbeat_at = GREATEST(t.heartbeat_at, clock_timestamp())
  FROM workflow_runs r
 WHERE t.id = $1 AND t.state = $4::text AND t.fencing_token = $2 AND r.id = t.run_id
RETURNING (r.cancel_requested_at IS NOT NULL OR (r.fail_fast AND r.state = 'FAILED' AND NOT t.on_failure)) AS stop`

// Renew extends the lease of a RUNNING task held with token to lease past
// the database's clock_timestamp() at the write (never moving it
// backwards), in one round trip (inOneTrip). It waits at most
// LockWaitFor(lease) for a lock, then fails with an error rather than
// commit late; an error may also mean the renewal
// committed and its reply was lost, which the next renewal makes harmless.
func (s *Store) Renew(ctx context.Context, id uuid.UUID, token int64, lease time.Duration) (RenewResult, error) {
	var stops []bool
	err := s.inOneTrip(ctx, tripSettings{LockWait: LockWaitFor(lease), KeyPlan: true}, qRenew, []any{id, token, lease.Milliseconds(), string(core.TaskRunning)}, func(r pgx.Rows) error {
		var err error
		stops, err = pgx.CollectRows(r, pgx.RowTo[bool])
		return err
	})
	if err != nil {
		return RenewResult{}, fmt.Errorf("renew lease of task %s: %w", id, asLockTimeout(err))
	}
	if len(stops) == 0 {
		return RenewResult{}, nil
	}
	return RenewResult{OK: true, Stop: stops[0]}, nil
}
