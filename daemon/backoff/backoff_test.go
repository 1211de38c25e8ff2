package backoff_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/flowforge/flowforge/daemon/backoff"
)

func TestFailIsCappedFullJitterAndResetReportsRecovery(t *testing.T) {
	b := backoff.Backoff{Min: 10 * time.Millisecond, Max: 80 * time.Millisecond}
	if b.Reset() {
		t.Fatal("Reset with no failures reported a recovery")
	}
	var max time.Duration
	for i := 1; i <= 50; i++ {
		d := b.Fail()
		ceiling := 10 * time.Millisecond << min(i-1, 3)
		if d < 0 || d > ceiling {
			t.Fatalf("failure %d: delay %s outside [0, %s]", i, d, ceiling)
		}
		if d > max {
			max = d
		}
	}
	if max < 40*time.Millisecond {
		t.Fatalf("50 delays never came near the 80ms cap (max %s): no jitter spread", max)
	}
	if b.Failures() != 50 || !b.Reset() || b.Failures() != 0 {
		t.Fatalf("after reset: failures %d", b.Failures())
	}
}

func TestSleepStopsWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := backoff.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if time.Since(start) > time.Second {
		t.Fatal("Sleep ignored the cancelled context")
	}
	if err := backoff.Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatal(err)
	}
}
