package cli_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/daemon/logtest"
)

const bulkWorkflow = "name: bulk\ntasks:\n  - {name: a, handler: noop}\n  - {name: b, handler: noop, depends_on: [a]}\n"

// runsFile writes content to a file in a temporary directory and returns
// its path.
func runsFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "runs.jsonl")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// runCount is how many runs the database holds.
func (h *harness) runCount() int {
	h.t.Helper()
	var n int
	if err := h.db.QueryRowContext(h.ctx, `SELECT count(*) FROM workflow_runs`).Scan(&n); err != nil {
		h.t.Fatal(err)
	}
	return n
}

// TestABadRunsFileIsRefusedWithItsLineAndWritesNothing: every line of a
// --runs-file is checked before the first batch (also against the
// workflow: a task key its params cannot render), so one bad line anywhere
// is a usage error naming it and its reason, and no run is created, even
// with batches of one.
func TestABadRunsFileIsRefusedWithItsLineAndWritesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(bulkWorkflow)
	h.apply("name: keyed\ntasks:\n  - {name: a, handler: noop, idempotency_key: 'k-{{ .Params.day }}'}\n")
	large := `{"x":"` + strings.Repeat("y", core.MaxParamsBytes) + `"}`
	cases := []struct {
		name, workflow, content string
		want                    []string
	}{
		{"not JSON", "bulk", "{}\n{\"a\":\n{}\n", []string{"line 2", "not JSON"}},
		{"not an object", "bulk", "{}\n\n[1, 2]\n", []string{"line 3", "want a JSON object, got an array"}},
		{"a string", "bulk", "\"x\"\n", []string{"line 1", "want a JSON object"}},
		{"a NUL character", "bulk", "{}\n{\"a\":\"\\u0000\"}\n", []string{"line 2", "NUL character"}},
		{"two objects on a line", "bulk", "{} {}\n", []string{"line 1", "trailing data"}},
		{"a line too large", "bulk", "{}\n{}\n" + large + "\n", []string{"line 3", "limit of"}},
		{"an empty file", "bulk", "", []string{"has no run"}},
		{"only blank lines", "bulk", "\n  \n\n", []string{"has no run"}},
		{"a key its params cannot render", "keyed", "{\"day\":\"mon\"}\n{\"day\":\"tue\"}\n{}\n", []string{"line 3", "invalid params"}},
		{"an unknown workflow", "nope", "{}\n", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := h.snapshot()
			r := h.ff("run", "trigger", c.workflow, "--runs-file", runsFile(t, c.content), "--batch-size", "1")
			if c.want == nil {
				expect(t, r, 1, "not found")
			} else {
				expect(t, r, 2, c.want...)
				expect(t, r, 2, "nothing was triggered")
			}
			if r.stdout != "" {
				t.Fatalf("a refused file printed run ids:\n%s", r)
			}
			h.assertUnchanged(before)
		})
	}
}

// TestBulkTriggerFlagsThatDoNotCombine: --runs-file gives each run its
// whole params, neither waits nor de-duplicates: the flags that would say
// otherwise are usage errors, as are the bulk flags without it.
func TestBulkTriggerFlagsThatDoNotCombine(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(bulkWorkflow)
	f := runsFile(t, "{}\n")
	params := runsFile(t, "{}")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--runs-file", f, "--param", "a=b"}, "--runs-file and --param"},
		{[]string{"--runs-file", f, "--params-file", params}, "--runs-file and --params-file"},
		{[]string{"--runs-file", f, "--idempotency-key", "k"}, "--runs-file and --idempotency-key"},
		{[]string{"--runs-file", f, "--wait"}, "--runs-file and --wait"},
		{[]string{"--runs-file", f, "--timeout", "1s"}, "--runs-file and --timeout"},
		{[]string{"--runs-file", f, "--batch-size", "0"}, "--batch-size 0"},
		{[]string{"--runs-file", f, "--from-line", "0"}, "--from-line 0"},
		{[]string{"--runs-file", ""}, "--runs-file is empty"},
		{[]string{"--batch-size", "10"}, "--batch-size goes with --runs-file"},
		{[]string{"--from-line", "2"}, "--from-line goes with --runs-file"},
	} {
		t.Run(c.want, func(t *testing.T) {
			expect(t, h.ff(append([]string{"run", "trigger", "bulk"}, c.args...)...), 2, c.want)
		})
	}
	if n := h.runCount(); n != 0 {
		t.Fatalf("%d runs created by refused commands", n)
	}
}

