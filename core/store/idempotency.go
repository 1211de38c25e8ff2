package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
)

// KeyClaim is the outcome of ClaimIdempotencyKey.
type KeyClaim struct {
	// Owned: this attempt now owns the key and must run the handler.
	Owned bool
	// Done: an earlier task run completed the key; Result is its result and
	// the handler must not run. From names that task run: the finish of a
	// reuse records it (FinishRequest.ReusedFrom).
	Done   bool
	Result json.RawMessage
	From   KeySource
	// Otherwise another live attempt owns the key: wait and ask again.
}

// KeySource names the task run whose recorded result another task run
// reused: run show and task show print it as "result reused from task run
// X of run Y", and -o json as "reused_from": {"task_run_id", "run_id"}.
type KeySource struct {
	TaskRunID uuid.UUID `json:"task_run_id"`
	// RunID is uuid.Nil when the source task run no longer exists.
	RunID uuid.UUID `json:"run_id"`
}

// Scan implements sql.Scanner for a jsonb {"task_run_id", "run_id"}.
func (k *KeySource) Scan(src any) error {
	if err := scanJSONObject(src, "reused_from", k); err != nil {
		return err
	}
	return nil
}

// String is "task run X of run Y", as history and tables print it.
func (k KeySource) String() string {
	if k.RunID == uuid.Nil {
		return fmt.Sprintf("task run %s (its run no longer exists)", k.TaskRunID)
	}
	return fmt.Sprintf("task run %s of run %s", k.TaskRunID, k.RunID)
}

// qInsertKey takes a key nobody has claimed yet, for a claimer that is
// RUNNING with its token (a reaped attempt must not start the handler).
const qInsertKey = `
INSERT INTO idempotency_keys (key, task_run_id, fencing_token)
SELECT $1, $2, $3 WHERE EXISTS (SELECT 1 FROM task_runs WHERE id = $2 AND state = 'RUNNING' AND fencing_token = $3)
ON CONFLICT (key) DO NOTHING
RETURNING true`

// qLockKey locks the key's row: from here until the transaction ends no other
// claimer, no FinishMany recording the key's result and no ForgetIdempotencyKey
// can change it. expired: the key was completed longer ago than the
// claimer's idempotency_ttl (database clock; never when it has none), so
// its result is not reused and the key may be taken over.
const qLockKey = `
SELECT task_run_id, fencing_token, result, completed_at IS NOT NULL AS done,
       coalesce(` + keyExpired + `, false) AS expired
  FROM idempotency_keys WHERE key = $1
   FOR UPDATE`

// keyExpired is true when the key row's result is older than the TTL of
// the claiming task run $2 (NULL when it has none, or the key is not
// completed). now() is the transaction's start: the lock read and the
// takeover judge the same instant.
const keyExpired = `completed_at + (SELECT c.idempotency_ttl_ms FROM task_runs c WHERE c.id = $2) * interval '1 millisecond' <= now()`

// qSourceRun reads the run of the task run that completed a key, after the
// key's row lock was granted (a fresh snapshot): nothing if it was deleted.
const qSourceRun = `SELECT run_id FROM task_runs WHERE id = $1`

// qOwnerLive asks whether the key's owner still runs with the token it took
// the key with. It is a statement of its own, issued after qLockKey returned,
// so (READ COMMITTED) its snapshot is taken after the lock was granted and
// contains every commit before it: the owner's own key claim, and therefore
// the owner's ClaimMany (READY -> RUNNING with that token), which the worker
// commits before it claims the key. A check inside the claiming statement
// would use that statement's snapshot, taken before it waited for the row,
// and could see a just-claimed owner as not yet RUNNING.
// It also asks the same of the claimer.
const qOwnerLive = `
SELECT EXISTS (SELECT 1 FROM task_runs WHERE id = $1 AND state = 'RUNNING' AND fencing_token = $2) AS owner,
       EXISTS (SELECT 1 FROM task_runs WHERE id = $3 AND state = 'RUNNING' AND fencing_token = $4) AS claimer`

// qTakeOverKey moves an uncompleted key, or a completed one whose result
// is older than the claimer's TTL, from the owner read under the lock to
// the claimer: one statement, guarded by that owner and token. An expired
// result is cleared (its task run keeps it).
const qTakeOverKey = `
UPDATE idempotency_keys SET task_run_id = $2, fencing_token = $3, result = NULL, completed_at = NULL
 WHERE key = $1 AND (completed_at IS NULL OR ` + keyExpired + `) AND task_run_id = $4 AND fencing_token = $5`

