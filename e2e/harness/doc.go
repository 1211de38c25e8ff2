// Package harness lets end-to-end tests run private, disposable copies of
// the infrastructure FlowForge depends on, and the real ffctl binary, as
// ordinary child processes of the test binary.
//
// # What it starts
//
//   - StartPostgres: a private PostgreSQL 15 cluster (initdb into a fresh
//     temporary directory, postmaster on a free 127.0.0.1 port, fsync off).
//   - StartRabbit / StartRabbitCluster: private RabbitMQ 3.10 nodes with
//     their own node names, AMQP and distribution ports, Mnesia directories
//     and Erlang cookie; no plugins.
//   - StartProcess / BuildFFCTL: arbitrary subprocesses (typically ffctl)
//     with stdout+stderr captured in a log file. BuildTestBin builds
//     testbin (this package's testbin directory): ffctl made with cli.Main
//     and handlers of its own, for tests that need a handler the built-ins
//     lack. End-to-end tests run FlowForge only as such binaries: no
//     worker, scheduler or publisher runs inside the test process.
//   - NewStack: one isolated installation (database, queue, binary) and
//     the observations every test makes of it: Daemon, DaemonEnv,
//     ControlPlane and DaemonWithHealth start daemons; WaitRuns waits for
//     run states; QueueDepth and Messages read the broker's queues,
//     BrokerChannel gives a test a channel of its own on the broker;
//     MetricsText, Scrape, Metric and WaitMetric read a daemon's /metrics;
//     QueryInt runs a one-integer query.
//   - StartProxy: a fault-injecting TCP proxy on a free 127.0.0.1 port in
//     front of one address (a daemon's database URL points at Proxy.URL):
//     pass, reset every connection, refuse connections (nothing listens;
//     the port stays the proxy's), black-hole (hold both directions), drop
//     replies, or lose the one reply that reports a PostgreSQL commit
//     (DropCommitReply). It touches only the connections made through it.
//     StartProxyOn listens on another address of the machine (a Netns's).
//   - NewNetns: a network namespace for one daemon (Stack.DaemonIn runs it
//     there), routed to the host through a second namespace whose
//     blackhole rules (Cut, Heal) drop its packets silently, as a real
//     partition does. Servers it reaches listen on its HostAddr
//     (PostgresOptions.Listen with StartPostgresWith,
//     RabbitOptions.Listen). Needs root and iproute2's ip, else the test
//     is skipped, saying why.
//
// Tests may Kill, Stop, Start and Restart these servers at will: that is the
// point of the package. Every signal the package sends goes to a process id
// that the package itself started (or to a descendant of one), never to a
// process found by name or port, so the shared services on 5432/5672 and
// other engineers' processes are never touched.
//
// # Cleanup
//
// Every Start* function registers a t.Cleanup that kills what it started and
// removes its directories, also when the test fails or calls t.FailNow. When
// the test failed, the last 50 lines of the relevant log are printed with
// t.Log. Processes are reaped by the test binary itself: this matters on
// machines whose init process does not reap orphans (killed orphans would
// otherwise linger as zombies and confuse "is it still running" checks).
//
// If the test binary itself is killed (for example by the go test -timeout
// panic, or by a mutant that panics it under make mutate) cleanups do not
// run: processes from StartProcess die with it (their parent-death signal is
// SIGKILL), but the servers are left behind in $TMPDIR/fft-*; an
// interactive Ctrl-C, however, also reaches the servers (they share the
// test's process group) and shuts them down.
//
// # Missing software
//
// If the PostgreSQL binaries or the RabbitMQ scripts are not installed, the
// Start functions call t.Skip, unless the environment variable CI is set to
// a true value (anything but "", "0" or "false"), in which case they call
// t.Fatal. Locations can be overridden with FFTEST_PG_BINDIR (directory
// holding initdb and postgres) and FFTEST_RABBITMQ_SCRIPT (path of the
// package's own rabbitmq-server script, not the /usr/sbin wrapper).
//
// # Root
//
// PostgreSQL refuses to run as root; when the test runs as root the harness
// runs initdb and postgres as the "postgres" user (looked up with os/user)
// in a directory owned by that user.
//
// # Package state
//
// The only package-level state is the build cache used by BuildGo and
// BuildFFCTL (each package is built at most once per test binary); call
// RemoveBuilds from TestMain to delete the built binaries afterwards.
package harness
