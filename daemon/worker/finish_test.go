package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// finishHook stands in for one FinishMany call: n counts the calls from 1,
// reqs is the batch and next runs the real statement. It may hold the call,
// fail it without running next (nothing written) or run next and return an
// error anyway (committed, its reply lost).
type finishHook func(n int, reqs []store.FinishRequest, next func() ([]store.FinishResult, error)) ([]store.FinishResult, error)

// readBackHook stands in for one read-back of a finish (FinishRecorded):
// next runs the real one.
type readBackHook func(next func() (core.TaskState, bool, error)) (core.TaskState, bool, error)

// hookedFinishes is the real store with its FinishMany run through hook,
// and, when readBack is set, its read-back of a finish too.
type hookedFinishes struct {
	*store.Store
	hook     finishHook
	readBack readBackHook

	mu    sync.Mutex
	calls int
}

func (s *hookedFinishes) FinishMany(ctx context.Context, reqs []store.FinishRequest) ([]store.FinishResult, error) {
	s.mu.Lock()
	s.calls++
	n := s.calls
	s.mu.Unlock()
	return s.hook(n, reqs, func() ([]store.FinishResult, error) { return s.Store.FinishMany(ctx, reqs) })
}

func (s *hookedFinishes) FinishRecorded(ctx context.Context, id uuid.UUID, token int64, workerID string) (core.TaskState, bool, error) {
	next := func() (core.TaskState, bool, error) { return s.Store.FinishRecorded(ctx, id, token, workerID) }
	if s.readBack != nil {
		return s.readBack(next)
	}
	return next()
}

// errReplyLost is what a finish statement returns when the connection broke
// after it was sent: it may have committed.
var errReplyLost = errors.New("unexpected EOF (test: the statement's reply was lost)")

// logRecords is a slog handler that keeps every record, for tests that
// check what the worker said.
type logRecords struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logRecords) WithGroup(string) slog.Handler            { return h }
func (h *logRecords) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

// promoteRetry runs scheduler passes until the task id of run is READY
// again (its retry due: the test's backoff is a millisecond), as the
// scheduler would between a finish and the worker's next try; it returns
// the task's new token. Errors are reported with t.Errorf (it runs on the
// worker's goroutine).
func promoteRetry(t *testing.T, st *store.Store, run, id uuid.UUID) int64 {
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := st.AdvanceRuns(ctx, []uuid.UUID{run}, "test-scheduler"); err != nil {
			t.Errorf("advance: %v", err)
			return 0
		}
		s, tok, err := st.TaskStateOf(ctx, id)
		if err == nil && s == core.TaskReady {
			return tok
		}
		if time.Now().After(deadline) {
			t.Errorf("the retry was not promoted: task %s (%v)", s, err)
			return 0
		}
		time.Sleep(5 * time.Millisecond) // poll interval, not a wait for state
	}
}

