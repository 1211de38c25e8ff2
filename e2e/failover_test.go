package e2e

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core/store/storetest"
	"github.com/flowforge/flowforge/e2e/harness"
)

// failoverChainYAML: its second task sleeps long enough to be RUNNING on a
// worker when the primary is killed.
const failoverChainYAML = `
name: failover-chain
tasks:
  - {name: first, handler: noop}
  - {name: second, handler: sleep, params: {duration: 1500ms}, depends_on: [first]}
`

// failoverURL is dbURL (a database on primary) given both servers, the
// primary first, and target_session_attrs=read-write: a connection goes to
// whichever of the two takes writes (libpq's and pgx's multi-host form).
func failoverURL(t *testing.T, dbURL string, primary, standby *harness.Postgres) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d", primary.Port, standby.Port)
	q := u.Query()
	q.Set("target_session_attrs", "read-write")
	u.RawQuery = q.Encode()
	return u.String()
}

// failoverStack is a stack on dbURL with a scheduler, a publisher and two
// workers, each ready.
func failoverStack(t *testing.T, dbURL string) (*harness.Stack, []*harness.HealthDaemon) {
	t.Helper()
	s := harness.NewStack(t, harness.StackOptions{DatabaseURL: dbURL})
	all := []*harness.HealthDaemon{
		s.DaemonWithHealth(t, "scheduler", "scheduler"),
		s.DaemonWithHealth(t, "publisher", "publisher"),
		s.DaemonWithHealth(t, "worker-a", "worker", "--concurrency", "4"),
		s.DaemonWithHealth(t, "worker-b", "worker", "--concurrency", "4"),
	}
	failoverReady(t, all, 20*time.Second)
	s.Apply(t, failoverChainYAML)
	return s, all
}

// failoverReady waits until every daemon of failoverStack is ready.
func failoverReady(t *testing.T, all []*harness.HealthDaemon, timeout time.Duration) {
	t.Helper()
	recoveryReadyOK(t, all[0], timeout, "postgres")
	for _, d := range all[1:] {
		recoveryReadyOK(t, d, timeout, "postgres", "rabbitmq")
	}
}

// failoverRunning waits until n tasks of the stack are RUNNING.
func failoverRunning(t *testing.T, s *harness.Stack, n int) {
	t.Helper()
	db := s.DB(t)
	harness.Eventually(t, 30*time.Second, fmt.Sprintf("%d tasks RUNNING", n), func() (bool, error) {
		var got int
		err := db.QueryRow(`SELECT count(*) FROM task_runs WHERE state = 'RUNNING'`).Scan(&got)
		return err == nil && got >= n, fmt.Errorf("%d RUNNING (%v)", got, err)
	})
}

// failoverTrigger triggers a run of failover-chain with idempotency key
// key and returns its id.
func failoverTrigger(t *testing.T, s *harness.Stack, key string) string {
	t.Helper()
	return strings.TrimSpace(s.MustCLI(t, "run", "trigger", "failover-chain", "--idempotency-key", key))
}

// TestAFailoverToASynchronousStandbyLosesNothing: mode 131. A private
// primary streams to a synchronous standby; the daemons and ffctl are
// given both in one URL with target_session_attrs=read-write. Ten runs are
// in flight (at least four tasks RUNNING on the workers) when the primary
// is SIGKILLed and the standby promoted. Every daemon reconnects to the
// new primary by itself (readiness 503, then 200 again, no restart), ten
// more runs are triggered through the same URL, and all twenty SUCCEEDED
// with each task started exactly once, on its first attempt: with
// synchronous replication no commit a daemon saw acknowledged (a claim, a
// finish, a promotion, an outbox stamp) is missing on the standby. The
// times from the kill to the promotion and to every daemon ready again
// are logged.
func TestAFailoverToASynchronousStandbyLosesNothing(t *testing.T) {
	primary := harness.StartPostgres(t)
	standby := harness.StartStandby(t, primary, harness.StandbyOptions{Synchronous: true})
	s, all := failoverStack(t, failoverURL(t, storetest.NewDatabaseOn(t, primary.URL("postgres")), primary, standby))
	var runs []string
	for i := range 10 {
		runs = append(runs, failoverTrigger(t, s, fmt.Sprintf("before-%d", i)))
	}
	failoverRunning(t, s, 4)
	kill := time.Now()
	primary.Kill(t)
	for _, d := range all {
		recoveryReadyDown(t, d, 30*time.Second, "postgres")
	}
	standby.Promote(t)
	promoted := time.Since(kill)
	failoverReady(t, all, 60*time.Second)
	t.Logf("failover: standby promoted %v after the kill; every daemon ready again %v after it",
		promoted.Round(time.Millisecond), time.Since(kill).Round(time.Millisecond))
	for i := range 10 {
		runs = append(runs, failoverTrigger(t, s, fmt.Sprintf("after-%d", i)))
	}
	s.WaitRuns(t, "SUCCEEDED", 60*time.Second, runs...)
	recoveryAssertAlive(t, all...)
	recoveryAssertRanOnce(t, s, runs, all[2], all[3])
}

