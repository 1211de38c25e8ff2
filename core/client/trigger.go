package client

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// TriggerOptions are what `ffctl run trigger` takes besides the workflow
// and its params. The zero value triggers the newest version without a
// key.
type TriggerOptions struct {
	// IdempotencyKey, when not empty (at most core.MaxIdempotencyKeyBytes
	// bytes of UTF-8), de-duplicates triggers: a key already used with the
	// same workflow and params returns that run (TriggerResult.Existing);
	// with others it is ErrConflict, naming the run that holds it. A run
	// pruned by retention frees its key.
	IdempotencyKey string
	// Version is the workflow version to run, from 1; 0 means the newest.
	Version int
	// Priority, when not 0, overrides the priority of every task of the
	// run: core.PriorityMin (1) to core.PriorityMax (4); it orders the
	// waiters of a concurrency key or a rate limit. Out of range:
	// ErrInvalidParams.
	Priority int
}

// TriggerResult says which run a trigger produced: RunID, and Existing
// when an earlier trigger with the same idempotency key had created it.
type TriggerResult = store.TriggerResult

// TriggerManyOptions are TriggerMany's: Version as in TriggerOptions. A
// batch has no idempotency keys.
type TriggerManyOptions struct {
	Version int
	// Priority, when not 0, overrides the priority of every task of every
	// run, as TriggerOptions.Priority does.
	Priority int
}

// TriggerManyMax is the most runs one TriggerMany call creates; a
// workflow of many tasks takes fewer (store.TriggerManyBatch: at most
// store.TriggerManyMaxTaskRuns task runs a call).
const TriggerManyMax = store.TriggerManyMax

// Trigger starts a run of workflow with params, in one statement that is
// its own transaction: the run, its task runs, the root tasks' outbox rows
// and the publishers' notification (one round trip once the Client has
// the workflow's definition cached; a second, a read, only when
// opts.IdempotencyKey is already taken). params is the run's params
// object: a json.RawMessage or []byte is taken as JSON text, nil means
// {}, and any other value is encoded with encoding/json (HTML characters
// not escaped), so a struct of the caller's may be passed. Errors:
// ErrInvalidParams (nothing written) for params or a key the CLI refuses
// (see ErrInvalidParams); ErrInvalidInput for a bad workflow name or
// version; ErrNotFound for an unknown workflow or version; ErrConflict
// for a key that names another run; ErrPaused when the workflow is paused
// with mode drop; ErrOutcomeUnknown when the statement got no answer (the
// run may exist: trigger again with the same key).
func (c *Client) Trigger(ctx context.Context, workflow string, params any, opts TriggerOptions) (TriggerResult, error) {
	req, err := triggerRequest(workflow, params, opts)
	if err != nil {
		return TriggerResult{}, err
	}
	ctx, span := c.startTrigger(ctx, &req)
	res, err := c.s.Trigger(ctx, req)
	endTrigger(span, res, err)
	return res, mapError(err)
}

// TriggerTx is Trigger inside tx, the caller's transaction: the run, its
// task runs and their outbox rows commit or roll back with the caller's
// own writes, and the publishers are notified at its commit (PostgreSQL
// delivers a NOTIFY then). It costs tx ONE statement once the Client has
// the workflow's definition cached (before that, a read of it on tx
// first; a read of the existing run when the key is taken): one round
// trip, once tx's connection has prepared it in pgx's default mode (its
// first use on a connection prepares it first; a pool in exec or
// simple-protocol mode, as behind PgBouncer, never prepares). It holds
// nothing the daemons wait for: the rows it inserts are invisible to them
// until tx commits, and every lock it takes ends with tx
// (store.Store.TriggerTx lists them: its rows, the key's unique index
// entry, which a concurrent trigger of the same key waits for, the
// workflow version's key-share lock, and at commit the NOTIFY queue's).
// A run's created_at is tx's start. Run it under READ COMMITTED (the
// default). Errors: those of Trigger but ErrOutcomeUnknown. ErrPaused and
// the refusals of bad input leave tx usable (ErrPaused's statement counted
// the drop on the pause, which stands if tx commits); an error from the
// database leaves tx aborted, to be rolled back.
func (c *Client) TriggerTx(ctx context.Context, tx pgx.Tx, workflow string, params any, opts TriggerOptions) (TriggerResult, error) {
	return c.triggerTx(ctx, tx, workflow, params, opts)
}

// TriggerSQLTx is TriggerTx for a database/sql transaction (also sqlx's:
// pass its embedded *sql.Tx) of a pool whose driver is pgx's.
func (c *Client) TriggerSQLTx(ctx context.Context, tx *sql.Tx, workflow string, params any, opts TriggerOptions) (TriggerResult, error) {
	return c.triggerTx(ctx, store.SQLQuerier(tx), workflow, params, opts)
}