// ClaimIdempotencyKey makes the attempt (task run id, token) the key's owner
// if nobody live owns it, reports a completed key's result and the task run
// that recorded it (KeyClaim.From), or says to wait (the zero KeyClaim). A
// completed key whose result is older than the claimer's idempotency_ttl
// (completed_at + ttl <= now(), database clock) counts as free: it is taken
// over like a failed owner's key, and the handler runs again.
//
// It runs in one READ COMMITTED transaction: take a free key; otherwise
// lock the key's row, then decide in a later statement whether its owner is
// still RUNNING with its token, and take the key over only if not. So while
// an owner's lease is valid no other attempt takes its key, and a completed
// result is reused by every later claimer within its TTL. The owner
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
		Owner   uuid.UUID `db:"task_run_id"`
		Token   int64     `db:"fencing_token"`
		Result  []byte    `db:"result"`
		Done    bool      `db:"done"`
		Expired bool      `db:"expired"`
	}
	switch err := tx.GetContext(ctx, &row, qLockKey, key, id); {
	case errors.Is(err, sql.ErrNoRows):
		// No key row: the claimer is not RUNNING with its token (so it
		// inserted nothing), or the row was deleted since: wait, ask again.
		return KeyClaim{}, nil
	case err != nil:
		return KeyClaim{}, fmt.Errorf("claim idempotency key: lock: %w", err)
	}
	switch {
	case row.Done && !row.Expired:
		res := json.RawMessage(row.Result)
		if len(res) == 0 {
			res = json.RawMessage("null")
		}
		from := KeySource{TaskRunID: row.Owner}
		if err := tx.GetContext(ctx, &from.RunID, qSourceRun, row.Owner); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return KeyClaim{}, fmt.Errorf("claim idempotency key: read the run of %s: %w", row.Owner, err)
		}
		return KeyClaim{Done: true, Result: res, From: from}, nil
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

// ErrKeyOwnerRunning is returned by ForgetIdempotencyKey while the task run
// that owns the key is RUNNING: forgetting the key then would let another
// attempt take it and run the handler alongside the owner.
var ErrKeyOwnerRunning = errors.New("the idempotency key's owner is RUNNING")

// ErrNoIdempotencyKey is returned by ForgetIdempotencyKey for a task run
// without an idempotency key, or whose key is not recorded (never claimed,
// or already forgotten).
var ErrNoIdempotencyKey = errors.New("no idempotency key to forget")

// ForgottenKey is what ForgetIdempotencyKey released.
type ForgottenKey struct {
	Key string `json:"key"`
	// Owner is the task run that held the key (and its run).
	Owner KeySource `json:"owner"`
	// Completed: the key had a recorded result (kept in
	// idempotency_key_events), which is no longer reused.
	Completed bool `json:"completed"`
}

// qForgetKeyOf reads the key a task run carries.
const qForgetKeyOf = `SELECT idempotency_key FROM task_runs WHERE id = $1`

// qForgetLock locks the key's row, as ClaimIdempotencyKey's qLockKey does:
// a forget and a claim of one key are serialised by this lock.
const qForgetLock = `SELECT task_run_id, fencing_token FROM idempotency_keys WHERE key = $1 FOR UPDATE`

// qForgetKey deletes the key, in a statement of its own after the lock was
// granted (so its snapshot contains every claim committed before: see
// qOwnerLive), guarded by the owner read under the lock and by that owner
// not being RUNNING; the audit row keeps the forgotten result.
const qForgetKey = `
WITH del AS (
    DELETE FROM idempotency_keys k
     WHERE k.key = $1 AND k.task_run_id = $2 AND k.fencing_token = $3
       AND NOT EXISTS (SELECT 1 FROM task_runs o WHERE o.id = k.task_run_id AND o.state = 'RUNNING')
 RETURNING k.key, k.task_run_id, k.fencing_token, k.completed_at, k.result
), ev AS (
    INSERT INTO idempotency_key_events (key, action, actor, reason, task_run_id, owner_task_run_id, owner_fencing_token, completed_at, result)
    SELECT key, 'forget', $4, $5, $6, task_run_id, fencing_token, completed_at, result FROM del
)
SELECT (SELECT count(*) FROM del) AS deleted,
       coalesce((SELECT completed_at IS NOT NULL FROM del), false) AS completed,
       coalesce((SELECT run_id FROM task_runs WHERE id = $2), '00000000-0000-0000-0000-000000000000'::uuid) AS owner_run_id,
       coalesce((SELECT state FROM task_runs WHERE id = $2), '') AS owner_state`

