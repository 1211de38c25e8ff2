package store

import (
	"context"
	"encoding/json"
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

// qClaimKey takes the key when it is free, or when its owner is no longer
// RUNNING with the token it took it with (it died, failed or was reaped).
// A completed key is never taken over.
const qClaimKey = `
INSERT INTO idempotency_keys AS k (key, task_run_id, fencing_token) VALUES ($1, $2, $3)
ON CONFLICT (key) DO UPDATE SET task_run_id = EXCLUDED.task_run_id, fencing_token = EXCLUDED.fencing_token
 WHERE k.completed_at IS NULL
   AND NOT EXISTS (SELECT 1 FROM task_runs o
                    WHERE o.id = k.task_run_id AND o.state = 'RUNNING' AND o.fencing_token = k.fencing_token)
RETURNING task_run_id`

// ClaimIdempotencyKey makes the attempt (task run id, token) the key's owner
// if nobody live owns it, reports a completed key's result, or says to wait.
// The row lock of the key's primary key serialises concurrent claimers, so
// at most one attempt runs the handler for a key at a time and a completed
// result is reused by every later one.
func (s *Store) ClaimIdempotencyKey(ctx context.Context, key string, id uuid.UUID, token int64) (KeyClaim, error) {
	rows, err := s.db.QueryxContext(ctx, qClaimKey, key, id, token)
	if err != nil {
		return KeyClaim{}, fmt.Errorf("claim idempotency key: %w", err)
	}
	owned := rows.Next()
	rows.Close()
	if err := rows.Err(); err != nil {
		return KeyClaim{}, fmt.Errorf("claim idempotency key: %w", err)
	}
	if owned {
		return KeyClaim{Owned: true}, nil
	}
	var row struct {
		Result []byte `db:"result"`
		Done   bool   `db:"done"`
	}
	if err := s.db.GetContext(ctx, &row, `SELECT result, completed_at IS NOT NULL AS done FROM idempotency_keys WHERE key = $1`, key); err != nil {
		return KeyClaim{}, fmt.Errorf("read idempotency key: %w", err)
	}
	if row.Done {
		res := json.RawMessage(row.Result)
		if len(res) == 0 {
			res = json.RawMessage("null")
		}
		return KeyClaim{Done: true, Result: res}, nil
	}
	return KeyClaim{}, nil
}