// TestBulkTriggerCreatesOneRunPerLine: every non-blank line is one run with
// that line's params, created in batches, each id printed once (in line
// order), or in -o json with its line; --from-line starts further on;
// standard input works as a file.
func TestBulkTriggerCreatesOneRunPerLine(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(bulkWorkflow)
	var lines []string
	var want []string // the params of each run, in order
	for i := range 11 {
		if i%4 == 3 {
			lines = append(lines, "  ")
			continue
		}
		p := fmt.Sprintf(`{"i": %d}`, i)
		lines = append(lines, p)
		want = append(want, p)
	}
	content := strings.Join(lines, "\n") + "\n"
	check := func(t *testing.T, ids []string, want []string) {
		t.Helper()
		if len(ids) != len(want) {
			t.Fatalf("%d run ids, want %d: %v", len(ids), len(want), ids)
		}
		for i, s := range ids {
			r := h.run(uuid.MustParse(s))
			if string(r.Params) != want[i] || r.TasksTotal != 2 || r.Workflow != "bulk" {
				t.Fatalf("run %d: %+v, want params %s", i, r, want[i])
			}
		}
	}
	t.Run("table", func(t *testing.T) {
		r := h.must("run", "trigger", "bulk", "--runs-file", runsFile(t, content), "--batch-size", "3")
		check(t, strings.Fields(r.stdout), want)
	})
	t.Run("stdin from a line on", func(t *testing.T) {
		r := h.ffIn(content, "run", "trigger", "bulk", "--runs-file", "-", "--from-line", "5")
		expect(t, r, 0)
		check(t, strings.Fields(r.stdout), want[3:]) // lines 5.. are i = 4, 5, 6, 8, 9, 10
	})
	t.Run("json", func(t *testing.T) {
		r := h.must("run", "trigger", "bulk", "--runs-file", runsFile(t, content), "--batch-size", "4", "-o", "json")
		out := decode[struct {
			Workflow string `json:"workflow"`
			Created  int    `json:"created"`
			Complete bool   `json:"complete"`
			Runs     []struct {
				Line  int    `json:"line"`
				RunID string `json:"run_id"`
			} `json:"runs"`
		}](t, r.stdout)
		if out.Workflow != "bulk" || out.Created != len(want) || !out.Complete || len(out.Runs) != len(want) {
			t.Fatalf("json output %+v", out)
		}
		var ids []string
		for i, run := range out.Runs {
			if strings.TrimSpace(lines[run.Line-1]) != want[i] {
				t.Fatalf("run %d says line %d, which is %q, want %q", i, run.Line, lines[run.Line-1], want[i])
			}
			ids = append(ids, run.RunID)
		}
		check(t, ids, want)
	})
	t.Run("a file that begins with a byte-order mark", func(t *testing.T) {
		// Editors on Windows write one; it is not part of the first line.
		r := h.must("run", "trigger", "bulk", "--runs-file", runsFile(t, "\uFEFF"+content))
		check(t, strings.Fields(r.stdout), want)
	})
	if n, total := h.runCount(), 4*len(want)-3; n != total {
		t.Fatalf("%d runs in the database, want %d", n, total)
	}
}

