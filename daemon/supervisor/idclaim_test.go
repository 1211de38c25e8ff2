package supervisor_test

import (
	"database/sql"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core/store/storetest"
	"github.com/flowforge/flowforge/daemon/supervisor"
)

// idRow is the workers row of id: its pid, hostname and instance token
// (started_at); ok false when there is none.
type idRow struct {
	pid       int
	host      string
	startedAt time.Time
	ok        bool
}

func rowOf(t *testing.T, db *sql.DB, id string) idRow {
	t.Helper()
	var r idRow
	err := db.QueryRowContext(t.Context(), `SELECT pid, hostname, started_at FROM workers WHERE id = $1`, id).Scan(&r.pid, &r.host, &r.startedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return r
	}
	if err != nil {
		t.Fatal(err)
	}
	r.ok = true
	return r
}

// schedulerConfig is a scheduler process of id on dbURL whose id is held
// for lease after its last heartbeat.
func schedulerConfig(dbURL, id string, lease time.Duration) supervisor.Config {
	return supervisor.Config{Role: supervisor.RoleScheduler, ID: id, DatabaseURL: dbURL, IDLease: lease, NoPrune: true}
}

// TestASecondProcessUnderALiveIDIsRefused: mode 90. A process started with
// the id of a live one (its heartbeat keeps coming) watches the row until
// the holder is heard from, then Run returns an *IDInUseError naming the
// id, the holder's host, pid and last heartbeat; it never starts, and the
// holder's row and run are untouched. Before, both ran and heartbeated
// into one row, one of them invisible.
func TestASecondProcessUnderALiveIDIsRefused(t *testing.T) {
	_, db, dbURL := storetest.NewWithDB(t)
	noLeaks(t)
	const lease = 1500 * time.Millisecond
	first := start(t, schedulerConfig(dbURL, "dup", lease))
	eventually(t, 20*time.Second, "the first process to start", func() bool { return len(first.logs.records("daemon: started")) == 1 })
	held := rowOf(t, db, "dup")

	began := time.Now()
	second := start(t, schedulerConfig(dbURL, "dup", lease))
	err := second.wait(t)
	var inUse *supervisor.IDInUseError
	if !errors.As(err, &inUse) {
		t.Fatalf("the second process under a live id: Run = %v, want an *IDInUseError\n%s", err, second.logs)
	}
	if d := time.Since(began); d > lease+2*time.Second {
		t.Fatalf("refused after %s, want within about a heartbeat (%s)", d, lease/3)
	}
	host, _ := os.Hostname()
	for _, want := range []string{`id "dup" is in use by a live process`, "scheduler pid", "on host " + host, "last seen", "another --id"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	if !inUse.Holder.StartedAt.Equal(held.startedAt) {
		t.Errorf("the refusal names the holder started at %v, want the first process's %v", inUse.Holder.StartedAt, held.startedAt)
	}
	if n := len(second.logs.records("daemon: started")); n != 0 {
		t.Fatalf("the refused process started\n%s", second.logs)
	}
	if now := rowOf(t, db, "dup"); !now.startedAt.Equal(held.startedAt) {
		t.Fatalf("the refused process touched the holder's row: %+v, was %+v", now, held)
	}
	select {
	case err := <-first.done:
		t.Fatalf("the holder stopped (%v) when the second was refused", err)
	default:
	}
}

// TestAProcessRestartedAfterACrashTakesOverItsIDWithinALease: mode 90. The
// row of a process that died without a stop (kill -9) is fresh and no
// heartbeat moves it: a process started again under its id waits, logging
// why, and takes the id over once the row's last heartbeat is a lease old
// (no longer), then runs as usual.
func TestAProcessRestartedAfterACrashTakesOverItsIDWithinALease(t *testing.T) {
	_, db, dbURL := storetest.NewWithDB(t)
	noLeaks(t)
	const lease = 1500 * time.Millisecond
	if _, err := db.ExecContext(t.Context(), `INSERT INTO workers (id, role, hostname, pid) VALUES ('crashed', 'scheduler', 'gone-host', 4242)`); err != nil {
		t.Fatal(err)
	}
	dead := rowOf(t, db, "crashed")
	began := time.Now()
	r := start(t, schedulerConfig(dbURL, "crashed", lease))
	eventually(t, 20*time.Second, "the restarted process to start", func() bool { return len(r.logs.records("daemon: started")) == 1 })
	if d := time.Since(began); d > lease+5*time.Second {
		t.Fatalf("started %s after a crashed holder's last heartbeat, want within about the lease (%s)", d, lease)
	}
	waiting := r.logs.records("daemon: id in use; waiting for its holder's heartbeat (then refused) or for its lease to lapse (then taken over)")
	if len(waiting) != 1 || waiting[0]["holder_pid"] != float64(4242) || waiting[0]["holder_hostname"] != "gone-host" {
		t.Fatalf("the wait is not logged once with the holder: %v\n%s", waiting, r.logs)
	}
	if len(r.logs.records("daemon: id taken over from a process not heard from within the lease")) != 1 {
		t.Fatalf("the takeover is not logged\n%s", r.logs)
	}
	if now := rowOf(t, db, "crashed"); now.pid != os.Getpid() || !now.startedAt.After(dead.startedAt) {
		t.Fatalf("row after the takeover %+v, want this process's with a later token than %v", now, dead.startedAt)
	}
}

// TestAProcessWhoseIDIsTakenOverStops: mode 90. Another process takes the
// id over (as it may once this one's heartbeat lapsed, its database out of
// reach for longer than the lease): at its next heartbeat the process sees
// the row is not its claim's any more and stops as on its first signal;
// Run returns an *IDTakenOverError naming the taker, whose row it leaves
// alone.
func TestAProcessWhoseIDIsTakenOverStops(t *testing.T) {
	_, db, dbURL := storetest.NewWithDB(t)
	noLeaks(t)
	r := start(t, schedulerConfig(dbURL, "taken", 3*time.Second))
	eventually(t, 20*time.Second, "the process to start", func() bool { return len(r.logs.records("daemon: started")) == 1 })
	if _, err := db.ExecContext(t.Context(), `UPDATE workers SET hostname = 'taker', pid = 777, started_at = now(), last_seen_at = now() WHERE id = 'taken'`); err != nil {
		t.Fatal(err)
	}
	taker := rowOf(t, db, "taken")
	err := r.wait(t)
	var over *supervisor.IDTakenOverError
	if !errors.As(err, &over) || over.Holder.PID != 777 || !strings.Contains(err.Error(), `id "taken" was taken over by scheduler pid 777 on host taker`) {
		t.Fatalf("Run after its id was taken over: %v, want an *IDTakenOverError naming pid 777 on taker\n%s", err, r.logs)
	}
	if len(r.logs.records("daemon: id taken over by another process; stopping")) != 1 ||
		len(r.logs.records("daemon: stopping gracefully (signal again to abort in-flight tasks)")) != 1 {
		t.Fatalf("the takeover and the stop are not logged\n%s", r.logs)
	}
	if now := rowOf(t, db, "taken"); !now.ok || now.pid != 777 || !now.startedAt.Equal(taker.startedAt) {
		t.Fatalf("the stopped process touched its taker's row: %+v, want %+v", now, taker)
	}
}

// TestAStoppedProcessReleasesItsID: a process that stops gracefully
// deletes its row, so the same id starts again at once (a systemctl
// restart waits for no lease).
func TestAStoppedProcessReleasesItsID(t *testing.T) {
	_, db, dbURL := storetest.NewWithDB(t)
	noLeaks(t)
	cfg := schedulerConfig(dbURL, "again", time.Minute)
	r := start(t, cfg)
	eventually(t, 20*time.Second, "the process to start", func() bool { return len(r.logs.records("daemon: started")) == 1 })
	r.stop()
	if err := r.wait(t); err != nil {
		t.Fatal(err)
	}
	if row := rowOf(t, db, "again"); row.ok {
		t.Fatalf("row left after a graceful stop: %+v", row)
	}
	began := time.Now()
	r = start(t, cfg)
	eventually(t, 20*time.Second, "the process to start again", func() bool { return len(r.logs.records("daemon: started")) == 1 })
	if d := time.Since(began); d > 10*time.Second || len(r.logs.records("daemon: id in use; waiting for its holder's heartbeat (then refused) or for its lease to lapse (then taken over)")) != 0 {
		t.Fatalf("started again after %s, having waited for its own id\n%s", d, r.logs)
	}
}
