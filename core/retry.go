package core

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Retry policy defaults, used when a task's definition leaves a field out.
const (
	MaxAttemptsDefault    = 3
	InitialBackoffDefault = time.Second
	MaxBackoffDefault     = time.Minute
)

// RetryPolicy says how often a task is attempted and how long it waits
// between attempts.
type RetryPolicy struct {
	// MaxAttempts counts every attempt, the first included; at least 1.
	MaxAttempts int
	// InitialBackoff is the upper bound of the first retry's delay.
	InitialBackoff time.Duration
	// MaxBackoff caps every delay.
	MaxBackoff time.Duration
}

// RetryPolicyDefault returns the policy of a task that sets none.
func RetryPolicyDefault() RetryPolicy {
	return RetryPolicy{MaxAttempts: MaxAttemptsDefault, InitialBackoff: InitialBackoffDefault, MaxBackoff: MaxBackoffDefault}
}

// Validate returns an error naming the first field out of range.
func (p RetryPolicy) Validate() error {
	switch {
	case p.MaxAttempts < 1:
		return fmt.Errorf("max_attempts must be at least 1, got %d", p.MaxAttempts)
	case p.InitialBackoff < 0:
		return fmt.Errorf("initial_backoff must not be negative, got %s", p.InitialBackoff)
	case p.MaxBackoff < 0:
		return fmt.Errorf("max_backoff must not be negative, got %s", p.MaxBackoff)
	case p.MaxBackoff < p.InitialBackoff:
		return fmt.Errorf("max_backoff (%s) is below initial_backoff (%s)", p.MaxBackoff, p.InitialBackoff)
	}
	return nil
}

// BackoffCeiling returns min(MaxBackoff, InitialBackoff·2^(attempt-1)) for the
// retry that follows attempt number attempt (1-based). It never overflows.
func (p RetryPolicy) BackoffCeiling(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	ceiling := p.InitialBackoff
	for i := 1; i < attempt; i++ {
		if ceiling >= p.MaxBackoff || ceiling > time.Duration(1<<62)/2 {
			return p.MaxBackoff
		}
		ceiling *= 2
	}
	if ceiling > p.MaxBackoff {
		return p.MaxBackoff
	}
	return ceiling
}

// Backoff returns the delay before the retry that follows attempt (1-based):
// "full jitter", a uniform draw from [0, BackoffCeiling(attempt)]. rnd may be
// nil (the process-wide source is used); tests pass a seeded one.
func (p RetryPolicy) Backoff(attempt int, rnd *rand.Rand) time.Duration {
	ceiling := p.BackoffCeiling(attempt)
	if ceiling <= 0 {
		return 0
	}
	n := int64(ceiling)
	if n < math.MaxInt64 {
		n++ // the draw includes the ceiling itself
	}
	if rnd == nil {
		return time.Duration(rand.Int64N(n))
	}
	return time.Duration(rnd.Int64N(n))
}
