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
//	   |         answers (a schema of another version is fatal); the
//	   |         worker opens its lease-renewal pool the same way; the
//	   |         publisher and worker dial the broker once (a queue
//	   |         declared with other arguments is fatal, anything else is
//	   |         retried by their loops)
//	   |
//	run:         the daemons' loops, the watchers and the heartbeat
//	   |
//	   |--ctx done (first signal)----> drain: the loops stop taking work
//	   |                                 and finish what they hold
//	   |--Hard closed (second signal)-> abort: the worker cancels its
//	   |                                 in-flight handlers
//	   |--a loop fails----------------> the others stop as on ctx done
//	   v
//	stopped:     every goroutine joined, pools closed, health server down
//
// Faults: PostgreSQL away at start is waited for (readiness reports it);
// away later, the loops retry on their own and the watcher logs "daemon:
// dependency lost" / "daemon: dependency recovered" and sets
// flowforge_dependency_up. A loop that returns an error ends the process:
// Run returns that error.
//
// SignalStop turns the process's SIGINT and SIGTERM into the two stages.
package supervisor
