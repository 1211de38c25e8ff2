package store

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// This file holds what lets a trigger run inside a transaction of the
// caller's (core/client's TriggerTx): Querier, the one method a trigger
// needs of a connection, its adapters, and TriggerTx and TriggerManyTx.

// Querier runs one statement and returns its one row. A trigger's
// statements (qTrigger; the read of the run that holds a taken idempotency
// key; the read of a definition the Store has not cached) go through it,
// so they run wherever the caller's Querier points: pgx's Tx, Conn and
// pgxpool.Pool satisfy it as they are; SQLQuerier adapts database/sql's
// and sqlx's handles.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// SQLRowQueryer is what SQLQuerier adapts: *sql.DB, *sql.Tx, *sql.Conn and
// sqlx's DB and Tx. Their driver must be pgx's ("pgx", package
// github.com/jackc/pgx/v5/stdlib): a trigger's arguments are arrays pgx
// encodes.
type SQLRowQueryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// SQLQuerier returns q as a Querier.
func SQLQuerier(q SQLRowQueryer) Querier { return sqlQuerier{q} }

type sqlQuerier struct{ q SQLRowQueryer }

func (a sqlQuerier) QueryRow(ctx context.Context, query string, args ...any) pgx.Row {
	return a.q.QueryRowContext(ctx, query, args...)
}

// callerTx is a transaction of the caller's in which a trigger writes: an
// error of its statement is not a commit's (the caller commits). Its
// statements go in the mode the caller's connection is set to (pgx's
// default prepares a statement on its first use on a connection, a round
// trip once per connection, and reuses its plan; a pool set to exec or
// simple-protocol mode, as behind PgBouncer, never prepares).
type callerTx struct{ q Querier }

func (c callerTx) QueryRow(ctx context.Context, query string, args ...any) pgx.Row {
	return c.q.QueryRow(ctx, query, args...)
}

// statementError wraps err, the error of qTrigger run on q: with
// ErrCommitOutcomeUnknown when the statement was its own transaction or
// the store's (see unanswered), plainly in a caller's transaction, which
// has committed nothing and which the caller rolls back.
func statementError(q Querier, err error) error {
	if _, ok := q.(callerTx); ok {
		return fmt.Errorf("trigger: %w", err)
	}
	return unanswered("trigger", err)
}

// TriggerTx is Trigger inside tx, a transaction of the caller's (a pgx.Tx,
// or SQLQuerier of a *sql.Tx): the run, its task runs, the root tasks'
// outbox rows and the publishers' NOTIFY (delivered by PostgreSQL at
// commit) commit or roll back with the caller's own writes. It sends ONE
// statement on tx when the Store has the workflow's definition cached (one
// round trip once tx's connection has prepared it, see callerTx);
// when it has not (the first trigger of a workflow, or a newer version
// applied since), a read of the definition first, on tx too (no second
// connection: a pool of one cannot deadlock); and one more read when the
// idempotency key is already taken (the run holding it). Locks it takes,
// all held until tx ends and none of them wanted by the daemons:
//
//   - ROW EXCLUSIVE on workflow_runs, task_runs, outbox and
//     workflow_pauses (the table locks of any INSERT or UPDATE; they
//     conflict only with DDL: a migration waits for tx);
//   - the rows it inserts (a run, its task runs, the roots' outbox rows),
//     invisible to every other transaction until tx commits, so the
//     scheduler, publishers and workers neither see nor wait for them;
//   - the entry of req.IdempotencyKey in workflow_runs' unique index: a
//     concurrent trigger with the same key waits for tx to end, then
//     returns tx's run (commit) or creates its own (rollback);
//   - FOR KEY SHARE on the workflow version's row (the foreign key of the
//     run), which only a DELETE of that version would wait for (none
//     does);
//   - only when the workflow is paused with mode drop: the pause's row
//     (its dropped count), which `workflow resume` and other triggers of
//     that workflow wait for;
//   - at COMMIT, PostgreSQL's cluster-wide NOTIFY queue lock, from the
//     commit's start to its end, as every notifying commit takes it.
//
// The times it records are tx's start (now()): a run's created_at and its
// roots' ready_at; a transaction held open for minutes makes its runs look
// older than their commit. Use READ COMMITTED (the default): under
// REPEATABLE READ a key taken by a transaction that committed after tx
// began fails with a serialization error (SQLSTATE 40001), to be retried.
// Errors: those of Trigger, but never ErrCommitOutcomeUnknown (the commit
// is the caller's); a database error leaves tx aborted.
func (s *Store) TriggerTx(ctx context.Context, tx Querier, req TriggerRequest) (TriggerResult, error) {
	return s.trigger(ctx, callerTx{tx}, req)
}

// TriggerManyTx is TriggerMany inside tx, a transaction of the caller's, as
// TriggerTx is Trigger: one statement (after a definition read when the
// Store has not cached it), the same locks, the runs committed or rolled
// back with tx. Errors: those of TriggerMany but ErrCommitOutcomeUnknown.
func (s *Store) TriggerManyTx(ctx context.Context, tx Querier, req TriggerManyRequest) ([]uuid.UUID, error) {
	return s.triggerMany(ctx, callerTx{tx}, req)
}
