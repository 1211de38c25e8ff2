package store_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// streamChain is a workflow of two tasks, b after a, b retried once.
const streamChain = "name: streamed\ntasks:\n  - {name: a, handler: noop}\n  - {name: b, handler: noop, depends_on: [a], retry: {max_attempts: 2, initial_backoff: 1ms, max_backoff: 1ms}}\n"

// newStreamFixture is a fixture with the stream on and streamChain
// applied.
func newStreamFixture(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t)
	if err := f.s.EnableStream(f.ctx, "flowforge.events", "test"); err != nil {
		t.Fatal(err)
	}
	f.apply(streamChain)
	return f
}

// streamRow is a transition_stream row as the checks read it.
type streamRow struct {
	id            int64
	kind, to      string
	task, from    sql.NullString
	seq           sql.NullInt64
	taskRunID     uuid.NullUUID
	published     bool
	workflow, run string
}

func (f *fixture) streamRows(run uuid.UUID) []streamRow {
	f.t.Helper()
	rows, err := f.db.QueryContext(f.ctx, `SELECT id, kind, to_state, task, from_state, seq, task_run_id, published_at IS NOT NULL, workflow, run_id::text
  FROM transition_stream WHERE run_id = $1 ORDER BY id`, run)
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	var out []streamRow
	for rows.Next() {
		var r streamRow
		if err := rows.Scan(&r.id, &r.kind, &r.to, &r.task, &r.from, &r.seq, &r.taskRunID, &r.published, &r.workflow, &r.run); err != nil {
			f.t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		f.t.Fatal(err)
	}
	return out
}

// runChainWithRetry takes a run of streamChain to SUCCEEDED: a succeeds,
// b fails once and succeeds on its retry.
func (f *fixture) runChainWithRetry(run uuid.UUID) {
	f.t.Helper()
	f.runTask(f.taskID(run, "a"))
	f.advance()
	b := f.taskID(run, "b")
	if st := f.finish(f.claim(b, "w1", time.Minute), store.FinishRequest{Outcome: store.OutcomeFailed, Error: "boom", RetryDelay: time.Millisecond}); st != core.TaskRetrying {
		f.t.Fatalf("b after its failure: %s, want RETRYING", st)
	}
	f.waitRetryDue(b)
	f.advance()
	f.runTask(b)
	f.advance()
	if st := f.run(run).State; st != core.RunSucceeded {
		f.t.Fatalf("run %s, want SUCCEEDED", st)
	}
}

// lockSettledStream takes publishing batches of up to limit rows (mark
// carried from one to the next, as the publisher does) until one holds
// rows, or the mark has settled past every row written so far and the
// batch is empty; it returns that batch, for the caller to end.
func (f *fixture) lockSettledStream(limit int, mark *store.StreamMark) *store.StreamBatch {
	f.t.Helper()
	target := int64(f.count(`SELECT coalesce(max(id), 0) FROM transition_stream`))
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := f.s.LockStream(f.ctx, limit, *mark)
		if err != nil {
			f.t.Fatal(err)
		}
		*mark = b.Mark
		if len(b.Rows) > 0 || mark.Settled >= target {
			return b
		}
		_ = b.Rollback()
		if time.Now().After(deadline) {
			f.t.Fatalf("the stream mark did not settle past id %d in 10 s (settled at %d)", target, mark.Settled)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// publishStream publishes the whole stream in batches of up to limit
// rows, as if the broker confirmed every row, and returns the events in
// the order published.
func (f *fixture) publishStream(limit int) []core.TransitionEvent {
	f.t.Helper()
	var out []core.TransitionEvent
	for _, r := range f.publishStreamRows(limit) {
		out = append(out, r.Event)
	}
	return out
}

// publishStreamRows is publishStream returning the rows published.
func (f *fixture) publishStreamRows(limit int) []store.StreamRow {
	f.t.Helper()
	var mark store.StreamMark
	var out []store.StreamRow
	for {
		b := f.lockSettledStream(limit, &mark)
		if len(b.Rows) == 0 {
			_ = b.Rollback()
			return out
		}
		var ids []int64
		for _, r := range b.Rows {
			ids = append(ids, r.ID)
			out = append(out, r)
		}
		if err := b.DeletePublished(f.ctx, ids); err != nil {
			f.t.Fatal(err)
		}
		if err := b.Commit(f.ctx); err != nil {
			f.t.Fatal(err)
		}
	}
}

// failRunUncommitted sets run FAILED in a transaction it leaves open
// (rolled back at the test's end): its stream row is written and not
// committed.
func (f *fixture) failRunUncommitted(run uuid.UUID) *sql.Tx {
	f.t.Helper()
	open, err := f.db.BeginTx(f.ctx, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = open.Rollback() })
	if _, err := open.ExecContext(f.ctx, `UPDATE workflow_runs SET state = 'FAILED' WHERE id = $1`, run); err != nil {
		f.t.Fatal(err)
	}
	return open
}

// laterRowPastAnOpenOne publishes a new run's creation (created events),
// then leaves the run's FAILED uncommitted in open (failRunUncommitted)
// while a later stream id of the same run, task a's CANCELLED, commits.
func (f *fixture) laterRowPastAnOpenOne() (run uuid.UUID, created int, open *sql.Tx) {
	f.t.Helper()
	run = f.trigger("streamed", "")
	created = len(f.publishStream(100))
	open = f.failRunUncommitted(run)
	if _, err := f.db.ExecContext(f.ctx, `INSERT INTO task_events (task_run_id, run_id, from_state, to_state, actor, reason)
VALUES ($1, $2, 'READY', 'CANCELLED', 'test', 'committed first')`, f.taskID(run, "a"), run); err != nil {
		f.t.Fatal(err)
	}
	return run, created, open
}

// streamStats reads two counters of transition_stream from
// pg_stat_user_tables (cols: two expressions over its columns).
func (f *fixture) streamStats(cols string) (a, b int64) {
	f.t.Helper()
	if err := f.db.QueryRowContext(f.ctx, `SELECT `+cols+` FROM pg_stat_user_tables WHERE relid = 'transition_stream'::regclass`).Scan(&a, &b); err != nil {
		f.t.Fatal(err)
	}
	return a, b
}

// sessionStore opens a store of the test's own, for the test to close
// before it reads pg_stat_user_tables: a session reports its scans and
// writes there when it ends (an idle one only every ten seconds).
func (f *fixture) sessionStore() *store.Store {
	f.t.Helper()
	s, err := store.Open(f.ctx, f.url, store.Options{MaxConns: 2})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestTheStreamIsOffUntilEnabledAndWritesNothing: with no setting row no
// transition writes a stream row, and StreamSetting says the stream is
// off.
func TestTheStreamIsOffUntilEnabledAndWritesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.apply(streamChain)
	run := f.trigger("streamed", "")
	f.runChainWithRetry(run)
	if n := f.count(`SELECT count(*) FROM transition_stream`); n != 0 {
		t.Fatalf("%d stream rows with the stream off, want 0", n)
	}
	if _, err := f.s.StreamSetting(f.ctx); !errors.Is(err, store.ErrStreamOff) {
		t.Fatalf("StreamSetting: %v, want ErrStreamOff", err)
	}
}

// TestTurningTheStreamOffRecordsWhereTheRowsLeftGo: DisableStream
// deletes the setting and, in the same statement, records the exchange
// the stream went to, when and by whom (StreamDrain), which every
// publisher sends the rows left to; turning it off again changes nothing;
// before any turn off there is no drain.
func TestTurningTheStreamOffRecordsWhereTheRowsLeftGo(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if _, err := f.s.StreamDrain(f.ctx); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("StreamDrain before any turn off: %v, want ErrNotFound", err)
	}
	if err := f.s.EnableStream(f.ctx, "flowforge.events.a", "publisher"); err != nil {
		t.Fatal(err)
	}
	was, err := f.s.DisableStream(f.ctx, "cli:alice")
	if err != nil || !was {
		t.Fatalf("DisableStream: %v, %v; want it was on", was, err)
	}
	if _, err := f.s.StreamSetting(f.ctx); !errors.Is(err, store.ErrStreamOff) {
		t.Fatalf("StreamSetting after off: %v, want ErrStreamOff", err)
	}
	d, err := f.s.StreamDrain(f.ctx)
	if err != nil || d.Exchange != "flowforge.events.a" || d.OffBy != "cli:alice" || time.Since(d.OffAt) > time.Minute {
		t.Fatalf("StreamDrain: %+v, %v; want flowforge.events.a, off by cli:alice just now", d, err)
	}
	if was, err := f.s.DisableStream(f.ctx, "cli:bob"); err != nil || was {
		t.Fatalf("DisableStream again: %v, %v; want it was off", was, err)
	}
	if d2, err := f.s.StreamDrain(f.ctx); err != nil || d2 != d {
		t.Fatalf("StreamDrain after a second off: %+v, %v; want it unchanged (%+v)", d2, err, d)
	}
	// On again to another exchange and off: the drain follows.
	if err := f.s.EnableStream(f.ctx, "flowforge.events.b", "publisher"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.DisableStream(f.ctx, "cli:bob"); err != nil {
		t.Fatal(err)
	}
	if d, err := f.s.StreamDrain(f.ctx); err != nil || d.Exchange != "flowforge.events.b" || d.OffBy != "cli:bob" {
		t.Fatalf("StreamDrain after the second turn off: %+v, %v; want flowforge.events.b by cli:bob", d, err)
	}
}

// TestEveryTransitionIsInTheStreamInItsTransaction (mode 121): with the
// stream on, a run taken through a retry writes, per task, its creation
// and then exactly its task_events transitions in order, and per run its
// creation and state changes; the last of each is the table's state. A
// transition rolled back leaves no stream row; one not yet committed is
// visible to its own transaction only.
func TestEveryTransitionIsInTheStreamInItsTransaction(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	run := f.trigger("streamed", "")
	f.runChainWithRetry(run)
	rows := f.streamRows(run)
	got := map[string][]string{}
	for _, r := range rows {
		key := "run"
		if r.kind == core.TransitionTask {
			key = r.task.String
		}
		if r.workflow != "streamed" || r.run != run.String() {
			t.Errorf("row %d: workflow %q run %s", r.id, r.workflow, r.run)
		}
		got[key] = append(got[key], r.from.String+">"+r.to)
	}
	want := map[string][]string{
		"run": {">RUNNING", "RUNNING>SUCCEEDED"},
		"a":   {">READY", "READY>RUNNING", "RUNNING>SUCCEEDED"},
		"b":   {">PENDING", "PENDING>READY", "READY>RUNNING", "RUNNING>RETRYING", "RETRYING>READY", "READY>RUNNING", "RUNNING>SUCCEEDED"},
	}
	for k, w := range want {
		if !slices.Equal(got[k], w) {
			t.Errorf("%s: stream %v, want %v", k, got[k], w)
		}
	}
	// The history: every task_events transition is in the stream.
	if n, m := f.count(`SELECT count(*) FROM task_events WHERE run_id = $1 AND from_state IS DISTINCT FROM to_state`, run),
		f.count(`SELECT count(*) FROM transition_stream WHERE run_id = $1 AND kind = 'task' AND from_state IS NOT NULL`, run); n != m {
		t.Errorf("%d task_events transitions, %d task stream rows", n, m)
	}

	// Same transaction: a state change rolled back leaves nothing.
	tx, err := f.db.BeginTx(f.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(f.ctx, `UPDATE workflow_runs SET state = 'FAILED' WHERE id = $1`, run); err != nil {
		t.Fatal(err)
	}
	var inTx int
	if err := tx.QueryRowContext(f.ctx, `SELECT count(*) FROM transition_stream WHERE run_id = $1 AND to_state = 'FAILED'`, run).Scan(&inTx); err != nil {
		t.Fatal(err)
	}
	if n := f.count(`SELECT count(*) FROM transition_stream WHERE run_id = $1 AND to_state = 'FAILED'`, run); inTx != 1 || n != 0 {
		t.Fatalf("uncommitted run transition: %d rows inside its transaction, %d outside; want 1 and 0", inTx, n)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if n := f.count(`SELECT count(*) FROM transition_stream WHERE run_id = $1`, run); n != len(rows) {
		t.Fatalf("%d stream rows after a rollback, want %d", n, len(rows))
	}
}

// TestStreamSeqsAreGapFreePerRunInIDOrder (mode 122): published in
// batches smaller than the backlog, each run's rows get 1..n in id order;
// after its published rows are deleted, a run's next transition continues
// its numbering.
func TestStreamSeqsAreGapFreePerRunInIDOrder(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	runs := []uuid.UUID{f.trigger("streamed", ""), f.trigger("streamed", ""), f.trigger("streamed", "")}
	for _, r := range runs {
		f.runChainWithRetry(r)
	}
	ids := map[string][]int64{}
	for _, r := range runs {
		for _, row := range f.streamRows(r) {
			ids[r.String()] = append(ids[r.String()], row.id)
		}
	}
	seqOf := map[int64]int64{}
	for _, row := range f.publishStreamRows(4) {
		seqOf[row.ID] = row.Event.Seq
	}
	for _, r := range runs {
		for i, id := range ids[r.String()] {
			if seq, ok := seqOf[id]; !ok || seq != int64(i+1) {
				t.Fatalf("run %s: row %d (%d in id order) published %v with seq %d, want seq %d", r, id, i+1, ok, seq, i+1)
			}
		}
	}
	if n := f.count(`SELECT count(*) FROM transition_stream`); n != 0 {
		t.Fatalf("%d rows left after publishing, want none", n)
	}
	perRun := len(ids[runs[0].String()])
	if _, err := f.db.ExecContext(f.ctx, `UPDATE workflow_runs SET state = 'FAILED' WHERE id = $1`, runs[0]); err != nil {
		t.Fatal(err)
	}
	events := f.publishStream(10)
	if len(events) != 1 || events[0].Seq != int64(perRun+1) {
		t.Fatalf("after publishing: %+v, want one event with seq %d", events, perRun+1)
	}
}

// TestStreamSeqAssignersWaitForEachOther (mode 122): a publishing batch
// waits for the assigners' advisory lock another one holds (forced: the
// test holds it, as an older publisher's numbering does) and reads nothing
// until it is released; then it gets the rows.
func TestStreamSeqAssignersWaitForEachOther(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	run := f.trigger("streamed", "")
	var mark store.StreamMark
	f.lockSettledStream(100, &mark).Rollback()
	holder, err := f.db.BeginTx(f.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Rollback() })
	if _, err := holder.ExecContext(f.ctx, `SELECT pg_advisory_xact_lock(hashtext('flowforge.transition_stream.seq'))`); err != nil {
		t.Fatal(err)
	}
	type result struct {
		b   *store.StreamBatch
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := f.s.LockStream(context.WithoutCancel(f.ctx), 100, mark)
		done <- result{b, err}
	}()
	f.waitDB("the batch waits for the advisory lock",
		`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'advisory' AND query LIKE '%transition_stream.seq%'`)
	select {
	case r := <-done:
		t.Fatalf("the batch returned (%d rows, %v) while another held the lock", len(r.b.Rows), r.err)
	default:
	}
	if err := holder.Rollback(); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.b.Rollback()
	if n := len(f.streamRows(run)); len(r.b.Rows) != n || n == 0 {
		t.Fatalf("the batch after the lock was released: %d rows, want the run's %d", len(r.b.Rows), n)
	}
}

// TestLockStreamReturnsNumberedRowsAsEvents: LockStream returns the
// numbered unpublished rows as core.TransitionEvent values with their
// routing keys; DeletePublished deletes them and nothing is left pending.
func TestLockStreamReturnsNumberedRowsAsEvents(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	run := f.trigger("streamed", "")
	var mark store.StreamMark
	b := f.lockSettledStream(100, &mark)
	defer b.Rollback()
	var keys []string
	var ids []int64
	for _, r := range b.Rows {
		keys = append(keys, r.Event.RoutingKey())
		ids = append(ids, r.ID)
		if r.Event.RunID != run.String() || r.Event.EventID == "" || r.Event.At.IsZero() {
			t.Errorf("event %+v", r.Event)
		}
	}
	if want := "run.streamed.RUNNING task.streamed.a.READY task.streamed.b.PENDING"; strings.Join(keys, " ") != want {
		t.Errorf("routing keys %q, want %q", strings.Join(keys, " "), want)
	}
	if err := b.DeletePublished(f.ctx, ids); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(f.ctx); err != nil {
		t.Fatal(err)
	}
	st, err := f.s.StreamStatus(f.ctx)
	if err != nil || st.Pending != 0 {
		t.Fatalf("status %+v, %v; want nothing pending", st, err)
	}
	if n := f.count(`SELECT count(*) FROM transition_stream WHERE run_id = $1`, run); n != 0 {
		t.Fatalf("%d published rows kept, want them deleted", n)
	}
}

// TestVacuumStreamVacuumsTheTable: VacuumStream vacuums transition_stream
// (pg_stat_user_tables counts one more vacuum) and returns no error: VACUUM
// refuses a transaction block, so the statement must go alone.
func TestVacuumStreamVacuumsTheTable(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	before := f.count(`SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = 'transition_stream'::regclass`)
	if err := f.s.VacuumStream(f.ctx); err != nil {
		t.Fatal(err)
	}
	f.waitDB("the vacuum counted", `SELECT vacuum_count > $1 FROM pg_stat_user_tables WHERE relid = 'transition_stream'::regclass`, before)
}

// TestOneStatementSettlingManyRunsStreamsEachRunOnce (mode 121, migration
// 27's statement-level run triggers): one UPDATE that changes the state of
// three runs writes one stream row per run, from its old state to its new
// one, in that statement's transaction; an UPDATE of the same runs that
// leaves their state alone writes none.
func TestOneStatementSettlingManyRunsStreamsEachRunOnce(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	runs := []uuid.UUID{f.trigger("streamed", ""), f.trigger("streamed", ""), f.trigger("streamed", "")}
	before := f.count(`SELECT count(*) FROM transition_stream WHERE kind = 'run'`)
	if _, err := f.db.ExecContext(f.ctx, `UPDATE workflow_runs SET state = 'CANCELLED' WHERE id = ANY ($1::uuid[])`, runs); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.ExecContext(f.ctx, `UPDATE workflow_runs SET state = state, cancel_reason = 'unchanged' WHERE id = ANY ($1::uuid[])`, runs); err != nil {
		t.Fatal(err)
	}
	if n := f.count(`SELECT count(*) FROM transition_stream WHERE kind = 'run'`); n != before+3 {
		t.Fatalf("%d run rows after one statement settled 3 runs and another left them alone, want %d", n, before+3)
	}
	for _, r := range runs {
		rows := f.streamRows(r)
		last := rows[len(rows)-1]
		if last.kind != core.TransitionRun || last.from.String != "RUNNING" || last.to != "CANCELLED" || last.workflow != "streamed" {
			t.Errorf("run %s: last stream row %+v, want run RUNNING>CANCELLED of workflow streamed", r, last)
		}
	}
}

// TestStreamScansWalkThePrimaryKeyWhateverTheStatistics (mode 139):
// with statistics taken when the stream held two rows, both numbered (a
// failed publish, or an older publisher, leaves numbered rows), and a
// backlog of 5,000 unnumbered rows since (a queue's usual state), the
// stored numbering (AssignStreamSeqs, a stalled mark's fallback) and
// LockStream find their batches through the primary key: the table's
// sequential-scan counter does not move (PostgreSQL, estimating that
// almost no row is unnumbered, planned a sequential scan and a sort of the
// whole backlog).
func TestStreamScansWalkThePrimaryKeyWhateverTheStatistics(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	for _, q := range []string{
		`ALTER TABLE transition_stream SET (autovacuum_enabled = false)`, // keep the stale statistics stale
		`INSERT INTO transition_stream (run_id, workflow, kind, to_state, seq) SELECT gen_random_uuid(), 'w', 'run', 'RUNNING', 1 FROM generate_series(1, 2)`,
		`ANALYZE transition_stream`,
		`INSERT INTO transition_stream (run_id, workflow, kind, to_state) SELECT gen_random_uuid(), 'w', 'run', 'RUNNING' FROM generate_series(1, 5000)`,
	} {
		if _, err := f.db.ExecContext(f.ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	const scans = `seq_scan, coalesce(idx_scan, 0)`
	seq0, idx0 := f.streamStats(scans)
	s := f.sessionStore()
	if n, err := s.AssignStreamSeqs(f.ctx, 100); err != nil || n != 100 {
		t.Fatalf("AssignStreamSeqs: %d, %v; want 100 numbered", n, err)
	}
	var mark store.StreamMark
	for i := range 2 { // no transition is in flight: the first mark settles at once
		b, err := s.LockStream(f.ctx, 100, mark)
		if err != nil {
			t.Fatal(err)
		}
		mark = b.Mark
		if len(b.Rows) != 100 {
			t.Errorf("LockStream %d: %d rows, want 100", i+1, len(b.Rows))
		}
		if err := b.Rollback(); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	f.waitDB("the scans counted", `SELECT seq_scan + coalesce(idx_scan, 0) >= $1 FROM pg_stat_user_tables WHERE relid = 'transition_stream'::regclass`, seq0+idx0+3)
	seq1, idx1 := f.streamStats(scans)
	if seq1 != seq0 {
		t.Fatalf("%d sequential scans of transition_stream (index scans %d), want none", seq1-seq0, idx1-idx0)
	}
}

// TestStreamVacuumNeverTruncates (mode 140): VacuumStream leaves the
// stream table's emptied pages in place, so it never asks for the ACCESS
// EXCLUSIVE lock that truncating them needs. The interleaving is forced:
// a transition in flight holds ROW EXCLUSIVE (what its insert takes) while
// the vacuum runs over a table whose every page is empty; a vacuum that
// truncates retries that lock for five seconds and is cancelled by the
// three-second deadline. Once the transition is gone, a second vacuum still
// leaves the table its size.
func TestStreamVacuumNeverTruncates(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	for _, q := range []string{
		`INSERT INTO transition_stream (run_id, workflow, kind, to_state) SELECT gen_random_uuid(), 'w', 'run', 'RUNNING' FROM generate_series(1, 20000)`,
		`DELETE FROM transition_stream`,
	} {
		if _, err := f.db.ExecContext(f.ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	const size = `SELECT pg_relation_size('transition_stream')`
	before := f.count(size)
	if before < 100*8192 {
		t.Fatalf("transition_stream holds %d bytes, want at least 100 pages for a vacuum to consider truncating", before)
	}
	tx, err := f.db.BeginTx(f.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(f.ctx, `LOCK TABLE transition_stream IN ROW EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(f.ctx, 3*time.Second)
	defer cancel()
	if err := f.s.VacuumStream(ctx); err != nil {
		t.Fatalf("VacuumStream while a transition holds the table: %v, want it done without waiting for a lock", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := f.s.VacuumStream(f.ctx); err != nil {
		t.Fatalf("VacuumStream: %v", err)
	}
	if after := f.count(size); after != before {
		t.Fatalf("transition_stream holds %d bytes after the vacuums, want its %d (its empty pages truncated: the vacuum took an ACCESS EXCLUSIVE lock)", after, before)
	}
}

// TestPublishingTheStreamUpdatesNoRow (mode 142): numbering is computed
// in the publishing transaction, so publishing a backlog of 2,000 rows (as
// the triggers insert them) in batches deletes each row and updates none:
// the table's update counter does not move. When a separate step numbered
// every row before it was published, each row was written twice more than
// its insert and delete (an update, and on pages the inserts had filled a
// new version elsewhere with a new index entry: 60 % more WAL a run under
// W2).
func TestPublishingTheStreamUpdatesNoRow(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	if _, err := f.db.ExecContext(f.ctx, `INSERT INTO transition_stream (run_id, workflow, kind, task_run_id, task, from_state, to_state, attempt, actor, reason)
SELECT gen_random_uuid(), 'workflow', 'task', gen_random_uuid(), 'task', 'READY', 'RUNNING', 1, 'worker-0123456789abcdef', 'claimed' FROM generate_series(1, 2000)`); err != nil {
		t.Fatal(err)
	}
	const counters = `n_tup_upd, n_tup_del`
	upd0, del0 := f.streamStats(counters)
	s := f.sessionStore()
	var mark store.StreamMark
	published := 0
	for tries := 0; published < 2000 && tries < 100; tries++ {
		b, err := s.LockStream(f.ctx, 300, mark)
		if err != nil {
			t.Fatal(err)
		}
		mark = b.Mark
		var ids []int64
		for _, r := range b.Rows {
			ids = append(ids, r.ID)
		}
		if err := b.DeletePublished(f.ctx, ids); err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(f.ctx); err != nil {
			t.Fatal(err)
		}
		published += len(ids)
	}
	if published != 2000 {
		t.Fatalf("%d rows published, want 2000", published)
	}
	s.Close()
	f.waitDB("the deletes counted", `SELECT n_tup_del >= $1 FROM pg_stat_user_tables WHERE relid = 'transition_stream'::regclass`, del0+2000)
	upd1, _ := f.streamStats(counters)
	if upd1 != upd0 {
		t.Fatalf("publishing 2,000 rows updated %d rows of transition_stream, want none (a row's seq is computed in its batch, not stored)", upd1-upd0)
	}
}

// TestAStreamRowCommittedLateIsNumberedInIDOrder (mode 122): numbers are
// computed in the publishing transaction, so a batch that ends without
// its commit (a crash after the broker's confirm) leaves its rows to be
// numbered again, and they must get the same numbers. The interleaving is
// forced: a transaction takes a stream id for a run and stays open while a
// later id of the same run commits. No batch may number the later row
// while the earlier one can still commit (the stream mark does not settle
// past the open transaction's id); once it has committed, both are
// numbered in id order, and a batch rolled back after numbering them is
// followed by one that gives them the same seqs and event ids. Without the
// mark the later row took the run's next number first, and a batch
// numbered after the earlier row committed gave that number to another
// event.
func TestAStreamRowCommittedLateIsNumberedInIDOrder(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	run, created, open := f.laterRowPastAnOpenOne()
	later := f.count(`SELECT max(id) FROM transition_stream WHERE run_id = $1`, run)

	var mark store.StreamMark
	for i := range 3 {
		b, err := f.s.LockStream(f.ctx, 100, mark)
		if err != nil {
			t.Fatal(err)
		}
		mark = b.Mark
		n := len(b.Rows)
		_ = b.Rollback()
		if n != 0 || mark.Settled >= int64(later) {
			t.Fatalf("batch %d while an earlier stream id is uncommitted: %d rows, mark settled at %d; want none, below id %d", i+1, n, mark.Settled, later)
		}
	}
	if err := open.Commit(); err != nil {
		t.Fatal(err)
	}
	first := f.lockSettledStream(100, &mark)
	var got []core.TransitionEvent
	for _, r := range first.Rows {
		got = append(got, r.Event)
	}
	if err := first.Rollback(); err != nil { // the crash: nothing recorded
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Kind != core.TransitionRun || got[0].To != "FAILED" || got[0].Seq != int64(created+1) ||
		got[1].Kind != core.TransitionTask || got[1].To != "CANCELLED" || got[1].Seq != int64(created+2) {
		t.Fatalf("after the commit: %+v; want the run's FAILED with seq %d, then task a's CANCELLED with seq %d", got, created+1, created+2)
	}
	again := f.publishStream(100)
	if len(again) != 2 {
		t.Fatalf("republished %d events, want the 2", len(again))
	}
	for i := range again {
		if again[i].EventID != got[i].EventID || again[i].Seq != got[i].Seq {
			t.Errorf("republished event %d: id %s seq %d, want id %s seq %d as first published", i, again[i].EventID, again[i].Seq, got[i].EventID, got[i].Seq)
		}
	}
}

// TestAQuietStreamIsPublishedByTheFirstBatch: with no transaction
// writing to the stream, the mark a batch takes settles at once, so a
// publisher's first batch already holds the committed rows (in id order,
// numbered 1..n); while a transaction holds an uncommitted stream row the
// mark waits for it, and the rows stay for a later batch.
func TestAQuietStreamIsPublishedByTheFirstBatch(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	run := f.trigger("streamed", "")
	rows := f.streamRows(run)
	b, err := f.s.LockStream(f.ctx, 100, store.StreamMark{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Rollback(); err != nil {
		t.Fatal(err)
	}
	if len(b.Rows) != len(rows) || len(rows) == 0 {
		t.Fatalf("a quiet stream's first batch: %d rows, want the run's %d", len(b.Rows), len(rows))
	}
	for i, r := range b.Rows {
		if r.ID != rows[i].id || r.Event.Seq != int64(i+1) {
			t.Fatalf("row %d: id %d seq %d, want id %d seq %d", i, r.ID, r.Event.Seq, rows[i].id, i+1)
		}
	}

	f.failRunUncommitted(run)
	b, err = f.s.LockStream(f.ctx, 100, store.StreamMark{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Rollback(); err != nil {
		t.Fatal(err)
	}
	if len(b.Rows) != 0 {
		t.Fatalf("a first batch while a transition is uncommitted: %d rows, want none (its mark waits for that transaction)", len(b.Rows))
	}
}

// TestAFailedStreamPublishKeepsItsNumbers (mode 122): a batch whose
// publish failed (StreamBatch.MarkFailed) records the seqs it gave, so the
// next batch publishes the rows with the same seqs and event ids, counting
// the attempt; the run's next transition takes the next number.
func TestAFailedStreamPublishKeepsItsNumbers(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	run := f.trigger("streamed", "")
	var mark store.StreamMark
	b := f.lockSettledStream(100, &mark)
	var ids []int64
	var first []core.TransitionEvent
	for _, r := range b.Rows {
		ids, first = append(ids, r.ID), append(first, r.Event)
	}
	if err := b.MarkFailed(f.ctx, ids, "unconfirmed"); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(f.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.ExecContext(f.ctx, `UPDATE workflow_runs SET state = 'FAILED' WHERE id = $1`, run); err != nil {
		t.Fatal(err)
	}
	again := f.publishStream(100)
	if len(again) != len(first)+1 {
		t.Fatalf("%d events after the failed publish, want its %d and the run's FAILED", len(again), len(first))
	}
	for i, e := range first {
		if again[i].EventID != e.EventID || again[i].Seq != e.Seq {
			t.Errorf("republished event %d: id %s seq %d, want id %s seq %d", i, again[i].EventID, again[i].Seq, e.EventID, e.Seq)
		}
	}
	if last := again[len(again)-1]; last.To != "FAILED" || last.Seq != int64(len(first)+1) {
		t.Errorf("the next transition: %s with seq %d, want FAILED with seq %d", last.To, last.Seq, len(first)+1)
	}
}

// TestStreamNumberingKeepsEachRowOnItsPage (mode 142): the stored
// numbering of a backlog (AssignStreamSeqs, LockStream's fallback while a
// mark is stalled) updates each row where it lies, so the update can be
// HOT: no row moves to another page, and the primary key gains no entry.
// The backlog is 2,000 rows inserted as the triggers insert them; with
// pages the inserts filled, most numbered rows moved (a new version on
// another page and a new index entry each, 60 % more WAL a run under W2).
func TestStreamNumberingKeepsEachRowOnItsPage(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	if _, err := f.db.ExecContext(f.ctx, `INSERT INTO transition_stream (run_id, workflow, kind, task_run_id, task, from_state, to_state, attempt, actor, reason)
SELECT gen_random_uuid(), 'workflow', 'task', gen_random_uuid(), 'task', 'READY', 'RUNNING', 1, 'worker-0123456789abcdef', 'claimed' FROM generate_series(1, 2000)`); err != nil {
		t.Fatal(err)
	}
	pages := func() map[int64]int64 {
		rows, err := f.db.QueryContext(f.ctx, `SELECT id, (ctid::text::point)[0]::bigint FROM transition_stream`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[int64]int64{}
		for rows.Next() {
			var id, page int64
			if err := rows.Scan(&id, &page); err != nil {
				t.Fatal(err)
			}
			out[id] = page
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	before := pages()
	if n, err := f.s.AssignStreamSeqs(f.ctx, 5000); err != nil || n != int64(len(before)) {
		t.Fatalf("AssignStreamSeqs: %d, %v; want %d numbered", n, err, len(before))
	}
	moved := 0
	for id, page := range pages() {
		if page != before[id] {
			moved++
		}
	}
	if moved > 0 {
		t.Fatalf("%d of %d rows moved to another page when numbered, want none (their pages had no room for the update: transition_stream's fillfactor)", moved, len(before))
	}
}

// TestAStalledStreamMarkFallsBackToStoredNumbers (mode 122): a
// transaction that wrote a transition and stays open keeps the stream
// mark from settling; once the mark has waited streamMarkPatience (forced:
// the test ages it), LockStream stores the numbers of the rows visible
// past it (AssignStreamSeqs, committed before anything is published) and
// publishes them. The open transaction's row, committed later, takes the
// run's next number. Without the fallback the committed row waited for
// the open transaction however long it stayed open.
func TestAStalledStreamMarkFallsBackToStoredNumbers(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	_, created, open := f.laterRowPastAnOpenOne()
	var mark store.StreamMark
	b, err := f.s.LockStream(f.ctx, 100, mark)
	if err != nil {
		t.Fatal(err)
	}
	mark = b.Mark
	_ = b.Rollback()
	if len(b.Rows) != 0 {
		t.Fatalf("a batch while a transition is uncommitted: %d rows, want none", len(b.Rows))
	}
	store.AgeStreamMark(&mark, 2*time.Second)
	b, err = f.s.LockStream(f.ctx, 100, mark)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Rows) != 1 || b.Rows[0].Event.To != "CANCELLED" || b.Rows[0].Event.Seq != int64(created+1) {
		_ = b.Rollback()
		t.Fatalf("the batch after the mark's patience: %+v, want task a's CANCELLED with seq %d", b.Rows, created+1)
	}
	if err := b.DeletePublished(f.ctx, []int64{b.Rows[0].ID}); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(f.ctx); err != nil {
		t.Fatal(err)
	}
	if err := open.Commit(); err != nil {
		t.Fatal(err)
	}
	rest := f.publishStream(100)
	if len(rest) != 1 || rest[0].To != "FAILED" || rest[0].Seq != int64(created+2) {
		t.Fatalf("after the open transaction committed: %+v, want the run's FAILED with seq %d", rest, created+2)
	}
}

// TestOnePublisherPublishesTheStreamAtATime (mode 122): while one
// publisher's batch is held, another LockStream gets an empty batch at
// once (it neither waits nor takes rows the first may be publishing);
// once the first batch ends, the next one gets every numbered row, oldest
// first.
func TestOnePublisherPublishesTheStreamAtATime(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	f.trigger("streamed", "")
	f.trigger("streamed", "")
	n := int64(f.count(`SELECT count(*) FROM transition_stream`))
	var mark store.StreamMark
	first := f.lockSettledStream(100, &mark)
	defer first.Rollback()
	if int64(len(first.Rows)) != n {
		t.Fatalf("first batch: %d rows, want the %d numbered", len(first.Rows), n)
	}
	bounded, cancel := context.WithTimeout(f.ctx, 5*time.Second)
	defer cancel()
	second, err := f.s.LockStream(bounded, 100, mark)
	if err != nil {
		t.Fatal(err)
	}
	if len(second.Rows) != 0 {
		t.Errorf("a second batch while the first is held: %d rows, want none", len(second.Rows))
	}
	if err := second.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := first.Rollback(); err != nil {
		t.Fatal(err)
	}
	third, err := f.s.LockStream(f.ctx, 100, mark)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Rollback()
	if int64(len(third.Rows)) != n {
		t.Fatalf("the batch after the first ended: %d rows, want the %d numbered", len(third.Rows), n)
	}
	for i := 1; i < len(third.Rows); i++ {
		if third.Rows[i].ID <= third.Rows[i-1].ID {
			t.Fatalf("batch out of id order at %d: %d after %d", i, third.Rows[i].ID, third.Rows[i-1].ID)
		}
	}
}

// TestLockStreamTakesNoRowLocks (mode 143): a held stream batch locks
// none of its rows (the publishing lock makes the publisher the only one;
// a row lock cost a WAL record per row published): another transaction
// locks a row of the batch FOR UPDATE NOWAIT without a conflict.
func TestLockStreamTakesNoRowLocks(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	f.trigger("streamed", "")
	var mark store.StreamMark
	b := f.lockSettledStream(100, &mark)
	defer b.Rollback()
	if len(b.Rows) == 0 {
		t.Fatal("LockStream: no rows, want the run's numbered rows")
	}
	tx, err := f.db.BeginTx(f.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var id int64
	if err := tx.QueryRowContext(f.ctx, `SELECT id FROM transition_stream WHERE id = $1 FOR UPDATE NOWAIT`, b.Rows[0].ID).Scan(&id); err != nil {
		t.Fatalf("lock row %d of a held stream batch from another transaction: %v, want no conflict (the batch locks no row)", b.Rows[0].ID, err)
	}
}

// TestStreamBatchesRefuseALimitBelowOne: LockStream and AssignStreamSeqs
// refuse a batch limit below 1 with an error naming it, and take no row.
func TestStreamBatchesRefuseALimitBelowOne(t *testing.T) {
	t.Parallel()
	f := newStreamFixture(t)
	f.trigger("streamed", "")
	for _, limit := range []int{0, -1} {
		if b, err := f.s.LockStream(f.ctx, limit, store.StreamMark{}); err == nil || b != nil || !strings.Contains(err.Error(), "is below 1") {
			t.Errorf("LockStream(limit %d): %v, %v; want an error naming the limit", limit, b, err)
		}
		if n, err := f.s.AssignStreamSeqs(f.ctx, limit); err == nil || n != 0 || !strings.Contains(err.Error(), "is below 1") {
			t.Errorf("AssignStreamSeqs(limit %d): %d, %v; want an error naming the limit", limit, n, err)
		}
	}
	if n := f.count(`SELECT count(*) FROM transition_stream WHERE seq IS NOT NULL`); n != 0 {
		t.Fatalf("%d rows numbered by refused calls, want none", n)
	}
}
