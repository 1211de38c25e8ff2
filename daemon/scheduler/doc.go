// Package scheduler is the daemon that moves work forward. Its loop, each
// turn in its own transactions:
//
//	targeted: the runs TasksChannel notifications named since the last turn
//	          (a finish, reap, requeue, cancel or outbox drop committed in them),
//	          and the runs handed back earlier whose retry is due
//	          --> store.AdvanceRuns: lock them FOR UPDATE SKIP LOCKED in id
//	          order, then the pass below; a run another transaction holds is
//	          handed back untouched (Held) and passed again later (paced:
//	          50 ms, doubling to SweepInterval while it stays held)
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
//	          PENDING --deps SUCCEEDED--> RUNNING for a task the store holds
//	          (sleep, wait_for, workflow: no worker, no outbox row); a child
//	          run deeper than MaxChildDepth --> DEAD (the store's bound:
//	          store.Options.MaxChildDepth, which the supervisor sets from it)
//	          RETRYING --backoff elapsed--> READY + outbox row
//	          derive run state (core.DeriveRunState); settle runs with no active task
//
// Promotion runs in a transaction that begins after the upstream finish
// committed (a NOTIFY is delivered after its commit), so two parents
// finishing at once cannot both miss each other: each names the run, and
// the targeted pass that a later one starts either locks the run and reads
// (READ COMMITTED) both finishes, or finds it held by a pass that may have
// read it before the later finish, hands it back and passes it again once
// the holder let go, in a transaction that begins after the holder's
// commit. A held run (a forgotten BEGIN ... FOR UPDATE in psql, a long
// dead requeue --all, a run delete, another scheduler's pass) delays that
// run only: never the other runs, the sweep, the ticks, nor the outage
// accounting. A targeted pass that fails is no different: its runs are kept
// and passed again later (a failure the database answered, such as a lock
// timeout, never skips the turn's sweep; see Faults). A lost notification
// delays a promotion by at most one SweepInterval, and anything else a
// notification would have triggered by at most one FullSweepInterval.
// Schedulers LISTEN on TasksChannel only: the publishers' OutboxChannel
// never wakes them.
//
// Clock: the reaper and the retry promotion compare lease_expires_at and
// next_attempt_at with PostgreSQL's now() inside their statements; the
// scheduler's own clock (Config.Clock) only dates its last pass for the
// liveness check. A scheduler whose clock is hours off reaps exactly when
// a correct one would.
//
// Faults: a database that cannot be reached (store.IsUnreachable: no
// answer, or the server shutting down or starting) fails the turn; it is
// retried with capped exponential backoff and full jitter, never exiting,
// counted as an outage of the scheduler's own (below), and "scheduler:
// recovered" is logged when a turn succeeds again. An error the database
// answered (a lock or statement timeout, a refused statement) is logged
// and is no outage: a refused targeted pass keeps its runs for later and
// the turn goes on with its sweep; a refused sweep is tried again at the
// next tick. A schedule tick whose
// transaction did not commit (a failed pass, a scheduler killed mid-tick)
// left nothing: the next pass of any scheduler fires it, once, while it is
// on time (within MisfireGrace); later, its catch-up policy decides. A
// schedule whose stored cron or zone no longer parses fires nothing and is
// logged once.
//
// Its own outages: each sweep first reads the database's clock. After a
// pass that failed to reach the database, or when the sweep reaches it more
// than SweepInterval+OutageGap after the previous sweep did (a pass stuck
// on an unreachable database), the scheduler records an outage ending now, and the reaper then grants every
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
