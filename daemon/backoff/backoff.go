// Package backoff paces reconnect loops: capped exponential backoff with
// full jitter (the same curve as task retries, core.RetryPolicy), reset
// after a success.
package backoff

import (
	"context"
	"time"

	"github.com/flowforge/flowforge/core"
)

// Defaults for reconnect pacing.
const (
	MinDefault = 100 * time.Millisecond
	MaxDefault = 30 * time.Second
)

// Backoff counts consecutive failures. The zero value uses MinDefault and
// MaxDefault. Not safe for concurrent use: one per loop.
type Backoff struct {
	Min, Max time.Duration
	failures int
}

// Failures returns the number of consecutive failures recorded.
func (b *Backoff) Failures() int { return b.failures }

// Fail records a failure and returns how long to wait before the next try:
// a uniform draw from [0, min(Max, Min·2^(failures-1))].
func (b *Backoff) Fail() time.Duration {
	b.failures++
	p := core.RetryPolicy{MaxAttempts: 1, InitialBackoff: b.Min, MaxBackoff: b.Max}
	if p.InitialBackoff <= 0 {
		p.InitialBackoff = MinDefault
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = MaxDefault
	}
	return p.Backoff(b.failures, nil)
}

// Reset records a success. It reports whether there were failures before
// (so the caller can log that it recovered).
func (b *Backoff) Reset() bool {
	had := b.failures > 0
	b.failures = 0
	return had
}

// Sleep waits d or until ctx ends; it returns ctx.Err() in the latter case.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
