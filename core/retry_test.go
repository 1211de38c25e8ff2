package core_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core"
)

// ceilingOracle is min(cap, base*2^(n-1)) computed in float64, where it
// cannot overflow.
func ceilingOracle(base, cap time.Duration, attempt int) time.Duration {
	f := float64(base) * math.Pow(2, float64(attempt-1))
	if f >= float64(cap) {
		return cap
	}
	return time.Duration(f)
}

func TestBackoffFullJitterStaysInBounds(t *testing.T) {
	const samples = 10000
	rnd := rand.New(rand.NewPCG(20240101, 42))
	for _, p := range []core.RetryPolicy{
		core.RetryPolicyDefault(),
		{MaxAttempts: 40, InitialBackoff: 100 * time.Millisecond, MaxBackoff: 30 * time.Second},
		{MaxAttempts: 40, InitialBackoff: 3 * time.Millisecond, MaxBackoff: time.Hour},
		{MaxAttempts: 40, InitialBackoff: time.Second, MaxBackoff: time.Second},
	} {
		for attempt := 1; attempt <= 40; attempt++ {
			ceiling := p.BackoffCeiling(attempt)
			if want := ceilingOracle(p.InitialBackoff, p.MaxBackoff, attempt); ceiling != want {
				t.Fatalf("%+v: BackoffCeiling(%d) = %s, want %s", p, attempt, ceiling, want)
			}
			lo, hi := time.Duration(math.MaxInt64), time.Duration(0)
			for range samples {
				d := p.Backoff(attempt, rnd)
				if d < 0 || d > ceiling {
					t.Fatalf("%+v: Backoff(%d) = %s, outside [0, %s]", p, attempt, d, ceiling)
				}
				lo, hi = min(lo, d), max(hi, d)
			}
			// Full jitter spreads over the whole range: with 10000 uniform
			// draws the extremes lie within 1% of the ends (the chance of
			// missing is (0.99)^10000, about 2e-44).
			if lo > ceiling/100 || hi < ceiling-ceiling/100 {
				t.Fatalf("%+v attempt %d: samples span [%s, %s] of [0, %s]: jitter is not full", p, attempt, lo, hi, ceiling)
			}
		}
	}
}

func TestBackoffCeilingDoublesThenCaps(t *testing.T) {
	p := core.RetryPolicy{MaxAttempts: 10, InitialBackoff: time.Second, MaxBackoff: 10 * time.Second}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i, w := range want {
		if got := p.BackoffCeiling(i + 1); got != w {
			t.Errorf("BackoffCeiling(%d) = %s, want %s", i+1, got, w)
		}
	}
	if got := p.BackoffCeiling(0); got != time.Second {
		t.Errorf("BackoffCeiling(0) = %s, want the first retry's %s", got, time.Second)
	}
	if got := p.BackoffCeiling(-5); got != time.Second {
		t.Errorf("BackoffCeiling(-5) = %s, want %s", got, time.Second)
	}
}

func TestBackoffNeverOverflows(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, p := range []core.RetryPolicy{
		{MaxAttempts: 1000, InitialBackoff: time.Second, MaxBackoff: 24 * time.Hour},
		{MaxAttempts: 1000, InitialBackoff: time.Nanosecond, MaxBackoff: math.MaxInt64 / 2},
		{MaxAttempts: 1000, InitialBackoff: math.MaxInt64 / 4, MaxBackoff: math.MaxInt64 / 2},
	} {
		for _, attempt := range []int{62, 63, 64, 65, 100, 1000, math.MaxInt32} {
			c := p.BackoffCeiling(attempt)
			if want := ceilingOracle(p.InitialBackoff, p.MaxBackoff, attempt); c != want {
				t.Errorf("%+v: BackoffCeiling(%d) = %s, want %s", p, attempt, c, want)
			}
			if attempt >= 100 && c != p.MaxBackoff {
				t.Errorf("%+v: BackoffCeiling(%d) = %s, want the cap", p, attempt, c)
			}
			if d := p.Backoff(attempt, rnd); d < 0 || d > p.MaxBackoff {
				t.Errorf("%+v: Backoff(%d) = %s, outside [0, cap]", p, attempt, d)
			}
		}
	}
}

func TestBackoffAtTheLargestDurationDoesNotPanic(t *testing.T) {
	p := core.RetryPolicy{MaxAttempts: 3, InitialBackoff: math.MaxInt64, MaxBackoff: math.MaxInt64}
	if err := p.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if d := p.Backoff(1, rand.New(rand.NewPCG(1, 2))); d < 0 {
		t.Fatalf("Backoff = %s", d)
	}
}

func TestBackoffWithZeroInitialIsZero(t *testing.T) {
	for _, p := range []core.RetryPolicy{
		{MaxAttempts: 3, InitialBackoff: 0, MaxBackoff: time.Minute},
		{MaxAttempts: 3, InitialBackoff: 0, MaxBackoff: 0},
	} {
		for attempt := 1; attempt <= 70; attempt++ {
			if d := p.Backoff(attempt, nil); d != 0 {
				t.Fatalf("%+v: Backoff(%d) = %s, want 0", p, attempt, d)
			}
		}
	}
}

func TestBackoffWithoutASourceUsesTheGlobalOne(t *testing.T) {
	p := core.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Second, MaxBackoff: time.Second}
	for range 1000 {
		if d := p.Backoff(1, nil); d < 0 || d > time.Second {
			t.Fatalf("Backoff(1, nil) = %s", d)
		}
	}
}

func TestRetryPolicyValidate(t *testing.T) {
	for _, tc := range []struct {
		p  core.RetryPolicy
		ok bool
	}{
		{core.RetryPolicyDefault(), true},
		{core.RetryPolicy{MaxAttempts: 1}, true},
		{core.RetryPolicy{MaxAttempts: 0, InitialBackoff: time.Second, MaxBackoff: time.Second}, false},
		{core.RetryPolicy{MaxAttempts: -1, InitialBackoff: time.Second, MaxBackoff: time.Second}, false},
		{core.RetryPolicy{MaxAttempts: 1, InitialBackoff: -time.Second, MaxBackoff: time.Second}, false},
		{core.RetryPolicy{MaxAttempts: 1, InitialBackoff: 0, MaxBackoff: -time.Second}, false},
		{core.RetryPolicy{MaxAttempts: 1, InitialBackoff: time.Minute, MaxBackoff: time.Second}, false},
	} {
		if err := tc.p.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v.Validate() = %v, want ok=%v", tc.p, err, tc.ok)
		}
	}
	d := core.RetryPolicyDefault()
	if d.MaxAttempts != 3 || d.InitialBackoff != time.Second || d.MaxBackoff != time.Minute {
		t.Errorf("RetryPolicyDefault() = %+v", d)
	}
}
