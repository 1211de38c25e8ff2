package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon/backoff"
	"github.com/flowforge/flowforge/daemon/clock"
	"github.com/flowforge/flowforge/daemon/metrics"
)

// TaskLogStore is what the worker's task log writer needs from the
// database (store.Store implements it).
type TaskLogStore interface {
	InsertTaskLogs(ctx context.Context, lines []store.TaskLogLine) (int64, error)
}

// Bounds of the task log writer.
const (
	// TaskLogMaxBytesDefault is an attempt's log cap (Config.TaskLogMaxBytes,
	// --task-log-max-bytes): the bytes of its lines' text stored before the
	// rest is dropped, counted in one marker line.
	TaskLogMaxBytesDefault = 64 << 10
	// TaskLogMaxBytesMax is the largest cap Config.Validate accepts.
	TaskLogMaxBytesMax = 64 << 20
	// taskLogInterval is how often buffered lines are written (sooner
	// when taskLogBatchMax are waiting or an attempt ends).
	taskLogInterval = 200 * time.Millisecond
	// taskLogBatchMax is the lines one insert statement writes at most.
	taskLogBatchMax = 2000
	// taskLogBufferMax bounds the lines waiting to be written: past it,
	// lines are dropped (counted, and noted in each attempt's marker).
	taskLogBufferMax = 50_000
	// taskLogStopTimeout bounds the last write at the worker's stop.
	taskLogStopTimeout = 5 * time.Second
)

// taskLogWriter writes the lines of every attempt's log in batches: one
// insert statement (store.InsertTaskLogs, its own transaction, never the
// finish's) every taskLogInterval, or at once when taskLogBatchMax lines
// wait or an attempt ends. A failed statement is retried, with backoff,
// with the same lines (the insert is idempotent); meanwhile new lines
// queue up to taskLogBufferMax, then are dropped and counted. So a slow
// or absent database costs the task logs lines, never a finish: attempts
// hand their lines over and never wait for them to be written. Lines of
// an attempt whose lease was lost are keyed by that attempt, so writing
// them late touches no row of the task run's new owner.
type taskLogWriter struct {
	store   TaskLogStore
	metrics *metrics.Metrics
	log     *slog.Logger

	mu   sync.Mutex
	buf  []store.TaskLogLine
	kick chan struct{} // capacity 1: a write is wanted now
}

func newTaskLogWriter(s TaskLogStore, m *metrics.Metrics, log *slog.Logger) *taskLogWriter {
	return &taskLogWriter{store: s, metrics: m, log: log, kick: make(chan struct{}, 1)}
}

// add queues l; false when the buffer is full (l dropped). A marker is
// queued whatever the buffer holds (one per attempt at most).
func (lw *taskLogWriter) add(l store.TaskLogLine, marker bool) bool {
	lw.mu.Lock()
	full := !marker && len(lw.buf) >= taskLogBufferMax
	if !full {
		lw.buf = append(lw.buf, l)
	}
	n := len(lw.buf)
	lw.mu.Unlock()
	if n >= taskLogBatchMax || marker {
		lw.flushSoon()
	}
	return !full
}

// flushSoon asks run for a write now, without waiting for it.
func (lw *taskLogWriter) flushSoon() {
	select {
	case lw.kick <- struct{}{}:
	default:
	}
}

// run writes until ctx ends, then makes one last write of what it holds,
// bounded by taskLogStopTimeout; lines it cannot write then are counted
// as dropped (reason stop) and logged.
func (lw *taskLogWriter) run(ctx context.Context) {
	t := time.NewTicker(taskLogInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), taskLogStopTimeout)
			defer cancel()
			lw.flush(sctx)
			lw.mu.Lock()
			left := len(lw.buf)
			lw.buf = nil
			lw.mu.Unlock()
			if left > 0 {
				lw.metrics.TaskLogLinesDropped.WithLabelValues("stop").Add(float64(left))
				lw.log.Warn("worker: task log lines not written at stop", "lines", left)
			}
			return
		case <-t.C:
		case <-lw.kick:
		}
		lw.flush(ctx)
	}
}