// TestABulkBatchWhoseCommitReplyIsLostSaysItsRunsMayExist: a batch's
// statement committed but its reply was lost: ffctl must not say that
// those runs were not created; it names the lines whose runs may exist and
// how to check before resuming.
func TestABulkBatchWhoseCommitReplyIsLostSaysItsRunsMayExist(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// earlier: runs of the workflow before the bulk trigger; lines: the
		// runs file's; want: what the message checks against and says.
		earlier, lines int
		want           func(prior uuid.UUID) []string
	}{
		{"the workflow's first runs", 0, 3, func(uuid.UUID) []string {
			return []string{"`ffctl run list --workflow bulk --limit 2` lists 2 runs (the workflow had none before this trigger)",
				"resume with --from-line 3, otherwise resume with --from-line 1"}
		}},
		// Nothing printed yet to compare with (a trial followed the
		// advice "newer than the runs already printed" to a lost batch).
		{"runs before, none printed yet", 1, 3, func(prior uuid.UUID) []string {
			return []string{"`ffctl run list --workflow bulk --limit 2` lists 2 runs newer than run " + prior.String() + " (created ",
				"the workflow's newest before this trigger), resume with --from-line 3, otherwise resume with --from-line 1"}
		}},
		{"the file's last batch", 0, 2, func(uuid.UUID) []string {
			return []string{"every line was triggered, otherwise resume with --from-line 1"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.apply(bulkWorkflow)
			var prior uuid.UUID
			for range tc.earlier {
				prior = h.trigger("bulk")
			}
			f := runsFile(t, strings.Repeat("{}\n", tc.lines))
			via, p := lostCommitHarness(t, h, "INSERT INTO workflow_runs")
			r := lostCommitRun(t, via, p, func() bool { return h.runCount() == tc.earlier+2 }, "run", "trigger", "bulk", "--runs-file", f, "--batch-size", "2")
			if !p.Fired() {
				t.Fatalf("the proxy never matched the batch's insert: %s", r)
			}
			expect(t, r, 1, append([]string{"lines 1 to 2", "may have been created", "no run created for certain by this trigger"}, tc.want(prior)...)...)
			if strings.Contains(r.stderr, "; resume with --from-line 1") {
				t.Fatalf("a batch of unknown outcome told to resume at its own first line without condition (that duplicates its runs when they exist):\n%s", r)
			}
			if strings.Contains(r.stderr, "were not created") || r.stdout != "" {
				t.Fatalf("a batch of unknown outcome reported as not created or printed:\n%s", r)
			}
			if n := h.runCount(); n != tc.earlier+2 {
				t.Fatalf("%d runs, want the %d before and the 2 of the batch that committed", n, tc.earlier)
			}
		})
	}
}

// startBulk starts this test binary as a real ffctl bulk-triggering the
// bulk workflow from a file of n lines ({"i": 0} to {"i": n-1}), size runs
// a batch, and returns the file and the running command with its output.
func (h *harness) startBulk(n, size int) (string, *exec.Cmd, *logtest.Buffer, *logtest.Buffer) {
	h.t.Helper()
	return h.startBulkIgnoring(n, size, false)
}

// startBulkIgnoring is startBulk; with ignoreSIGINT, ffctl starts with
// SIGINT ignored, as a shell starts a background job (through sh -c
// 'trap "" INT; exec ...').
func (h *harness) startBulkIgnoring(n, size int, ignoreSIGINT bool) (string, *exec.Cmd, *logtest.Buffer, *logtest.Buffer) {
	h.t.Helper()
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "{\"i\": %d}\n", i)
	}
	f := runsFile(h.t, b.String())
	self, err := os.Executable()
	if err != nil {
		h.t.Fatal(err)
	}
	args := []string{self, "--database-url", h.url, "run", "trigger", "bulk", "--runs-file", f, "--batch-size", fmt.Sprint(size)}
	if ignoreSIGINT {
		args = append([]string{"/bin/sh", "-c", `trap "" INT; exec "$0" "$@"`}, args...)
	}
	cmd := exec.CommandContext(h.ctx, args[0], args[1:]...)
	cmd.Env = append(os.Environ(), beFFCTL+"=1")
	var out, errOut logtest.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	return f, cmd, &out, &errOut
}

