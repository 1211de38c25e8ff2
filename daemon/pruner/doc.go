// Package pruner is the scheduler's retention chore: it deletes settled
// runs older than a configured age for their final state, with their task
// runs, outbox rows and history (the foreign keys cascade), and published
// outbox rows older than their own age. `ffctl daemon scheduler` and
// `ffctl daemon all` run one beside the scheduler (flags --prune,
// --prune-interval, --retain-succeeded, --retain-cancelled, --retain-dead,
// --retain-outbox).
//
//	     Run(ctx)
//	        |
//	        v
//	+--> pass: for each class, batches of BatchSize until one is short
//	|      SUCCEEDED            older than RetainSucceeded
//	|      CANCELLED, no DEAD   older than RetainCancelled
//	|      FAILED / CANCELLED holding a DEAD task: only when RetainDead > 0
//	|      published outbox rows older than RetainOutbox
//	|           |
//	|           v
//	|     metrics; one log line when it deleted anything
//	|           |
//	+-- wait Interval (or ctx ends: return nil)
//
// Ages are measured from finished_at (published_at for outbox rows) on the
// database's clock, inside the SQL (store.PruneRuns, store.PruneOutbox).
//
// Concurrency: pruners need not be alone. Each batch locks its candidate
// runs FOR UPDATE SKIP LOCKED, so two pruners (two schedulers) delete
// disjoint batches and never wait for each other; a requeue, which locks
// the run before it reopens it, either holds the lock first (the pruner
// skips the run, and then finds it open) or waits for the pruner's commit
// and finds no task (not found). No advisory lock is needed, and none can
// go stale with a crashed scheduler.
//
// Vacuum: every batch is its own short transaction bounded by
// store.PruneStatementTimeout and store.PruneLockTimeout; no transaction
// spans a pass.
//
// Faults: a failed batch ends the pass (what earlier batches deleted stays
// deleted: each committed alone); the error is logged, counted
// (flowforge_prune_pass_failures_total) and the next pass, an Interval
// later, starts over. A database fault never ends Run.
package pruner