// TestAFinishWhoseReplyWasLostIsReportedFinishedAfterItsRetryWasPromoted:
// mode 85. A FAILED attempt's finish commits (RETRYING) and its reply is
// lost; before the worker tries again, a scheduler pass promotes the retry
// (RETRYING -> READY, token + 1). The worker's retry matches nothing, and
// the read-back must find the attempt's own history row, not ask the task
// row (which has moved on): the attempt is reported finished (RETRYING),
// counted as an ambiguous write that committed, and never as a stale write.
// A read-back that fails is tried again, not taken for a fencing rejection.
func TestAFinishWhoseReplyWasLostIsReportedFinishedAfterItsRetryWasPromoted(t *testing.T) {
	for _, tc := range []struct {
		name            string
		readBackFailsAt int // the read-back that fails (0: none)
	}{
		{name: "read back at once"},
		{name: "the first read-back fails", readBackFailsAt: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := core.NewRegistry()
			reg.MustRegister("flaky", func(context.Context, core.Task) (json.RawMessage, error) {
				return nil, errors.New("flaky (test)")
			})
			r := newRig(t, reg, nil)
			storetest.Apply(t, r.st, "name: flaky\ntasks:\n  - {name: a, handler: flaky, retry: {max_attempts: 3, initial_backoff: 1ms, max_backoff: 1ms}}\n")
			run := storetest.Trigger(t, r.st, "flaky", "")
			id := r.taskOf(run, "a").ID
			var promotedTo atomic.Int64
			var readBacks atomic.Int32
			r.w.cfg.Store = &hookedFinishes{Store: r.st,
				hook: func(n int, _ []store.FinishRequest, next func() ([]store.FinishResult, error)) ([]store.FinishResult, error) {
					res, err := next()
					if n != 1 {
						return res, err
					}
					if err != nil || len(res) != 1 || !res[0].OK || res[0].State != core.TaskRetrying {
						t.Errorf("the first finish: %+v %v, want RETRYING recorded", res, err)
						return res, err
					}
					promotedTo.Store(promoteRetry(t, r.st, run, id))
					return nil, errReplyLost
				},
				readBack: func(next func() (core.TaskState, bool, error)) (core.TaskState, bool, error) {
					if int(readBacks.Add(1)) == tc.readBackFailsAt {
						return "", false, errors.New("connection refused (test)")
					}
					return next()
				}}
			r.start()
			r.publish()
			f := r.awaitFinished(30 * time.Second)
			if f.Err != nil || !f.OK || f.State != core.TaskRetrying {
				t.Fatalf("the attempt: state %q ok %v err %v, want reported finished RETRYING", f.State, f.OK, f.Err)
			}
			if n := testutil.ToFloat64(r.metrics.StaleWrites.WithLabelValues("finish")); n != 0 {
				t.Fatalf("flowforge_stale_writes_rejected_total{op=finish} = %v, want 0: a recorded finish was reported as a fencing rejection", n)
			}
			if n := testutil.ToFloat64(r.metrics.AmbiguousWrites.WithLabelValues("finish", "committed")); n != 1 {
				t.Fatalf("flowforge_ambiguous_writes_total{op=finish,outcome=committed} = %v, want 1", n)
			}
			if n := testutil.ToFloat64(r.metrics.TasksFinished.WithLabelValues("RETRYING")); n != 1 {
				t.Fatalf("flowforge_tasks_finished_total{state=RETRYING} = %v, want 1", n)
			}
			if st, tok := r.state(run, "a"); st != core.TaskReady || tok != promotedTo.Load() || tok != f.Req.Token+1 {
				t.Fatalf("task %s token %d, want the promoted retry READY at token %d", st, tok, f.Req.Token+1)
			}
		})
	}
}

