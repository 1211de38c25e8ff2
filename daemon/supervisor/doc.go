// Package supervisor runs one FlowForge daemon process: the scheduler, the
// publisher, the worker, or all three (Config.Role; the scheduler's roles
// also run the retention pruner, package pruner, unless Config.NoPrune),
// with the health
// server, the dependency watcher, the xmin-horizon watcher (package
// dbhealth) and the presence heartbeat around them. ffctl's `daemon`
// commands map their flags to a Config and call Run; a custom binary can do
// the same.
//
// A process goes through these stages:
//
//	start:       health server up (/health/live 200, /health/ready 503)
//	   |
//	connect:     open the store, retrying with backoff until PostgreSQL
//	   |         answers (a schema of another version, or a refused login:
//	   |         wrong password, unknown role or database, is fatal); the
//	   |         roles that use the broker check their login once
//	   |         (broker.CheckLogin: a refusal is fatal, no answer is the
//	   |         loops' to retry)
//	   |
//	claim id:    take Config.ID (store.ClaimWorkerID); while a row holds
//	   |         it, watch that row: heard from -> *IDInUseError; silent
//	   |         for Config.IDLease -> taken over
//	   |
//	build:       the worker opens its lease-renewal pool as the store; the
//	   |         publisher and worker dial the broker once (a queue
//	   |         declared with other arguments is fatal, anything else is
//	   |         retried by their loops)
//	   |
//	run:         the daemons' loops, the watchers and the heartbeat
//	   |
//	   |--ctx done (first signal)----> drain: the loops stop taking work
//	   |                                 and finish what they hold
//	   |--Hard closed (second signal)-> abort: the worker cancels its
//	   |  or StopTimeout passed          in-flight handlers
//	   |--a loop fails----------------> the others stop as on ctx done
//	   |--the id taken over-----------> drain as on ctx done, then
//	   |                                 *IDTakenOverError
//	   v
//	stopped:     every goroutine joined, the id's row released (unless
//	             taken over), pools closed, health server down
//
// Faults: PostgreSQL away at start is waited for (readiness reports it);
// away later, the loops retry on their own and the watcher logs "daemon:
// dependency lost" / "daemon: dependency recovered" and sets
// flowforge_dependency_up. A login the database or broker refuses at
// start ends the process with the server's reason. A loop that returns an
// error ends the process: Run returns that error. The presence heartbeat
// (every IDLease/3) runs until the loops have drained; when it finds its
// row taken over by another process (possible only after its own
// heartbeat lapsed for a lease), the process stops.
//
// SignalStop turns the process's SIGINT and SIGTERM into the two stages.
package supervisor
