package daemon

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon/backoff"
)

// Wakeups listens for NOTIFYs on store.NotifyChannel carrying topic and
// signals the returned channel (buffered, one pending signal at most). It
// reconnects with backoff forever; notifications lost while disconnected
// are covered by the callers' periodic sweeps. It stops when ctx ends;
// wait blocks until its goroutine has returned (call it after ctx ended,
// so that nothing outlives the caller's loop).
func Wakeups(ctx context.Context, dbURL, topic string, log *slog.Logger) (wake <-chan struct{}, wait func()) {
	ch := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Listen(ctx, dbURL, store.NotifyChannel, log, func(topics []string) {
			if topics == nil || slices.Contains(topics, topic) {
				signal(ch)
			}
		})
	}()
	return ch, func() { <-done }
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