// holdNextBatch takes a lock that holds every insert into workflow_runs
// (SHARE ROW EXCLUSIVE: the counts still read) until the returned function
// releases it or the test ends, waits until the next batch of a bulk
// trigger of n lines, size a batch, waits for it, and returns how many runs
// exist then: whole batches, fewer than n.
func (h *harness) holdNextBatch(n, size int) (int, func()) {
	h.t.Helper()
	conn, err := h.db.Conn(h.ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { conn.Close() })
	tx, err := conn.BeginTx(h.ctx, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = tx.Rollback() })
	if _, err := tx.ExecContext(h.ctx, `LOCK TABLE workflow_runs IN SHARE ROW EXCLUSIVE MODE`); err != nil {
		h.t.Fatal(err)
	}
	held := h.runCount()
	if held%size != 0 || held >= n {
		h.t.Fatalf("%d runs under the lock, want whole batches of %d and fewer than %d", held, size, n)
	}
	eventually(h.t, 30*time.Second, "the next batch waiting for the lock", func() bool { return h.runsLockWaiters() > 0 })
	return held, func() {
		if err := tx.Rollback(); err != nil {
			h.t.Fatal(err)
		}
	}
}

// runsLockWaiters is how many sessions wait for a lock of workflow_runs.
func (h *harness) runsLockWaiters() int {
	h.t.Helper()
	var w int
	if err := h.db.QueryRowContext(h.ctx, `SELECT count(*) FROM pg_locks WHERE relation = 'workflow_runs'::regclass AND NOT granted`).Scan(&w); err != nil {
		h.t.Fatal(err)
	}
	return w
}

// TestASecondSignalAbandonsTheBulkBatchInFlightAndSaysHowToCheck: a batch
// held on a lock, SIGINT (the note), then SIGINT again: ffctl exits 130
// while the batch still waits (at once), having printed the ids of the
// committed batches only, and says that the batch's lines may have been
// created, all or none, how to check, and the --from-line for either case.
// Its runs, once the lock is released, are all there or none. The same
// holds for a background job, which starts with SIGINT ignored.
func TestASecondSignalAbandonsTheBulkBatchInFlightAndSaysHowToCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		ignoreSIGINT bool
	}{
		{"ctrl-C in a terminal", false},
		{"a background job, started with SIGINT ignored", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			secondSignalAbandonsTheBatch(t, tc.ignoreSIGINT)
		})
	}
}

func secondSignalAbandonsTheBatch(t *testing.T, ignoreSIGINT bool) {
	h := newHarness(t)
	h.apply(bulkWorkflow)
	const n, size = 400, 4
	_, cmd, out, errOut := h.startBulkIgnoring(n, size, ignoreSIGINT)
	eventually(t, 30*time.Second, "the first batches committed", func() bool { return h.runCount() >= 2*size })
	held, release := h.holdNextBatch(n, size)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the note that the batch in flight ends first", func() bool {
		return strings.Contains(errOut.String(), "interrupted: stopping once the batch in flight")
	})
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var err error
	select {
	case err = <-exited:
	case <-time.After(10 * time.Second):
		release()
		t.Fatalf("ffctl still runs 10 s after a second SIGINT while its batch waits\nstderr: %s", errOut.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("after two SIGINTs: %v, want exit 130\nstderr: %s", err, errOut.String())
	}
	if ids := strings.Fields(out.String()); len(ids) != held {
		t.Fatalf("printed %d ids, want the %d of the batches committed before the signals", len(ids), held)
	}
	first, last := held+1, held+size
	for _, want := range []string{
		fmt.Sprintf("lines %d to %d: abandoned by a second signal before its outcome was known", first, last),
		fmt.Sprintf("the %d runs of these lines may have been created (all or none)", size),
		fmt.Sprintf("ffctl run list --workflow bulk --limit %d", size),
		fmt.Sprintf("resume with --from-line %d, otherwise resume with --from-line %d", last+1, first),
		fmt.Sprintf("%d runs created for certain (by the lines before line %d)", held, first),
	} {
		if !strings.Contains(errOut.String(), want) {
			t.Fatalf("stderr %q, want it to say %q", errOut.String(), want)
		}
	}
	release()
	eventually(t, 10*time.Second, "the abandoned batch to stop waiting", func() bool { return h.runsLockWaiters() == 0 })
	if got := h.runCount(); got != held && got != held+size {
		t.Fatalf("%d runs, want %d or %d: the abandoned batch's runs all or none", got, held, held+size)
	}
}