// ForgetIdempotencyKey releases the idempotency key that task run id
// carries (any task run with the key: its owner, one that reused its
// result, one waiting for it), so the next attempt with the key runs its
// handler. It is refused with ErrKeyOwnerRunning while the key's owner is
// RUNNING, and cannot race a key claim into a second live owner: both lock
// the key's row, and the owner is judged by a statement that starts after
// the lock was granted. It is audited (actor, reason, the owner and the
// forgotten result) in idempotency_key_events. Errors: ErrNotFound for an
// unknown id, ErrNoIdempotencyKey when the task run has no key or the key
// is not recorded, ErrKeyOwnerRunning (naming the owner); nothing changes
// then; one wrapping core.ErrBadReason (nothing asked of the database) for
// a reason core.ValidateReason refuses. Other errors are database errors.
func (s *Store) ForgetIdempotencyKey(ctx context.Context, id uuid.UUID, actor, reason string) (ForgottenKey, error) {
	if err := core.ValidateReason(reason); err != nil {
		return ForgottenKey{}, fmt.Errorf("forget idempotency key of task %s: %w", id, err)
	}
	tx, err := s.db.BeginTxx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return ForgottenKey{}, fmt.Errorf("forget idempotency key of task %s: begin: %w", id, err)
	}
	defer func() { _ = tx.Rollback() }()
	var key sql.NullString
	switch err := tx.GetContext(ctx, &key, qForgetKeyOf, id); {
	case errors.Is(err, sql.ErrNoRows):
		return ForgottenKey{}, fmt.Errorf("task %s: %w", id, ErrNotFound)
	case err != nil:
		return ForgottenKey{}, fmt.Errorf("forget idempotency key of task %s: %w", id, err)
	case !key.Valid:
		return ForgottenKey{}, fmt.Errorf("task %s has no idempotency key: %w", id, ErrNoIdempotencyKey)
	}
	var owner struct {
		ID    uuid.UUID `db:"task_run_id"`
		Token int64     `db:"fencing_token"`
	}
	switch err := tx.GetContext(ctx, &owner, qForgetLock, key.String); {
	case errors.Is(err, sql.ErrNoRows):
		return ForgottenKey{}, fmt.Errorf("idempotency key %q of task %s is not recorded (no task run claimed it, or it was forgotten): %w",
			core.SanitizeText(key.String, 200), id, ErrNoIdempotencyKey)
	case err != nil:
		return ForgottenKey{}, fmt.Errorf("forget idempotency key of task %s: lock: %w", id, err)
	}
	var row struct {
		Deleted    int            `db:"deleted"`
		Completed  bool           `db:"completed"`
		OwnerRun   uuid.UUID      `db:"owner_run_id"`
		OwnerState core.TaskState `db:"owner_state"`
	}
	if err := tx.GetContext(ctx, &row, qForgetKey, key.String, owner.ID, owner.Token, actor, reason, id); err != nil {
		return ForgottenKey{}, fmt.Errorf("forget idempotency key of task %s: %w", id, err)
	}
	res := ForgottenKey{Key: key.String, Owner: KeySource{TaskRunID: owner.ID, RunID: row.OwnerRun}, Completed: row.Completed}
	if row.Deleted != 1 {
		return ForgottenKey{}, fmt.Errorf("idempotency key %q: %w: task run %s holds it (state %s); wait for it to finish, or cancel its run",
			core.SanitizeText(key.String, 200), ErrKeyOwnerRunning, owner.ID, row.OwnerState)
	}
	if err := tx.Commit(); err != nil {
		return ForgottenKey{}, fmt.Errorf("forget idempotency key of task %s: commit: %w", id, err)
	}
	return res, nil
}

// ReuseNote is the history's reason for a finish that reused src's result
// for key: "result reused from task run X of run Y (idempotency key K)",
// the key cut to 200 bytes.
func ReuseNote(src KeySource, key string) string {
	return fmt.Sprintf("result reused from %s (idempotency key %s)", src, core.SanitizeText(key, 200))
}
