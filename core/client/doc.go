// Package client starts and inspects FlowForge runs from a Go program: the
// same triggers, reads and operator actions as ffctl's `run trigger`, `run
// show`, `run wait`, `run cancel`, `run list`, `task show`, `dead list`,
// `dead requeue`, `workflow list`, `workflow apply`, `event send`, `event
// list` and `token ...` (which are built on it, as the HTTP API of package
// daemon/api is), with the same validation and the same errors, as a typed
// API.
//
// Its point is TriggerTx: a run started inside the caller's own
// transaction, so that "charge the card and start the fulfilment workflow"
// commits or rolls back as one:
//
//	tx, _ := pool.Begin(ctx)
//	defer tx.Rollback(ctx)
//	if _, err := tx.Exec(ctx, `INSERT INTO orders ...`); err != nil { ... }
//	res, err := c.TriggerTx(ctx, tx, "fulfil", Order{ID: 42}, client.TriggerOptions{IdempotencyKey: "order-42"})
//	if err != nil { ... }
//	err = tx.Commit(ctx) // the run, its tasks and their dispatches with the order, or none of them
//
// The trigger is one statement on tx (store.Store.TriggerTx says which
// locks it takes, all released with tx and none of them wanted by the
// daemons); the publishers are woken at the commit.
//
// SendEvent is the other half of a task that waits (`wait_for: {event:
// order.approved, key: "params.order_id"}`): it completes every task
// waiting for the event's name and key, the payload its result, and an
// event sent twice with one id is delivered once:
//
//	res, err := c.SendEvent(ctx, "order.approved", Approval{By: "ana"},
//		client.SendEventOptions{Key: "42", ID: "approval-42"})
//	// res.Completed: the task runs it completed; res.Duplicate: the id was sent before
//
// A Client over a *pgxpool.Pool (New) or a *sql.DB of pgx's driver
// (NewDB) runs everything else on that pool. Errors match ErrNotFound,
// ErrConflict, ErrInvalidParams, ErrInvalidInput, ErrPaused,
// ErrOutcomeUnknown and (Authenticate's) ErrUnauthenticated with
// errors.Is.
//
// The handlers a worker runs are core's: core.TypedHandler decodes a
// task's params into a struct of the handler's and encodes its result;
// cli.Main(registry) makes the worker binary. docs/application.md shows
// both, and how a module outside this repository depends on this one.
//
// The package speaks no SQL of its own (core/store does; a house test
// checks it): it names pgx's types for a caller's pool and transaction.
package client
