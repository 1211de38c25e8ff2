// Package dbhealth watches what holds PostgreSQL's VACUUM back: every
// Interval a Watcher reads store.DBHealth (the oldest open transaction, the
// oldest holder of the xmin horizon — a session's snapshot or xid, a
// prepared transaction, a replication slot — and the dead tuples of the hot
// tables), exports it as metrics (flowforge_db_oldest_transaction_seconds,
// flowforge_db_xmin_horizon_seconds, flowforge_db_xmin_horizon_xids,
// flowforge_db_dead_tuples{table}) and logs a warning naming the holder when
// the horizon has been held longer than Warn.
//
// Why: while a snapshot is held (a forgotten BEGIN in psql is enough) no dead
// row newer than it can be removed, so every publisher batch and every sweep
// of the scheduler reads more of them; nothing else in FlowForge would show
// it.
//
// States and logs:
//
//	ok ──(horizon held ≥ Warn)──> held: WARN "dbhealth: xmin horizon held back"
//	held ──(still held, WarnEvery later)──> held: the WARN again
//	held ──(released or below Warn)──> ok: INFO "dbhealth: xmin horizon released"
//
// Faults: a read that fails (the database is down, a statement timed out)
// leaves the metrics at their last values and is logged at debug level: the
// daemon's dependency watcher reports the database itself. The Watcher
// stops when its context ends.
package dbhealth