// TestCtrlCDuringABulkTriggerKeepsTheCommittedBatches runs this test binary
// as a real ffctl creating runs one per batch, sends it SIGINT once runs
// exist, and checks that it exits 130 having printed exactly the ids of the
// runs that exist, says how many, and that --from-line with the line it
// names creates the rest: every line has exactly one run in the end.
func TestCtrlCDuringABulkTriggerKeepsTheCommittedBatches(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(bulkWorkflow)
	const n = 3000
	f, cmd, out, errOut := h.startBulk(n, 1)
	eventually(t, 30*time.Second, "the first batches committed", func() bool { return h.runCount() >= 5 })
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("after SIGINT: %v, want exit 130 (did all %d batches end first?)\nstderr: %s", err, n, errOut.String())
	}
	ids := strings.Fields(out.String())
	created := h.runCount()
	if len(ids) != created || created >= n {
		t.Fatalf("printed %d ids, %d runs exist, want equal and fewer than %d", len(ids), created, n)
	}
	want := fmt.Sprintf("interrupted; %d runs created (by the lines before line %d); resume with --from-line %d", created, created+1, created+1)
	if !strings.Contains(errOut.String(), want) {
		t.Fatalf("stderr %q, want it to say %q", errOut.String(), want)
	}
	r := h.must("run", "trigger", "bulk", "--runs-file", f, "--from-line", fmt.Sprint(created+1))
	if len(strings.Fields(r.stdout)) != n-created {
		t.Fatalf("resume printed %d ids, want %d", len(strings.Fields(r.stdout)), n-created)
	}
	var lines, distinct int
	if err := h.db.QueryRowContext(h.ctx, `SELECT count(*), count(DISTINCT params->>'i') FROM workflow_runs`).Scan(&lines, &distinct); err != nil {
		t.Fatal(err)
	}
	if lines != n || distinct != n {
		t.Fatalf("%d runs for %d distinct lines, want %d each", lines, distinct, n)
	}
}

// TestCtrlCDuringABulkBatchLetsThatBatchEnd holds a batch of a real ffctl
// bulk trigger on a lock of workflow_runs, sends SIGINT while the batch
// waits, and checks that the signal neither cancels nor abandons it: ffctl
// says at once that it stops after the batch, and once the lock is
// released the batch commits, its ids are printed, and ffctl exits 130
// naming the line after it. (The test
// above may signal between two batches; this one always signals during
// one.)
func TestCtrlCDuringABulkBatchLetsThatBatchEnd(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply(bulkWorkflow)
	const n, size = 400, 4
	_, cmd, out, errOut := h.startBulk(n, size)
	eventually(t, 30*time.Second, "the first batches committed", func() bool { return h.runCount() >= 2*size })
	held, release := h.holdNextBatch(n, size)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	note := fmt.Sprintf("interrupted: stopping once the batch in flight (lines %d to %d) has ended", held+1, held+size)
	eventually(t, 10*time.Second, "the note that the batch in flight ends first", func() bool { return strings.Contains(errOut.String(), note) })
	// The signal has cancelled the command's context; the batch, which a
	// cancellable context would have abandoned by now (pgx closes the
	// connection), commits once the lock is released.
	release()

	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("after SIGINT: %v, want exit 130\nstderr: %s", err, errOut.String())
	}
	created := h.runCount()
	if created != held+size {
		t.Fatalf("%d runs, want the %d committed before the signal and the %d of the batch in flight", created, held, size)
	}
	if ids := strings.Fields(out.String()); len(ids) != created {
		t.Fatalf("printed %d ids, %d runs exist", len(ids), created)
	}
	want := fmt.Sprintf("interrupted; %d runs created (by the lines before line %d); resume with --from-line %d", created, created+1, created+1)
	if !strings.Contains(errOut.String(), want) {
		t.Fatalf("stderr %q, want it to say %q", errOut.String(), want)
	}
}