func (c *Client) triggerTx(ctx context.Context, tx store.Querier, workflow string, params any, opts TriggerOptions) (TriggerResult, error) {
	req, err := triggerRequest(workflow, params, opts)
	if err != nil {
		return TriggerResult{}, err
	}
	ctx, span := c.startTrigger(ctx, &req)
	res, err := c.s.TriggerTx(ctx, tx, req)
	endTrigger(span, res, err)
	return res, mapError(err)
}

// TriggerMany starts one run of workflow per element of params (each as
// Trigger takes it) in ONE statement and transaction: all of them or none,
// all of one version. It returns the runs' ids in the order of params.
// Errors: ErrInvalidParams naming the first bad element (1-based: "run
// 7: ...") or a batch over TriggerManyMax runs or
// store.TriggerManyMaxTaskRuns task runs, nothing written; the others of
// Trigger.
func (c *Client) TriggerMany(ctx context.Context, workflow string, params []any, opts TriggerManyOptions) ([]uuid.UUID, error) {
	req, err := triggerManyRequest(workflow, params, opts)
	if err != nil {
		return nil, err
	}
	ids, err := c.s.TriggerMany(ctx, req)
	return ids, mapError(err)
}

// TriggerManyTx is TriggerMany inside tx, the caller's transaction, as
// TriggerTx is Trigger.
func (c *Client) TriggerManyTx(ctx context.Context, tx pgx.Tx, workflow string, params []any, opts TriggerManyOptions) ([]uuid.UUID, error) {
	return c.triggerManyTx(ctx, tx, workflow, params, opts)
}

// TriggerManySQLTx is TriggerManyTx for a database/sql transaction.
func (c *Client) TriggerManySQLTx(ctx context.Context, tx *sql.Tx, workflow string, params []any, opts TriggerManyOptions) ([]uuid.UUID, error) {
	return c.triggerManyTx(ctx, store.SQLQuerier(tx), workflow, params, opts)
}

func (c *Client) triggerManyTx(ctx context.Context, tx store.Querier, workflow string, params []any, opts TriggerManyOptions) ([]uuid.UUID, error) {
	req, err := triggerManyRequest(workflow, params, opts)
	if err != nil {
		return nil, err
	}
	ids, err := c.s.TriggerManyTx(ctx, tx, req)
	return ids, mapError(err)
}

// triggerRequest checks the workflow's name and version, as `ffctl run
// trigger` does before it opens the database, and returns the store's
// request; the store checks the params and the key (core.ValidateParams,
// core.ValidateIdempotencyKey) before it writes.
func triggerRequest(workflow string, params any, opts TriggerOptions) (store.TriggerRequest, error) {
	if err := checkTarget(workflow, opts.Version); err != nil {
		return store.TriggerRequest{}, err
	}
	raw, err := encodeParams(params)
	if err != nil {
		return store.TriggerRequest{}, mapError(err)
	}
	return store.TriggerRequest{Workflow: workflow, Version: opts.Version, Params: raw, IdempotencyKey: opts.IdempotencyKey, Priority: opts.Priority}, nil
}

func triggerManyRequest(workflow string, params []any, opts TriggerManyOptions) (store.TriggerManyRequest, error) {
	if err := checkTarget(workflow, opts.Version); err != nil {
		return store.TriggerManyRequest{}, err
	}
	raws := make([]json.RawMessage, len(params))
	for i, p := range params {
		raw, err := encodeParams(p)
		if err != nil {
			return store.TriggerManyRequest{}, mapError(&store.BadRunError{Index: i, Err: err})
		}
		raws[i] = raw
	}
	return store.TriggerManyRequest{Workflow: workflow, Version: opts.Version, Params: raws, Priority: opts.Priority}, nil
}

// checkTarget refuses a workflow name core.ValidateName refuses and a
// negative version.
func checkTarget(workflow string, version int) error {
	if err := core.ValidateName("workflow", workflow); err != nil {
		return mapError(err)
	}
	if version < 0 {
		return invalid("workflow %q version %d: versions are numbered from 1 (0 means the newest)", workflow, version)
	}
	return nil
}

// encodeParams returns params as the JSON text of a run's params (the
// store checks it with core.ValidateParams): a json.RawMessage or []byte
// as it is, nil as {}, anything else encoded with encoding/json without
// HTML escapes (the size limit applies to what the caller sent). Errors
// (a value encoding/json refuses) wrap core.ErrBadParams.
func encodeParams(params any) (json.RawMessage, error) {
	var raw []byte
	switch p := params.(type) {
	case nil:
		raw = []byte(`{}`)
	case json.RawMessage:
		raw = p
	case []byte:
		raw = p
	default:
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(p); err != nil {
			return nil, fmt.Errorf("%w: cannot be encoded as JSON: %v", core.ErrBadParams, err)
		}
		raw = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	}
	return raw, nil
}
