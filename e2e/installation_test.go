package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store/storetest"
	"github.com/flowforge/flowforge/e2e/harness"
)

// Mode 89: two installations (two databases) whose daemons share one
// RabbitMQ vhost and one queue name.

// installationWorkflow is a two-task DAG, so that promotions dispatch too.
const installationWorkflow = "name: shared\ntasks:\n" +
	"  - {name: x, handler: noop}\n" +
	"  - {name: y, handler: noop, depends_on: [x]}\n"

// installationRuns is how many runs each installation triggers.
const installationRuns = 5

// TestTwoInstallationsSharingAQueueLoseNoDispatch: installations a and b,
// each with its own database on the shared PostgreSQL server, run their
// daemons on one vhost and one queue name. b's runs are triggered while
// only a's worker consumes, so each of b's dispatches reaches a's worker
// first; a's own runs, triggered next, succeed past them; then b's worker
// starts and every run of b succeeds too, each task once, on attempt 1.
// The schedulers' redispatch is an hour away, so no dispatch lost on the
// way could be made good within the test. a's worker counted and logged
// the foreign dispatches and acked none as a lost claim; nothing was
// dead-lettered. Before mode 89, a's worker acked b's dispatches as lost
// claims (unknown_task) and b's runs never finished.
func TestTwoInstallationsSharingAQueueLoseNoDispatch(t *testing.T) {
	a := harness.NewStack(t, harness.StackOptions{DatabaseURL: storetest.NewPrivateDatabase(t)})
	b := harness.NewStack(t, harness.StackOptions{DatabaseURL: storetest.NewPrivateDatabase(t), Bin: a.Bin})
	b.Queue = a.Queue // the misconfiguration: one vhost, one queue name
	installationStatusDiffers(t, a, b)
	for name, s := range map[string]*harness.Stack{"a": a, "b": b} {
		s.Apply(t, installationWorkflow)
		s.Daemon(t, name+"-scheduler", "scheduler", "--id", name+"-scheduler", "--redispatch-after", "1h")
		s.Daemon(t, name+"-publisher", "publisher", "--id", name+"-publisher")
	}
	aWorker := a.DaemonWithHealth(t, "a-worker", "worker", "--id", "a-worker")
	aWorker.WaitForLog(t, "worker: started", 30*time.Second)

	bRuns := make([]string, installationRuns)
	for i := range bRuns {
		bRuns[i] = b.Trigger(t, "shared")
	}
	// Each of b's first tasks reaches a's worker, the only consumer.
	bDB := b.DB(t)
	rows, err := bDB.QueryContext(t.Context(), `SELECT id::text FROM task_runs WHERE task_name = 'x'`)
	if err != nil {
		t.Fatal(err)
	}
	var bTasks []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		bTasks = append(bTasks, id)
	}
	rows.Close()
	harness.Eventually(t, 30*time.Second, "each of b's dispatches to reach a's worker", func() (bool, error) {
		logs := aWorker.Logs()
		for _, id := range bTasks {
			if !strings.Contains(logs, id) {
				return false, fmt.Errorf("a's worker has not seen b's task %s", id)
			}
		}
		return true, nil
	})

	aRuns := make([]string, installationRuns)
	for i := range aRuns {
		aRuns[i] = a.Trigger(t, "shared")
	}
	a.WaitRuns(t, "SUCCEEDED", 30*time.Second, aRuns...)

	b.DaemonWithHealth(t, "b-worker", "worker", "--id", "b-worker")
	b.WaitRuns(t, "SUCCEEDED", 30*time.Second, bRuns...)

	for name, s := range map[string]*harness.Stack{"a": a, "b": b} {
		db := s.DB(t)
		if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_runs WHERE state <> 'SUCCEEDED' OR attempt <> 1`); n != 0 {
			t.Errorf("installation %s: %d tasks did not succeed on attempt 1", name, n)
		}
		if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_events WHERE to_state = 'RUNNING'`); n != 2*installationRuns {
			t.Errorf("installation %s: %d claims, want %d (each task once)", name, n, 2*installationRuns)
		}
	}
	if n := harness.QueryInt(t, bDB, `SELECT count(*) FROM task_events WHERE to_state = 'RUNNING' AND worker_id <> 'b-worker'`); n != 0 {
		t.Errorf("%d of b's tasks were claimed by another installation's worker", n)
	}
	forwarded, _, err := harness.Scrape(aWorker.Health, "flowforge_foreign_dispatches_total")
	if err != nil || forwarded < installationRuns {
		t.Errorf("a's flowforge_foreign_dispatches_total = %v (%v), want at least %d", forwarded, err, installationRuns)
	}
	logs := aWorker.Logs()
	if !strings.Contains(logs, "worker: a dispatch of another installation reached this worker's queue") {
		t.Errorf("a's worker never logged the foreign dispatches:\n%s", logs)
	}
	if strings.Contains(logs, `"reason":"unknown_task"`) {
		t.Errorf("a's worker acked a dispatch as a lost claim of an unknown task:\n%s", logs)
	}
	if n := a.Messages(t, broker.DeadLetterQueue(a.Queue)); n != 0 {
		t.Errorf("the dead-letter queue holds %d messages, want 0", n)
	}
}

// installationStatusDiffers checks that `ffctl status -o json` tells the
// two installations apart by id and database, and shows them on one vhost
// and queue.
func installationStatusDiffers(t *testing.T, a, b *harness.Stack) {
	t.Helper()
	type status struct {
		Installation struct {
			ID string `json:"id"`
		} `json:"installation"`
		Database struct {
			Database string `json:"database"`
		} `json:"database"`
		Broker struct {
			Vhost string `json:"vhost"`
			Queue string `json:"queue"`
		} `json:"broker"`
	}
	var st [2]status
	for i, s := range []*harness.Stack{a, b} {
		if err := json.Unmarshal([]byte(s.MustCLI(t, "status", "-o", "json")), &st[i]); err != nil {
			t.Fatal(err)
		}
	}
	if st[0].Installation.ID == "" || st[0].Installation.ID == st[1].Installation.ID || st[0].Database.Database == st[1].Database.Database {
		t.Fatalf("ffctl status does not tell the installations apart: %+v and %+v", st[0], st[1])
	}
	if st[0].Broker != st[1].Broker {
		t.Fatalf("the installations' broker settings differ: %+v and %+v", st[0].Broker, st[1].Broker)
	}
}