// flush writes the buffer, a batch at a time, retrying a failed batch
// with backoff until it is written or ctx ends (then the batch goes back
// to the buffer's front).
func (lw *taskLogWriter) flush(ctx context.Context) {
	bo := backoff.Backoff{Min: 50 * time.Millisecond, Max: 5 * time.Second}
	for {
		lw.mu.Lock()
		n := min(len(lw.buf), taskLogBatchMax)
		batch := lw.buf[:n:n]
		lw.buf = lw.buf[n:]
		lw.mu.Unlock()
		if n == 0 {
			return
		}
		for {
			_, err := lw.store.InsertTaskLogs(ctx, batch)
			if err == nil {
				bo.Reset()
				break
			}
			if errors.Is(err, store.ErrBadTaskLog) {
				// Not one the worker makes; no retry can fix it.
				lw.metrics.TaskLogLinesDropped.WithLabelValues("buffer").Add(float64(len(batch)))
				lw.log.Error("worker: task log batch refused", "lines", len(batch), "error", err)
				break
			}
			if bo.Failures() == 0 {
				lw.log.Warn("worker: could not write task log lines; retrying", "lines", len(batch), "error", err)
			}
			if backoff.Sleep(ctx, bo.Fail()) != nil {
				lw.mu.Lock()
				lw.buf = append(batch, lw.buf...)
				lw.mu.Unlock()
				return
			}
		}
	}
}

// attemptLog is the core.TaskLog of one attempt: it numbers the lines,
// sanitises them, holds the attempt to its cap and hands the lines to the
// writer. close queues the marker, if any line was dropped, and asks for
// a write. Safe for concurrent use (a handler may log from goroutines).
type attemptLog struct {
	w       *taskLogWriter
	clock   clock.Clock
	id      uuid.UUID
	attempt int
	max     int

	mu             sync.Mutex
	seq, used      int
	capped, buffer int // lines dropped past the cap, and for a full buffer
	droppedBytes   int
	closed         bool
}

// Line implements core.TaskLog.
func (a *attemptLog) Line(stream core.LogStream, level, text string) {
	text = core.SanitizeLogLine(text)
	now := a.clock.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.closed:
		return // a goroutine the handler left behind
	case a.capped > 0 || a.used+len(text) > a.max:
		// Past the cap, every later line goes too: the log stored is a
		// prefix of the attempt's, then the marker.
		a.capped++
		a.droppedBytes += len(text)
		a.w.metrics.TaskLogLinesDropped.WithLabelValues("cap").Inc()
		return
	}
	a.seq++
	l := store.TaskLogLine{TaskRunID: a.id, Attempt: a.attempt, Seq: a.seq, LoggedAt: now, Stream: stream, Level: level, Line: text}
	if !a.w.add(l, false) {
		a.seq--
		a.buffer++
		a.droppedBytes += len(text)
		a.w.metrics.TaskLogLinesDropped.WithLabelValues("buffer").Inc()
		return
	}
	a.used += len(text)
}

// close ends the attempt's log: lines after it are ignored; a marker says
// what was dropped; the writer is asked to write now (the attempt does
// not wait: its finish goes on beside the write).
func (a *attemptLog) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	if a.capped+a.buffer == 0 {
		a.w.flushSoon()
		return
	}
	a.seq++
	text := fmt.Sprintf("[task log truncated: %d lines (%d bytes) dropped", a.capped+a.buffer, a.droppedBytes)
	if a.capped > 0 {
		text += fmt.Sprintf("; %d past the cap of %d bytes per attempt (--task-log-max-bytes)", a.capped, a.max)
	}
	if a.buffer > 0 {
		text += fmt.Sprintf("; %d while the worker's buffer was full", a.buffer)
	}
	a.w.add(store.TaskLogLine{TaskRunID: a.id, Attempt: a.attempt, Seq: a.seq, LoggedAt: a.clock.Now(),
		Stream: core.LogStreamLog, Level: slog.LevelWarn.String(), Line: text + "]"}, true)
}

// withTaskLog returns ctx carrying the log of the attempt c and the func
// that closes it; with task logs off, ctx itself and a func that does
// nothing.
func (w *Worker) withTaskLog(ctx context.Context, c store.ClaimedTask) (context.Context, func()) {
	if w.logs == nil {
		return ctx, func() {}
	}
	l := &attemptLog{w: w.logs, clock: w.cfg.Clock, id: c.ID, attempt: c.Attempt, max: w.cfg.TaskLogMaxBytes}
	return core.WithTaskLog(ctx, l), l.close
}
