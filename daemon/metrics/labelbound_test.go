package metrics

import (
	"fmt"
	"sync"
	"testing"
)

// TestLabelBoundKeepsTheFirstValues: the first max distinct values are
// kept, the next new one is "other", and a value kept stays itself after
// the bound is reached; max < 1 is the default.
func TestLabelBoundKeepsTheFirstValues(t *testing.T) {
	t.Parallel()
	b := NewLabelBound(2)
	for i, tc := range []struct{ in, want string }{
		{"a", "a"},
		{"a", "a"},
		{"b", "b"},
		{"c", OtherLabelValue}, // the N+1th distinct value
		{"a", "a"},             // seen before: stays itself
		{"b", "b"},
		{"d", OtherLabelValue},
		{"c", OtherLabelValue}, // refused once, refused for good
	} {
		if got := b.Value(tc.in); got != tc.want {
			t.Errorf("step %d: Value(%q) = %q, want %q", i, tc.in, got, tc.want)
		}
	}
	d := NewLabelBound(0)
	for i := range MaxLabelValuesDefault {
		if v := fmt.Sprint(i); d.Value(v) != v {
			t.Fatalf("default bound refused value %d of %d", i+1, MaxLabelValuesDefault)
		}
	}
	if got := d.Value("one more"); got != OtherLabelValue {
		t.Errorf("default bound: value %d = %q, want %q", MaxLabelValuesDefault+1, got, OtherLabelValue)
	}
}

// TestLabelBoundIsConcurrentSafe: goroutines asking at once about more
// values than the bound keep exactly max of them, each answered the same
// by every goroutine (run with -race).
func TestLabelBoundIsConcurrentSafe(t *testing.T) {
	t.Parallel()
	const max, values, workers = 10, 50, 8
	b := NewLabelBound(max)
	answers := make([]map[string]string, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[w] = map[string]string{}
			for i := range values {
				v := fmt.Sprint((i + w) % values)
				answers[w][v] = b.Value(v)
			}
		}()
	}
	wg.Wait()
	kept := 0
	for v, got := range answers[0] {
		if got == v {
			kept++
		}
		for w := 1; w < workers; w++ {
			if answers[w][v] != got {
				t.Errorf("value %q: goroutine 0 got %q, goroutine %d got %q", v, got, w, answers[w][v])
			}
		}
	}
	if kept != max {
		t.Errorf("kept %d values, want %d", kept, max)
	}
}