// TestAFinishThatGivesUpSaysWhatIsTrue: mode 85. Every try of a finish
// fails until its deadline (one lease). What the worker then reports
// depends on what may have been written: when a try got no answer it reads
// the attempt back once more; a finish found recorded is reported finished
// (not lost), one it cannot read back is logged as "may have been
// recorded" (not as certainly retried), and only a finish known not to
// have committed is logged as given up with the task to be retried.
func TestAFinishThatGivesUpSaysWhatIsTrue(t *testing.T) {
	lockTimeout := fmt.Errorf("finish task: %w: canceling statement due to lock timeout (test)", store.ErrLockTimeout)
	for _, tc := range []struct {
		name string
		// hook answers call n; readBack, when set, replaces the read-back.
		hook     finishHook
		readBack readBackHook
		ok       bool   // the attempt is reported finished
		recorded bool   // the task ends SUCCEEDED
		logged   string // the error the worker logs, if not ok
		notSaid  string
		ambig    string // the ambiguous-write outcome counted once
	}{
		{name: "the first try committed and every reply was lost: read back, finished",
			hook: func(n int, _ []store.FinishRequest, next func() ([]store.FinishResult, error)) ([]store.FinishResult, error) {
				if n == 1 {
					_, _ = next()
				}
				return nil, errReplyLost
			},
			ok: true, recorded: true, ambig: "committed"},
		{name: "the first try committed, every reply was lost and the read-back fails: may have been recorded",
			hook: func(n int, _ []store.FinishRequest, next func() ([]store.FinishResult, error)) ([]store.FinishResult, error) {
				if n == 1 {
					_, _ = next()
				}
				return nil, errReplyLost
			},
			readBack: func(func() (core.TaskState, bool, error)) (core.TaskState, bool, error) {
				return "", false, errors.New("connection refused (test)")
			},
			recorded: true, logged: "may have been recorded", notSaid: "will be retried"},
		{name: "no try got an answer and none committed: read back, given up",
			hook: func(int, []store.FinishRequest, func() ([]store.FinishResult, error)) ([]store.FinishResult, error) {
				return nil, errReplyLost
			},
			logged: "the lease will expire and the task will be retried", ambig: "not_committed"},
		{name: "every try wrote nothing (lock timeouts): given up",
			hook: func(_ int, reqs []store.FinishRequest, _ func() ([]store.FinishResult, error)) ([]store.FinishResult, error) {
				res := make([]store.FinishResult, len(reqs))
				for i := range res {
					res[i].Err = lockTimeout
				}
				return res, nil
			},
			logged: "the lease will expire and the task will be retried"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := core.NewRegistry()
			reg.MustRegister("ok", func(context.Context, core.Task) (json.RawMessage, error) { return json.RawMessage(`{"ok":true}`), nil })
			logs := &logRecords{}
			r := newRig(t, reg, func(c *Config) { c.Lease, c.Logger = time.Second, slog.New(logs) })
			r.w.cfg.Store = &hookedFinishes{Store: r.st, hook: tc.hook, readBack: tc.readBack}
			storetest.Apply(t, r.st, "name: one\ntasks:\n  - {name: a, handler: ok}\n")
			run := storetest.Trigger(t, r.st, "one", "")
			r.start()
			r.publish()
			f := r.awaitFinished(30 * time.Second)
			if tc.ok != (f.Err == nil && f.OK && f.State == core.TaskSucceeded) {
				t.Fatalf("the attempt: state %q ok %v err %v; want reported finished %v", f.State, f.OK, f.Err, tc.ok)
			}
			errs := strings.Join(r.errorsLogged(logs), "\n")
			switch {
			case tc.ok && errs != "":
				t.Fatalf("errors logged for a recorded finish:\n%s", errs)
			case !tc.ok && !strings.Contains(errs, tc.logged):
				t.Fatalf("errors logged:\n%s\nwant one saying %q", errs, tc.logged)
			case tc.notSaid != "" && strings.Contains(errs, tc.notSaid):
				t.Fatalf("errors logged:\n%s\nsay %q of a finish that may have been recorded", errs, tc.notSaid)
			}
			if n := testutil.ToFloat64(r.metrics.StaleWrites.WithLabelValues("finish")); n != 0 {
				t.Fatalf("stale finishes counted = %v, want 0", n)
			}
			for _, o := range []string{"committed", "not_committed"} {
				want := 0.0
				if o == tc.ambig {
					want = 1
				}
				if n := testutil.ToFloat64(r.metrics.AmbiguousWrites.WithLabelValues("finish", o)); n != want {
					t.Fatalf("flowforge_ambiguous_writes_total{op=finish,outcome=%s} = %v, want %v", o, n, want)
				}
			}
			if st, _ := r.state(run, "a"); tc.recorded != (st == core.TaskSucceeded) {
				t.Fatalf("task %s; want SUCCEEDED %v", st, tc.recorded)
			}
		})
	}
}

// errorsLogged returns the messages logged at ERROR, each followed by its
// error attribute.
func (r *rig) errorsLogged(h *logRecords) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, rec := range h.recs {
		if rec.Level < slog.LevelError {
			continue
		}
		msg := rec.Message
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == "error" {
				msg += " (" + a.Value.String() + ")"
			}
			return true
		})
		out = append(out, msg)
	}
	return out
}

// TestAFinishStatementThatFailedIsRetriedNotReportedStale: mode 85. The
// first finish statement fails without committing (the connection broke
// before it was sent). The batcher hands its error to the attempt, which
// retries and is recorded; nothing is counted as a stale write.
func TestAFinishStatementThatFailedIsRetriedNotReportedStale(t *testing.T) {
	reg := core.NewRegistry()
	reg.MustRegister("ok", func(context.Context, core.Task) (json.RawMessage, error) { return json.RawMessage(`{"ok":true}`), nil })
	r := newRig(t, reg, nil)
	r.w.cfg.Store = &hookedFinishes{Store: r.st, hook: func(n int, _ []store.FinishRequest, next func() ([]store.FinishResult, error)) ([]store.FinishResult, error) {
		if n == 1 {
			return nil, errors.New("write: connection reset by peer (test)")
		}
		return next()
	}}
	storetest.Apply(t, r.st, "name: one\ntasks:\n  - {name: a, handler: ok}\n")
	run := storetest.Trigger(t, r.st, "one", "")
	r.start()
	r.publish()
	f := r.awaitFinished(30 * time.Second)
	if f.Err != nil || !f.OK || f.State != core.TaskSucceeded {
		t.Fatalf("the attempt: state %q ok %v err %v, want retried and recorded SUCCEEDED", f.State, f.OK, f.Err)
	}
	if n := testutil.ToFloat64(r.metrics.StaleWrites.WithLabelValues("finish")); n != 0 {
		t.Fatalf("stale finishes counted = %v, want 0: a failed statement was reported as a fencing rejection", n)
	}
	if st, _ := r.state(run, "a"); st != core.TaskSucceeded {
		t.Fatalf("task %s, want SUCCEEDED", st)
	}
}

