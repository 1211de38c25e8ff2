package worker

import (
	"testing"

	"github.com/google/uuid"
)

// TestHandBackPacerBacksOffPerTaskAndTokenAndStaysBounded: the waits of
// one task grow (capped, full jitter), another task and a new fencing
// token start over, and the map of remembered tasks stays bounded.
func TestHandBackPacerBacksOffPerTaskAndTokenAndStaysBounded(t *testing.T) {
	var p handBackPacer
	a, b := uuid.New(), uuid.New()
	if _, first := p.next(a, 1); !first {
		t.Fatal("the first hand-back of a task is not first")
	}
	for i := 2; i <= 12; i++ {
		w, first := p.next(a, 1)
		if first {
			t.Fatalf("hand-back %d counted as first", i)
		}
		if w < 0 || w > HandBackMaxDefault {
			t.Fatalf("wait %s outside [0, %s]", w, HandBackMaxDefault)
		}
	}
	if got := p.tasks[a].bo.Failures(); got != 12 {
		t.Fatalf("task a: %d hand-backs recorded, want 12", got)
	}
	if w, first := p.next(b, 1); !first || w > HandBackMinDefault {
		t.Fatalf("another task: first %v, wait %s (want first, at most %s)", first, w, HandBackMinDefault)
	}
	if w, first := p.next(a, 2); !first || w > HandBackMinDefault {
		t.Fatalf("a new fencing token: first %v, wait %s (want first, at most %s)", first, w, HandBackMinDefault)
	}
	p.forget(a)
	if _, ok := p.tasks[a]; ok {
		t.Fatal("forget kept the task")
	}
	for i := 0; i < handBackTasksMax+10; i++ {
		p.next(uuid.New(), 1)
	}
	if n := len(p.tasks); n > handBackTasksMax {
		t.Fatalf("%d tasks remembered, more than %d", n, handBackTasksMax)
	}
}

// TestHandBackWaitsGrowOnAverage: over many draws the mean wait of the
// sixth hand-back of a task is well above the first's (the curve is
// exponential, not the old constant 50 ms).
func TestHandBackWaitsGrowOnAverage(t *testing.T) {
	var firstSum, sixthSum float64
	const n = 400
	for i := 0; i < n; i++ {
		var p handBackPacer
		id := uuid.New()
		for k := 1; k <= 6; k++ {
			w, _ := p.next(id, 1)
			switch k {
			case 1:
				firstSum += w.Seconds()
			case 6:
				sixthSum += w.Seconds()
			}
		}
	}
	if first, sixth := firstSum/n, sixthSum/n; sixth < 8*first {
		t.Fatalf("mean wait of hand-back 1 = %.3fs, of hand-back 6 = %.3fs: not backing off", first, sixth)
	}
}
