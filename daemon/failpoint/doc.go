// Package failpoint is a testing aid: it lets an end-to-end test make a
// daemon misbehave at one precise point (a confirm that never arrives, a
// process that dies between two writes) so that the recovery path can be
// proven against real PostgreSQL and RabbitMQ.
//
// The failpoints are read from the environment variable FLOWFORGE_FAILPOINTS
// exactly once, by the cli package when a daemon starts (EnvVar), and handed
// to the daemons through their Config as a *Failpoints value. Nothing reads
// the environment elsewhere, there are no package-level variables and no
// init(). When the variable is unset or empty, Parse returns nil, and every
// method of a nil *Failpoints does nothing: production code pays one nil
// check per hook and behaves exactly as without the hook.
//
// Syntax: a comma-separated list of name=count, where count is a positive
// integer, the number of times the failpoint fires before it turns inert
// (a bare name means 1):
//
//	FLOWFORGE_FAILPOINTS=publisher.discard-confirms=1
//	FLOWFORGE_FAILPOINTS=publisher.exit-after-confirm
//
// Names (an unknown name is an error, so a typo cannot silently disable a
// test):
//
//   - publisher.discard-confirms: for the next count batches that the broker
//     confirmed, the publisher treats every confirm as lost (the messages are
//     in the queue, but the rows are recorded as unconfirmed and stay
//     pending). Proves that a lost publisher confirm leads to a republish,
//     never to a lost dispatch.
//   - publisher.exit-after-confirm: once the broker has confirmed a batch,
//     the publisher process exits with status ExitCode (3) before it stamps
//     the rows, so its transaction dies with it. Proves that a publisher
//     crash between confirm and stamp leaves the rows pending for the next
//     publisher.
//   - publisher.sigterm-after-confirm: once the broker has answered a batch,
//     the publisher sends itself SIGTERM and waits until the signal has
//     cancelled its context, then stamps the rows as usual. Proves that a
//     shutdown signal between confirm and stamp does not roll the stamp
//     back (mode 44).
//   - publisher.stream-exit-after-confirm: once the broker has confirmed a
//     batch of transition stream messages, the publisher exits with status
//     ExitCode (3) before it stamps the rows. Proves that the next
//     publisher publishes them again with the same seq and event id
//     (mode 122).
//   - worker.exit-before-finish-batch: once the worker has built a batch
//     of finished attempts, it exits with status ExitCode (3) before the
//     batch's statement runs, as a SIGKILL between the handlers' return and
//     the commit would. Proves that those attempts are reaped and retried
//     and none is recorded twice (mode 52).
//   - scheduler.exit-mid-tick: once the scheduler has inserted a schedule
//     tick's row, inside the tick's transaction and before its run is
//     created and committed, it exits with status ExitCode (3). Proves that
//     the tick is fired exactly once afterwards, by a restarted or another
//     scheduler (mode 69).
//   - scheduler.exit-mid-expansion: once a scheduler pass has inserted the
//     elements of a for_each task (and their outbox rows), inside the
//     pass's transaction and before its commit, the scheduler exits with
//     status ExitCode (3). Proves that the expansion dies with it whole
//     and is made once, by a restarted or another scheduler (mode 94).
//   - scheduler.exit-mid-child-start: once a scheduler pass has triggered
//     a workflow task's child run and named the parent task on it, inside
//     the pass's transaction and before its commit, the scheduler exits
//     with status ExitCode (3). Proves that the child run dies with the
//     pass and is started once, by a restarted or another scheduler (mode
//     106).
//
// A daemon logs a warning at start when failpoints are configured, so a
// failpoint left set in a real deployment is visible.
package failpoint