// TestEveryAttemptOfAFailedFinishBatchIsRecorded: mode 85. Several
// attempts finish in one batch, forced: the first attempt's statement is
// held until every other attempt has queued behind it, so the next
// statement carries all of them. That statement fails, without committing
// or after committing with its reply lost. Every attempt of it must be
// retried or read back, each reported finished, every task SUCCEEDED, and
// no stale write counted.
func TestEveryAttemptOfAFailedFinishBatchIsRecorded(t *testing.T) {
	const tasks = 4
	for _, tc := range []struct {
		name   string
		commit bool // the failed statement commits first
	}{
		{name: "the statement wrote nothing"},
		{name: "the statement committed and its reply was lost", commit: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context() // cancelled before the cleanups stop the worker
			firstInFlight, release := make(chan struct{}), make(chan struct{})
			var first atomic.Bool
			reg := core.NewRegistry()
			reg.MustRegister("ok", func(context.Context, core.Task) (json.RawMessage, error) {
				if first.CompareAndSwap(false, true) {
					return json.RawMessage(`{"first":true}`), nil
				}
				select { // the others finish once the first's statement is in flight
				case <-firstInFlight:
				case <-ctx.Done():
				}
				return json.RawMessage(`{"first":false}`), nil
			})
			r := newRig(t, reg, func(c *Config) { c.Concurrency = tasks })
			var batch atomic.Int64
			r.w.cfg.Store = &hookedFinishes{Store: r.st, hook: func(n int, reqs []store.FinishRequest, next func() ([]store.FinishResult, error)) ([]store.FinishResult, error) {
				switch n {
				case 1:
					close(firstInFlight)
					select {
					case <-release:
					case <-ctx.Done():
					}
				case 2:
					batch.Store(int64(len(reqs)))
					if tc.commit {
						_, _ = next()
					}
					return nil, errReplyLost
				}
				return next()
			}}
			storetest.Apply(t, r.st, "name: one\ntasks:\n  - {name: a, handler: ok}\n")
			runs := make([]uuid.UUID, tasks)
			for i := range runs {
				runs[i] = storetest.Trigger(t, r.st, "one", "")
			}
			r.start()
			r.publish()
			deadline := time.Now().Add(30 * time.Second)
			for queued := 0; queued != tasks-1; {
				r.w.finishes.mu.Lock()
				queued = len(r.w.finishes.queue)
				r.w.finishes.mu.Unlock()
				if time.Now().After(deadline) {
					t.Fatalf("%d finishes queued behind the first, want %d", queued, tasks-1)
				}
				time.Sleep(5 * time.Millisecond) // poll interval, not a wait for state
			}
			close(release)
			for range tasks {
				if f := r.awaitFinished(30 * time.Second); f.Err != nil || !f.OK || f.State != core.TaskSucceeded {
					t.Fatalf("an attempt: state %q ok %v err %v, want reported finished SUCCEEDED", f.State, f.OK, f.Err)
				}
			}
			if n := batch.Load(); n != tasks-1 {
				t.Fatalf("the failed statement held %d rows, want %d", n, tasks-1)
			}
			for _, run := range runs {
				if st, _ := r.state(run, "a"); st != core.TaskSucceeded {
					t.Fatalf("run %s: task %s, want SUCCEEDED", run, st)
				}
			}
			if n := testutil.ToFloat64(r.metrics.StaleWrites.WithLabelValues("finish")); n != 0 {
				t.Fatalf("stale finishes counted = %v, want 0", n)
			}
			want := 0.0
			if tc.commit {
				want = tasks - 1
			}
			if n := testutil.ToFloat64(r.metrics.AmbiguousWrites.WithLabelValues("finish", "committed")); n != want {
				t.Fatalf("ambiguous finishes committed = %v, want %v", n, want)
			}
		})
	}
}
