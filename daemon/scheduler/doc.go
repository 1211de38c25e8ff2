// Package scheduler is the daemon that moves work forward. Its loop, each
// turn in its own transactions:
//
//	targeted: the runs TasksChannel notifications named since the last turn
//	          (a finish, reap, requeue, cancel or outbox drop committed in them)
//	          --> store.AdvanceRuns: lock them FOR UPDATE in id order, WAITING
//	          for a holder, then the pass below
//	sweep:    every SweepInterval (and on AnyRun, at most ten times as often):
//	          reap:  RUNNING --lease expired (db clock)--> RETRYING | DEAD (token bumped;
//	                 a DEAD task's PENDING descendants --> UPSTREAM_FAILED, same statement)
//	          redispatch READY tasks whose confirmed dispatch led to no claim (not a paused workflow's)
//	          store.SweepCandidates (index-backed: retries due, promotable PENDING
//	          tasks, open runs cancelled or with nothing active) --> AdvanceRuns
//	full:     every FullSweepInterval, and at once when the listener (re)connects:
//	          store.Advance over every open run (FOR UPDATE SKIP LOCKED, pages)
//	ticks:    at the end of every sweep (Config.Schedules set):
//	          store.FireDueTicks: each schedule tick due on the db clock, one
//	          transaction each: tick row (unique per schedule and time) + overlap
//	          (skip | cancel-previous) + run + last-fired point; missed ticks
//	          (due more than MisfireGrace ago) by the schedule's catch-up policy
//
//	the pass: PENDING --an ancestor DEAD--> UPSTREAM_FAILED (catch-up), and back
//	          when none is DEAD any more
//	          fail_fast: PENDING|READY|RETRYING --a task DEAD--> CANCELLED
//	          PENDING --deps SUCCEEDED--> READY  + outbox row (same statement)
//	          RETRYING --backoff elapsed--> READY + outbox row
//	          derive run state (core.DeriveRunState); settle runs with no active task
//
// Promotion runs in a transaction that begins after the upstream finish
// committed (a NOTIFY is delivered after its commit), so two parents
// finishing at once cannot both miss each other: each names the run, and
// the targeted pass that a later one starts waits for any pass holding the
// run, then reads (READ COMMITTED, a statement's snapshot taken after the
// lock) both finishes. A lock wait is bounded by the session's
// lock_timeout (--db-lock-timeout): the pass fails and its runs are kept
// for the next turn. A lost notification delays a promotion by at most one
// SweepInterval, and anything else a notification would have triggered by
// at most one FullSweepInterval. Schedulers LISTEN on TasksChannel only:
// the publishers' OutboxChannel never wakes them.
//
// Clock: the reaper and the retry promotion compare lease_expires_at and
// next_attempt_at with PostgreSQL's now() inside their statements; the
// scheduler's own clock (Config.Clock) only dates its last pass for the
// liveness check. A scheduler whose clock is hours off reaps exactly when
// a correct one would.
//
// Faults: a database error fails the pass; it is retried with capped
// exponential backoff and full jitter, never exiting, and "scheduler:
// recovered" is logged when a pass succeeds again. A schedule tick whose
// transaction did not commit (a failed pass, a scheduler killed mid-tick)
// left nothing: the next pass of any scheduler fires it, once, while it is
// on time (within MisfireGrace); later, its catch-up policy decides. A
// schedule whose stored cron or zone no longer parses fires nothing and is
// logged once.
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
