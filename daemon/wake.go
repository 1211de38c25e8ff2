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
// are covered by the callers' periodic sweeps. It stops when ctx ends.
func Wakeups(ctx context.Context, dbURL, topic string, log *slog.Logger) <-chan struct{} {
	ch := make(chan struct{}, 1)
	go func() {
		var bo backoff.Backoff
		for ctx.Err() == nil {
			l, err := store.Listen(ctx, dbURL)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				d := bo.Fail()
				log.Warn("listen: connect", "err", err, "retry_in", d.String())
				_ = backoff.Sleep(ctx, d)
				continue
			}
			if bo.Reset() {
				log.Info("listen: recovered")
			}
			signal(ch) // something may have happened while we were away
			for {
				topics, err := l.Wait(ctx)
				if err != nil {
					break
				}
				if slices.Contains(topics, topic) {
					signal(ch)
				}
			}
			l.Close()
			if ctx.Err() == nil {
				_ = backoff.Sleep(ctx, 50*time.Millisecond)
			}
		}
	}()
	return ch
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
