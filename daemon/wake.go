package daemon

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon/backoff"
)

// Wakeups listens for NOTIFYs on channel (store.OutboxChannel for
// publishers) and signals the returned channel (buffered, one pending
// signal at most) for each, whatever its payload, and after each
// (re)connect. It reconnects with backoff forever; notifications lost while
// disconnected are covered by the callers' periodic sweeps. It stops when
// ctx ends; wait blocks until its goroutine has returned (call it after ctx
// ended, so that nothing outlives the caller's loop).
func Wakeups(ctx context.Context, dbURL, channel string, log *slog.Logger) (wake <-chan struct{}, wait func()) {
	ch := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Listen(ctx, dbURL, channel, log, func([]string) { signal(ch) })
	}()
	return ch, func() { <-done }
}

// RunSet gathers the run ids that TasksChannel notifications name, for a
// scheduler to advance exactly those runs. It is safe for concurrent use:
// the listener adds, the scheduler's loop takes.
type RunSet struct {
	mu          sync.Mutex
	ids         map[uuid.UUID]struct{}
	anyRun      bool // a notification named no runs (store.AnyRun)
	reconnected bool // the listener (re)connected: notifications may be lost
	wake        chan struct{}
}

// Taken is what RunSet.Take returns.
type Taken struct {
	IDs         []uuid.UUID // the runs named, in no order
	AnyRun      bool        // a notification carried store.AnyRun (or an item that is no run id)
	Reconnected bool        // the listener (re)connected since the last Take
}

// NewRunSet returns an empty RunSet.
func NewRunSet() *RunSet {
	return &RunSet{ids: map[uuid.UUID]struct{}{}, wake: make(chan struct{}, 1)}
}

// Wake is signalled (one pending signal at most) whenever the set gains
// something to take.
func (r *RunSet) Wake() <-chan struct{} { return r.wake }

// Add adds ids, as a notification naming them does, and signals Wake.
func (r *RunSet) Add(ids ...uuid.UUID) {
	r.mu.Lock()
	for _, id := range ids {
		r.ids[id] = struct{}{}
	}
	r.mu.Unlock()
	if len(ids) > 0 {
		signal(r.wake)
	}
}

// AskSweep puts back a sweep request a Take returned (AnyRun; with
// reconnected, a reconnect's full sweep too) without signalling Wake: the
// next turn, whatever wakes it, sees it.
func (r *RunSet) AskSweep(reconnected bool) {
	r.mu.Lock()
	r.anyRun = true
	r.reconnected = r.reconnected || reconnected
	r.mu.Unlock()
}

// Take empties the set and returns what it held.
func (r *RunSet) Take() Taken {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := Taken{IDs: make([]uuid.UUID, 0, len(r.ids)), AnyRun: r.anyRun, Reconnected: r.reconnected}
	for id := range r.ids {
		t.IDs = append(t.IDs, id)
	}
	clear(r.ids)
	r.anyRun, r.reconnected = false, false
	return t
}

// Note records one TasksChannel notification's items (nil: the listener
// (re)connected) and signals Wake: what store.DecodeRunWake reads in them
// joins the set, its runs by id and its AnyRun (store.AnyRun, an empty
// payload, an item that is no run id) as a sweep request.
func (r *RunSet) Note(items []string) {
	w := store.DecodeRunWake(items)
	r.mu.Lock()
	if items == nil {
		r.reconnected = true
	}
	r.anyRun = r.anyRun || w.AnyRun
	for _, id := range w.Runs {
		r.ids[id] = struct{}{}
	}
	r.mu.Unlock()
	signal(r.wake)
}

// WatchRuns LISTENs on store.TasksChannel (reconnecting forever, as
// Listen) and gathers the runs notified into the returned RunSet; a
// (re)connect asks for a sweep. It stops when ctx ends; wait blocks until
// its goroutine has returned.
func WatchRuns(ctx context.Context, dbURL string, log *slog.Logger) (runs *RunSet, wait func()) {
	runs = NewRunSet()
	done := make(chan struct{})
	go func() {
		defer close(done)
		Listen(ctx, dbURL, store.TasksChannel, log, runs.Note)
	}()
	return runs, func() { <-done }
}

// Listen LISTENs on channel through a dedicated connection to dbURL and
// calls on with each notification's payload items (comma separated) until
// ctx ends; it returns then. It reconnects with capped backoff forever,
// logging the failures. on is called from Listen's goroutine, one call at
// a time, and should return quickly. on(nil) means "notifications may have
// been missed": it is called after each (re)connect, so the caller can
// check what it would have been told.
func Listen(ctx context.Context, dbURL, channel string, log *slog.Logger, on func(items []string)) {
	var bo backoff.Backoff
	for ctx.Err() == nil {
		l, err := store.ListenOn(ctx, dbURL, channel)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			d := bo.Fail()
			log.Warn("listen: connect", "channel", channel, "error", err, "failures", bo.Failures(), "retry_in", d.String())
			_ = backoff.Sleep(ctx, d)
			continue
		}
		if bo.Reset() {
			log.Info("listen: recovered", "channel", channel)
		}
		on(nil) // something may have happened while we were away
		for {
			items, err := l.Wait(ctx)
			if err != nil {
				break
			}
			on(items)
		}
		l.Close()
		if ctx.Err() == nil {
			_ = backoff.Sleep(ctx, 50*time.Millisecond)
		}
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
