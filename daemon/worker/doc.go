// Package worker is the daemon that runs tasks. It consumes the shared
// dispatch queue and the queue of each handler it registers (routing by
// handler, see package broker: a dispatch reaches the shared queue only
// when no worker bound its handler's queue, or from an older publisher).
// For each delivery:
//
//	decode        not a valid dispatch         -> log, count, Reject (dead-letter queue)
//	installation  names another installation   -> a confirmed copy to the queue's tail, then
//	              (mode 89, foreign.go)           Ack; no copy confirmed -> Requeue; never
//	                                              claimed, Rejected or acked without a copy
//	take a slot   none free within SlotWait    -> Requeue (another worker may take it)
//	claim         READY+token -> RUNNING, new token, attempt+1, lease on the db clock,
//	              in a batch with the deliveries that arrived meanwhile
//	              lost (duplicate, stale, cancelled, paused, unknown) -> Ack, run nothing
//	ack           right after the claim commits: from here the database lease,
//	              not broker redelivery, governs retries
//	gate          wait for the crash gate (a suspect runs alone: suspect.go)
//	run           handler(ctx) with timeout; heartbeat every Lease/3 renews the
//	              lease and cancels ctx when the lease is lost or the run cancelled;
//	              a cancel notification makes it renew (and so cancel) at once
//	finish        RUNNING+token -> SUCCEEDED | RETRYING | DEAD | CANCELLED
//	              rejected (token moved on) -> logged and counted as a stale write
//	              the heartbeat keeps renewing until the finish returns
//
// Batching: one goroutine (consume) decodes deliveries; one (claimLoop)
// gives each a slot and claims together, in one store.ClaimMany, those
// that are already waiting and find a free slot (up to BatchMaxDefault or
// Concurrency); a batch that holds two or more waits up to
// BatchWindowDefault (1 ms) for more while a slot is still free, a lone
// delivery is claimed at once, so light load pays no window; at most two
// claim statements run at once. Concurrency long-lived runners take each
// row's answer and ack, explain or run it exactly as a lone claim would;
// every error path stays per row (a lock timeout requeues, an ambiguous
// error is read back per row). Outcomes are recorded by a finishBatcher:
// the attempt that finds no finish statement in flight records the queue
// in one store.FinishMany and hands the next batch to the first attempt
// that queued meanwhile, so a batch adds at most one statement's wait. A
// row's own error (a poisoned row, see store.FinishMany) or a batch that
// got no answer is retried per row for up to one lease, as before. Each
// attempt's heartbeat renews until its own row is recorded.
//
// Why ack after claim: a handler may run longer than RabbitMQ's
// consumer_timeout (30 min by default), which closes the channel of a
// delivery left unacked that long. Acking once the claim commits means no
// delivery stays unacked while its handler runs; the worker bounds its own
// concurrency with slots (prefetch = concurrency) and hands a delivery back
// when no slot frees within SlotWait (keep it below consumer_timeout). A
// crash after the ack loses nothing: the lease expires and the scheduler's
// reaper retries the task.
//
// Cancellation: the worker LISTENs on store.CancelChannel (Config.DatabaseURL,
// a dedicated connection reconnected with backoff; see daemon.Listen).
// CancelRun, and a scheduler pass that fails a fail_fast run with tasks
// running, NOTIFY the run ids there; the worker then renews at once the
// leases of the attempts of those runs it is running, and a renewal whose
// Stop flag is set cancels the handler's context with core.ErrRunCancelled
// — within a database round trip instead of up to Lease/3 later. The
// notification is a hint, the database decides; a lost notification (the
// listener down, a reconnect) leaves the next heartbeat to cancel, and
// after each reconnect every attempt in flight renews once.
//
// Heartbeats use their own small pool (Renewer), so database calls that
// hold the main pool's connections cannot delay them; every main-pool call
// (claim, idempotency-key claim, finish) runs inside a slot, and the pool
// has more connections than slots. The heartbeat runs from the claim until
// the finish returns, not only while the handler runs: a finish stalled by
// the database (a lock, a failover) would otherwise let the lease lapse and
// have a completed attempt reaped and run again.
//
// A failed renewal is retried within Lease/60..Lease/15 (capped, jittered),
// not at the next interval, so a lease is renewed as soon as the database
// answers again. Claims and renewals wait at most store.LockWaitFor(Lease)
// (a quarter lease) for a lock and then fail; the lease they write is
// measured from the write and never moves backwards.
//
// Lost replies: an error from a claim other than a lock timeout may have
// come after the claim committed. The worker reads the row back
// (store.ClaimedBy: RUNNING for this worker with the claim's token) and, if
// it committed, renews once and runs the task; otherwise it requeues the
// delivery. Two copies of one dispatch can both read back the one attempt
// they share, so every delivery takes its attempt's (task, token) key in
// runningAttempts before it runs: at most one delivery of a dispatch runs
// in a worker, the other is acked as a duplicate. A finish retried after
// an error that then matches nothing is read back too, from the attempt's
// own history row (store.FinishRecorded: its RUNNING -> X event at its
// token and worker), not from the task row, which the scheduler may have
// moved on already (a retry promoted READY at the next token): when that
// row exists the earlier try committed, and the attempt is reported as
// finished, not as a stale write. Both are counted in
// flowforge_ambiguous_writes_total.
//
// Crash suspects (suspect.go): a task the reaper took from a crashed
// worker with other tasks in flight is claimed as a suspect; every
// attempt passes a crash gate before its handler starts (a FIFO semaphore
// of Concurrency units: one for an ordinary attempt, all of them for a
// suspect), so a suspect runs alone, after store.MarkAlone recorded it,
// and holds the gate until its finish returns. Its lease is renewed while
// it waits; its timeout starts at the gate.
//
// Task logs (tasklog.go): each attempt's handler context carries a
// core.TaskLog capped at Config.TaskLogMaxBytes; its lines go to one
// writer goroutine that inserts every attempt's lines in batches of its
// own transaction (store.InsertTaskLogs), never in the finish's statement
// nor its batch, and no attempt waits for them. A database failure there
// is retried with backoff while at most taskLogBufferMax lines wait; past
// that lines are dropped and counted, never a finish delayed. Lines of an
// attempt whose lease was lost are keyed by its own attempt: writing them
// late touches nothing of the task's new owner.
//
// Clock: leases are set and compared by PostgreSQL's clock; the worker
// reads its own clock (Config.Clock) only to bound how long it retries a
// finish or a read-back, so a process clock hours off changes nothing.
//
// Faults: a broker failure ends the consumer; the worker re-dials with
// capped, jittered backoff (all configured URLs), re-declares the topology
// and consumes again, logging "worker: recovered". A server-side consumer
// cancel (queue deleted) is treated the same way. A database failure during
// a claim that did not commit requeues the delivery after a backoff; during
// a finish the worker retries until the lease would have expired. A handler panic is recovered
// and recorded as a failed attempt. On shutdown (ctx cancelled) it stops
// consuming, requeues deliveries it has not claimed, lets in-flight handlers
// finish, then returns; Abort cancels the handlers instead.
package worker
