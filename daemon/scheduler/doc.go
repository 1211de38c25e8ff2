// Package scheduler is the daemon that moves work forward. Each pass, in
// its own transactions:
//
//	reap:    RUNNING --lease expired (db clock)--> RETRYING | DEAD   (token bumped;
//	         a DEAD task's PENDING descendants --> UPSTREAM_FAILED, same statement)
//	advance: lock open runs (FOR UPDATE SKIP LOCKED)
//	         PENDING --an ancestor DEAD--> UPSTREAM_FAILED (catch-up), and back
//	         when none is DEAD any more
//	         fail_fast: PENDING|READY|RETRYING --a task DEAD--> CANCELLED
//	         PENDING --deps SUCCEEDED--> READY  + outbox row (same statement)
//	         RETRYING --backoff elapsed--> READY + outbox row
//	         derive run state (core.DeriveRunState); settle runs with no active task
//
// A pass runs when a NOTIFY on topic "tasks" arrives (a finish, requeue or
// cancel committed) and on every SweepInterval tick, so a lost notification
// delays work by at most one sweep. Promotion runs in a transaction that
// begins after the upstream finish committed, so two parents finishing at
// once cannot both miss each other.
//
// Clock: the reaper and the retry promotion compare lease_expires_at and
// next_attempt_at with PostgreSQL's now() inside their statements; the
// scheduler's own clock (Config.Clock) only dates its last pass for the
// liveness check. A scheduler whose clock is hours off reaps exactly when
// a correct one would.
//
// Faults: a database error fails the pass; it is retried with capped
// exponential backoff and full jitter, never exiting, and "scheduler:
// recovered" is logged when a pass succeeds again.
//
// Its own outages: each pass first reads the database's clock. After a
// failed pass, or when the pass starts more than SweepInterval+OutageGap
// after the previous one (a pass stuck on an unreachable database), the
// scheduler records an outage ending now, and the reaper then grants every
// lapsed lease one lease of grace (its own length) from that moment, so a
// worker that lost the database with it can renew first; a lease that
// lapsed during the outage is reaped, if it must be, without using up its
// attempt (RETRYING, max_attempts + 1, the cause in the error). A reap whose
// statements run more than OutageGap after its pass began (stalled behind
// an outage not seen yet) reaps nothing. A worker cut off alone, while the
// scheduler reaches the database, is reaped after its lease as before. The scheduler never talks
// to RabbitMQ. Any number of schedulers may run: locks and conditional
// updates, not being alone, make them correct.
package scheduler
