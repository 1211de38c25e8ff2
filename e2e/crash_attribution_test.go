package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/e2e/harness"
)

// TestAPoisonTaskAmongTwentyInnocentOnesIsTheOnlyOneDead: modes 128 and
// 129, the trial. A task whose handler SIGKILLs its worker runs
// on a worker at --concurrency 10 beside 20 innocent tasks, and a loop in
// the test restarts the worker each time it dies. The first crash is
// forced to catch the poison with 9 innocents in flight (it kills only
// once 9 have started; they block until the test releases them after that
// crash): the reaper cannot tell them apart, so all ten get that attempt
// back and become suspects. From then on the poison runs alone, and each
// crash it causes counts: it is DEAD after exactly 1 + 3 crashes, while
// every innocent task SUCCEEDED within its attempts (attempt <=
// max_attempts, at most max_attempts counted). Before the rule, each of
// the 9 lost an attempt at the first crash (max_attempts stayed 2).
func TestAPoisonTaskAmongTwentyInnocentOnesIsTheOnlyOneDead(t *testing.T) {
	t.Parallel()
	s := harness.NewStack(t, harness.StackOptions{})
	bin := s.WithBin(harness.BuildTestBin(t))
	db := s.DB(t)
	s.ControlPlane(t, "--sweep-interval", "200ms")
	dir := t.TempDir()
	const retry = "retry: {max_attempts: %d, initial_backoff: 100ms, max_backoff: 100ms}"
	workers := &workerRestarts{t: t, start: func(name string) *harness.Process {
		return bin.Daemon(t, name, "worker", "--concurrency", "10", "--lease", "1s")
	}}
	workers.next() // before the applies: they check that a live worker has the handlers
	harness.Eventually(t, 30*time.Second, "the worker to register", func() (bool, error) {
		return harness.QueryInt(t, db, `SELECT count(*) FROM workers WHERE role = 'worker' AND handlers IS NOT NULL`) > 0, nil
	})
	bin.Apply(t, fmt.Sprintf("name: poison\ntasks:\n  - {name: p, handler: poison, params: {dir: %q, others: 9}, "+retry+"}\n", dir, 3))
	innocents := "name: innocents\ntasks:\n"
	for i := range 20 {
		innocents += fmt.Sprintf("  - {name: i%02d, handler: innocent, params: {dir: %q}, "+retry+"}\n", i, dir, 2)
	}
	bin.Apply(t, innocents)

	poisonRun := bin.Trigger(t, "poison")
	first := crashWaitTask(t, db, poisonRun, "p", 30*time.Second, "to be RUNNING", func(c crashTask) bool { return c.State == "RUNNING" })
	w0 := first.Worker.String
	innocentRun := bin.Trigger(t, "innocents")
	if code := crashWaitExit(t, workers.last(), 60*time.Second); code != 128+9 {
		t.Fatalf("worker-0 exited %d, want 137 (SIGKILL by the poison)\n%s", code, workers.last().Logs())
	}
	if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_events WHERE worker_id = $1 AND reason = 'claimed'`, w0); n != 10 {
		t.Fatalf("worker-0 claimed %d tasks before the first crash, want 10 (the poison and 9 innocents)", n)
	}
	if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	workers.deaths++
	workers.next()
	harness.Eventually(t, 90*time.Second, "the poison DEAD and the innocents' run settled", func() (bool, error) {
		if err := workers.restartTheDead(); err != nil {
			return false, err
		}
		deaths := workers.deaths
		p := crashTaskOf(t, db, poisonRun, "p")
		if n := harness.QueryInt(t, db, `SELECT count(*) FROM task_runs WHERE run_id = $1 AND state = 'DEAD'`, innocentRun); n > 0 {
			t.Fatalf("%d innocent tasks DEAD after %d crashes (the poison %s at attempt %d)", n, deaths, p.State, p.Attempt)
		}
		return p.State == "DEAD" && crashRunState(t, db, innocentRun) == "SUCCEEDED",
			fmt.Errorf("poison %s attempt %d, innocents' run %s, %d crashes", p.State, p.Attempt, crashRunState(t, db, innocentRun), deaths)
	})

	// The innocents first, in columns an older schema has too: this test
	// failed on the code before the rule here, or at the innocents' run
	// FAILED above.
	rows, err := db.Query(`SELECT t.task_name, t.state, t.attempt, t.max_attempts,
	       EXISTS (SELECT 1 FROM task_events e WHERE e.task_run_id = t.id AND e.worker_id = $2 AND e.reason = 'claimed'),
	       EXISTS (SELECT 1 FROM task_events e WHERE e.task_run_id = t.id
	                 AND e.reason LIKE '%given back: reaped with 9 other tasks of worker ' || $2 || '%')
	  FROM task_runs t WHERE t.run_id = $1 ORDER BY t.task_name`, innocentRun, w0)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var atFirstCrash, givenBack int
	for rows.Next() {
		var name, st string
		var att, maxAtt int
		var inFirst, backAtFirst bool
		if err := rows.Scan(&name, &st, &att, &maxAtt, &inFirst, &backAtFirst); err != nil {
			t.Fatal(err)
		}
		// Each give-back raised max_attempts by one: at most 2 counted.
		if st != "SUCCEEDED" || att > maxAtt || att-(maxAtt-2) > 2 {
			t.Errorf("innocent %s: %s, attempt %d of %d; want SUCCEEDED within its attempts", name, st, att, maxAtt)
		}
		if inFirst {
			atFirstCrash++
			if !backAtFirst || maxAtt < 3 {
				t.Errorf("innocent %s was in flight at the first crash: max_attempts %d; want its attempt given back (history: reaped with 9 other tasks of %s)", name, maxAtt, w0)
			}
		}
		givenBack += maxAtt - 2
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if atFirstCrash != 9 {
		t.Fatalf("%d innocents in flight at the first crash, want 9", atFirstCrash)
	}
	var state string
	var attempt, maxAttempts, refunds int
	if err := db.QueryRow(`SELECT state, attempt, max_attempts, crash_refunds FROM task_runs WHERE run_id = $1`, poisonRun).
		Scan(&state, &attempt, &maxAttempts, &refunds); err != nil {
		t.Fatal(err)
	}
	if deaths := workers.deaths; state != "DEAD" || attempt != 4 || maxAttempts != 4 || refunds != 1 || deaths != 4 {
		t.Fatalf("poison %s attempt %d of %d, %d given back, after %d crashes; want DEAD at 4 of 4 (the first crash given back, 3 counted) after 4 crashes",
			state, attempt, maxAttempts, refunds, workers.deaths)
	}
	t.Logf("4 crashes; the innocents got %d attempts back in all; %d workers started", givenBack, len(workers.workers))
	if !strings.Contains(workers.workers[1].Logs(), "worker: running a crash suspect alone") {
		t.Errorf("worker-1 never ran a suspect alone:\n%s", workers.workers[1].Logs())
	}
}
