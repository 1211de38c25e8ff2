// Package store is the only package of FlowForge that speaks SQL. It owns
// the schema's migrations (applied with goose from the embedded sql
// package), and every state transition of the task state machine, each as
// ONE conditional statement guarded by the current state and, where it
// applies, the fencing token. Losing such a race returns false, never an
// error; an illegal transition is refused in Go (core.CheckTransition)
// before any SQL runs.
//
// Every compared timestamp is produced by PostgreSQL (now()), never by the
// process clock: leases, retry due times and ages are all computed in SQL.
//
// Driver errors become this package's sentinels at its edge: ErrNotFound,
// ErrConflict, ErrSchemaOutdated, ErrSchemaTooNew.
package store