// TestAFailoverToAnAsynchronousStandbyLosesItsLagAndRecoversByKey: mode
// 132. The standby streams asynchronously through a proxy. Five runs
// SUCCEEDED and replicated; then replication is cut (the proxy black-holes
// the standby's stream, as a lagging network does) while five more runs
// are triggered with idempotency keys and SUCCEEDED on the primary —
// acknowledged to ffctl and to the workers. The primary is killed and the
// standby promoted: the five later runs are gone from the new primary
// (the window: every commit after the standby's last received WAL; the
// primary's unreplicated WAL at the kill is logged in bytes). The daemons
// reconnect; a client that retries its triggers with the same keys gets
// each run exactly once, which runs to SUCCEEDED — its tasks ran twice in
// all, once on the lost timeline (at-least-once: what the failure model
// allows for handlers across an asynchronous failover). The first five
// stay SUCCEEDED, each task once.
func TestAFailoverToAnAsynchronousStandbyLosesItsLagAndRecoversByKey(t *testing.T) {
	primary := harness.StartPostgres(t)
	proxy := harness.StartProxy(t, fmt.Sprintf("127.0.0.1:%d", primary.Port))
	standby := harness.StartStandby(t, primary, harness.StandbyOptions{Via: proxy})
	s, all := failoverStack(t, failoverURL(t, storetest.NewDatabaseOn(t, primary.URL("postgres")), primary, standby))
	var kept, lost []string
	for i := range 5 {
		kept = append(kept, failoverTrigger(t, s, fmt.Sprintf("kept-%d", i)))
	}
	s.WaitRuns(t, "SUCCEEDED", 60*time.Second, kept...)
	waitReplayed(t, primary, standby)
	proxy.SetMode(harness.ProxyBlackhole)
	for i := range 5 {
		lost = append(lost, failoverTrigger(t, s, fmt.Sprintf("lost-%d", i)))
	}
	s.WaitRuns(t, "SUCCEEDED", 60*time.Second, lost...)
	last := primary.Psql(t, "postgres", "SELECT pg_current_wal_lsn()")
	primary.Kill(t)
	lag := standby.Psql(t, "postgres", "SELECT pg_wal_lsn_diff('"+last+"', pg_last_wal_receive_lsn())")
	standby.Promote(t)
	failoverReady(t, all, 60*time.Second)
	t.Logf("failover: %s bytes of the primary's WAL had not reached the standby at the kill", lag)
	if lag == "0" {
		t.Fatal("the standby had received all of the primary's WAL: the cut did not open a window")
	}
	for _, id := range lost {
		if _, _, code := s.CLI(t, "run", "show", id); code == 0 {
			t.Fatalf("run %s, acknowledged while replication was cut, is on the promoted standby; want it lost", id)
		}
	}
	var again []string
	for i := range 5 {
		again = append(again, failoverTrigger(t, s, fmt.Sprintf("lost-%d", i)))
		if again2 := failoverTrigger(t, s, fmt.Sprintf("lost-%d", i)); again2 != again[i] {
			t.Fatalf("key lost-%d: a second retry made run %s beside %s; want one run per key", i, again2, again[i])
		}
	}
	s.WaitRuns(t, "SUCCEEDED", 60*time.Second, again...)
	recoveryAssertAlive(t, all...)
	recoveryAssertRanOnce(t, s, kept, all[2], all[3])
	// The re-created runs' tasks have new ids: started once each on the
	// new timeline; with the lost timeline's, twice per task in all.
	recoveryAssertRanOnce(t, s, again, all[2], all[3])
	var before int
	for _, w := range all[2:] {
		before += len(recoveryLogs(w.Process, "worker: running task"))
	}
	if want := (len(kept) + 2*len(again)) * 2; before != want {
		t.Errorf("the workers started %d task attempts in all, want %d: the kept runs' tasks once, the lost runs' tasks twice (lost timeline, then again)", before, want)
	}
}

// waitReplayed waits until standby has replayed everything primary wrote
// so far.
func waitReplayed(t *testing.T, primary, standby *harness.Postgres) {
	t.Helper()
	target := primary.Psql(t, "postgres", "SELECT pg_current_wal_lsn()")
	harness.Eventually(t, 30*time.Second, "the standby to replay "+target, func() (bool, error) {
		got := standby.Psql(t, "postgres", "SELECT pg_wal_lsn_diff(pg_last_wal_replay_lsn(), '"+target+"') >= 0")
		return got == "t", fmt.Errorf("replayed up to %s", standby.Psql(t, "postgres", "SELECT pg_last_wal_replay_lsn()"))
	})
}
