// Package publisher is the daemon that drains the transactional outbox into
// RabbitMQ. One cycle, in ONE database transaction:
//
//	lock up to BatchSize pending rows (FOR UPDATE SKIP LOCKED; not those of a paused workflow)
//	set aside the rows larger than MaxMessageBytes (quarantine, below)
//	publish each other (persistent, mandatory, quorum queue) and wait for all confirms
//	stamp published_at on the rows the broker confirmed and did not return
//	record the attempt and last_error on the others (they stay pending)
//	commit
//
// The batch's transaction is not bound to Run's context (see
// store.OutboxBatch): a shutdown signal after the confirms does not roll
// the stamps back; they are written and committed under a fresh context.
//
// Quarantine. A row the broker refuses permanently would fail its batch on
// every cycle and block every row after it. The refusals no retry can cure:
// a message larger than MaxMessageBytes (checked before publishing; keep it
// below the broker's max_message_size), and broker.PermanentRefusal (a 406
// closing the channel). A 406 does not say which message it was about, so
// the publisher then publishes the batch's unconfirmed rows one per batch,
// and quarantines the single row refused. A quarantined row is set aside
// with its reason in the batch's transaction (store.OutboxBatch.Quarantine),
// logged at ERROR and counted (flowforge_outbox_quarantined,
// flowforge_outbox_quarantined_total); the others are published. Readiness
// does not turn red for it: one bad row is no reason for an orchestrator to
// restart a publisher that publishes everything else (every publisher would
// be killed alike, and none of them can cure it). The gauge is the alert;
// `ffctl outbox quarantined|retry|drop` is the operator's answer.
//
// Nothing is stamped before the broker confirmed it, so a crash, a lost
// confirm, a nack, a return or a timeout leaves the row pending and a later
// cycle publishes it again (at least once; the duplicate is harmless because
// a claim needs the READY row with the message's fencing token).
//
// Faults: a broker failure closes the connection; the publisher re-dials
// (trying every configured URL) with capped, jittered backoff and logs
// "publisher: recovered". A resource alarm (connection.blocked) stops
// publishing without hanging: rows stay pending and readiness reports it;
// the alarm is logged when raised and when publishing resumes, once each,
// and its re-dials are no recovery. A
// database failure rolls the batch back. A message the broker returns as
// unroutable (the dispatch queue was deleted) is Returned even when the
// broker also confirms it: its row stays pending with last_error "returned",
// and the publisher re-dials, which re-declares the queue, so the next cycle
// publishes the row again even when no worker is there to re-declare it. The
// loop never exits on a transient fault; a queue declared with other
// arguments is fatal at start.
//
// Re-drive. A quorum-queue delivery-limit on the dispatch queues (a
// policy; RabbitMQ 4's default of 20) dead-letters a dispatch returned too
// often (worker crashes, hand-backs) into the dead-letter queue, which
// nothing else drains. Every Config.RedriveInterval, when the dead-letter
// queue holds more than its last pass left, the publisher takes a pass
// over it (broker.Publisher.RedriveDeadLetters): a dispatch whose last
// death was the delivery-limit of a dispatch queue is published to that
// queue again and acked once the copy is confirmed; everything else (the
// garbage workers reject, mode 26) is returned to the queue's head in its
// order. It counts flowforge_dispatches_redriven_total and warns once per
// process; passes that send nothing back lengthen the interval up to a
// minute (redrive.go, e2e/FAILURE_MODEL.md mode 138).
//
// Config.Failpoints (a testing aid, see package failpoint) can discard a
// batch's confirms, or end the process or send it SIGTERM between the
// confirm and the stamp;
// it is nil, and inert, unless FLOWFORGE_FAILPOINTS is set.
package publisher
