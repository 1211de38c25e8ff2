package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/daemon/supervisor"
	"github.com/flowforge/flowforge/e2e/harness"
)

// TestASecondWorkerUnderALiveIDExitsTwoNamingItsHolder: mode 90. While a
// worker runs with --id dup-worker, a second `ffctl daemon worker --id
// dup-worker` exits 2 within a few seconds, saying the id is in use and
// naming the first's host, pid and last heartbeat; the first runs on and
// its row is its own. Before, both ran and heartbeated into one workers
// row: one of them invisible on the Workers screen, the other's presence
// a mix of the two.
func TestASecondWorkerUnderALiveIDExitsTwoNamingItsHolder(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	first := s.Daemon(t, "first", "worker", "--id", "dup-worker")
	first.WaitForLog(t, "daemon: started", 30*time.Second)
	began := time.Now()
	second := s.Daemon(t, "second", "worker", "--id", "dup-worker")
	code, err := second.Wait(30 * time.Second)
	if err != nil || code != 2 {
		t.Fatalf("the second worker under a live id: exit %d (%v), want 2\n%s", code, err, second.Logs())
	}
	if d := time.Since(began); d > 15*time.Second {
		t.Fatalf("refused after %s, want within a heartbeat or two (%s each)", d, supervisor.PresenceInterval)
	}
	host, _ := os.Hostname()
	for _, want := range []string{
		fmt.Sprintf(`ffctl: daemon worker: id "dup-worker" is in use by a live process: worker pid %d on host %s`, first.Pid(), host),
		"last seen", "give this process another --id, or stop that one",
	} {
		if !strings.Contains(second.Logs(), want) {
			t.Errorf("the refusal does not say %q:\n%s", want, second.Logs())
		}
	}
	if first.Exited() {
		t.Fatalf("the first worker stopped:\n%s", first.Logs())
	}
	if pid := harness.QueryInt(t, db, `SELECT pid FROM workers WHERE id = 'dup-worker'`); pid != first.Pid() {
		t.Fatalf("the workers row has pid %d, want the first worker's %d", pid, first.Pid())
	}
}

// TestAWorkerRestartedAfterKill9UnderItsIDStartsWithinALease: mode 90. A
// worker SIGKILLed leaves a fresh row that no heartbeat moves any more; the
// same `ffctl daemon worker --id` started again at once (systemd's
// Restart=) is not refused: it waits, saying why, and takes the id over
// once the dead one's last heartbeat is a lease (15 s) old, then runs.
func TestAWorkerRestartedAfterKill9UnderItsIDStartsWithinALease(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	db := s.DB(t)
	old := s.Daemon(t, "old", "worker", "--id", "restarted")
	old.WaitForLog(t, "daemon: started", 30*time.Second)
	old.Kill()
	began := time.Now()
	again := s.Daemon(t, "again", "worker", "--id", "restarted")
	again.WaitForLog(t, "daemon: id in use; waiting for its holder's heartbeat (then refused) or for its lease to lapse (then taken over)", 20*time.Second)
	again.WaitForLog(t, "daemon: started", supervisor.IDLeaseDefault+15*time.Second)
	if d := time.Since(began); d > supervisor.IDLeaseDefault+10*time.Second {
		t.Fatalf("the restarted worker started %s after the kill, want within about the id lease (%s)", d, supervisor.IDLeaseDefault)
	}
	if !strings.Contains(again.Logs(), "daemon: id taken over from a process not heard from within the lease") {
		t.Fatalf("the takeover is not logged:\n%s", again.Logs())
	}
	if pid := harness.QueryInt(t, db, `SELECT pid FROM workers WHERE id = 'restarted'`); pid != again.Pid() {
		t.Fatalf("the workers row has pid %d, want the restarted worker's %d", pid, again.Pid())
	}
}
