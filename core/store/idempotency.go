package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
)

// KeyClaim is the outcome of ClaimIdempotencyKey.
type KeyClaim struct {
	// Owned: this attempt now owns the key and must run the handler.
	Owned bool
	// Done: an earlier task run completed the key; Result is its result and
	// the handler must not run.
	Done   bool
	Result json.RawMessage
	// Otherwise another live attempt owns the key: wait and ask again.
}

// qInsertKey takes a key nobody has claimed yet, for a claimer that is
// RUNNING with its token (a reaped attempt must not start the handler).
const qInsertKey = `
INSERT INTO idempotency_keys (key, task_run_id, fencing_token)
SELECT $1, $2, $3 WHERE EXISTS (SELECT 1 FROM task_runs WHERE id = $2 AND state = 'RUNNING' AND fencing_token = $3)
ON CONFLICT (key) DO NOTHING
RETURNING true`

// qLockKey locks the key's row: from here until the transaction ends no other
// claimer (and no Finish recording the key's result) can change it.
const qLockKey = `
SELECT task_run_id, fencing_token, result, completed_at IS NOT NULL AS done
  FROM idempotency_keys WHERE key = $1
   FOR UPDATE`

// qOwnerLive asks whether the key's owner still runs with the token it took
// the key with. It is a statement of its own, issued after qLockKey returned,
// so (READ COMMITTED) its snapshot is taken after the lock was granted and
// contains every commit before it: the owner's own key claim, and therefore
// the owner's Claim (READY -> RUNNING with that token), which the worker
// commits before it claims the key. A check inside the claiming statement
// would use that statement's snapshot, taken before it waited for the row,
// and could see a just-claimed owner as not yet RUNNING.
// It also asks the same of the claimer.
const qOwnerLive = `
SELECT EXISTS (SELECT 1 FROM task_runs WHERE id = $1 AND state = 'RUNNING' AND fencing_token = $2) AS owner,
       EXISTS (SELECT 1 FROM task_runs WHERE id = $3 AND state = 'RUNNING' AND fencing_token = $4) AS claimer`

// qTakeOverKey moves an uncompleted key from the owner read under the lock
// to the claimer: one statement, guarded by that owner and token.
const qTakeOverKey = `
UPDATE idempotency_keys SET task_run_id = $2, fencing_token = $3
 WHERE key = $1 AND completed_at IS NULL AND task_run_id = $4 AND fencing_token = $5`

// ClaimIdempotencyKey makes the attempt (task run id, token) the key's owner
// if nobody live owns it, reports a completed key's result, or says to wait
// (the zero KeyClaim). It runs in one READ COMMITTED transaction: take a
// free key; otherwise lock the key's row, then decide in a later statement
// whether its owner is still RUNNING with its token, and take the key over
// only if not. So while an owner's lease is valid no other attempt takes its
// key, and a completed result is reused by every later claimer. The owner
// itself asking again is told it owns the key. A claimer that is no longer
// RUNNING with token (reaped while it waited) never takes the key: it is
// told to wait, and its heartbeat cancels it. Errors are database errors
// ("claim idempotency key: ..."); nothing changed then.
func (s *Store) ClaimIdempotencyKey(ctx context.Context, key string, id uuid.UUID, token int64) (KeyClaim, error) {
	tx, err := s.db.BeginTxx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return KeyClaim{}, fmt.Errorf("claim idempotency key: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	var inserted bool
	switch err := tx.GetContext(ctx, &inserted, qInsertKey, key, id, token); {
	case err == nil:
		if err := tx.Commit(); err != nil {
			return KeyClaim{}, fmt.Errorf("claim idempotency key: commit: %w", err)
		}
		return KeyClaim{Owned: true}, nil
	case !errors.Is(err, sql.ErrNoRows):
		return KeyClaim{}, fmt.Errorf("claim idempotency key: %w", err)
	}
	var row struct {
		Owner  uuid.UUID `db:"task_run_id"`
		Token  int64     `db:"fencing_token"`
		Result []byte    `db:"result"`
		Done   bool      `db:"done"`
	}
	switch err := tx.GetContext(ctx, &row, qLockKey, key); {
	case errors.Is(err, sql.ErrNoRows):
		// No key row: the claimer is not RUNNING with its token (so it
		// inserted nothing), or the row was deleted since: wait, ask again.
		return KeyClaim{}, nil
	case err != nil:
		return KeyClaim{}, fmt.Errorf("claim idempotency key: lock: %w", err)
	}
	switch {
	case row.Done:
		res := json.RawMessage(row.Result)
		if len(res) == 0 {
			res = json.RawMessage("null")
		}
		return KeyClaim{Done: true, Result: res}, nil
	case row.Owner == id && row.Token == token:
		return KeyClaim{Owned: true}, nil
	}
	var live struct {
		Owner   bool `db:"owner"`
		Claimer bool `db:"claimer"`
	}
	if err := tx.GetContext(ctx, &live, qOwnerLive, row.Owner, row.Token, id, token); err != nil {
		return KeyClaim{}, fmt.Errorf("claim idempotency key: read owner %s: %w", row.Owner, err)
	}
	if live.Owner || !live.Claimer {
		return KeyClaim{}, nil
	}
	r, err := tx.ExecContext(ctx, qTakeOverKey, key, id, token, row.Owner, row.Token)
	if err != nil {
		return KeyClaim{}, fmt.Errorf("claim idempotency key: take over from %s: %w", row.Owner, err)
	}
	if n, _ := r.RowsAffected(); n != 1 {
		return KeyClaim{}, nil
	}
	if err := tx.Commit(); err != nil {
		return KeyClaim{}, fmt.Errorf("claim idempotency key: commit: %w", err)
	}
	return KeyClaim{Owned: true}, nil
}
