package failpoint

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func TestParse(t *testing.T) {
	cases := []struct {
		spec    string
		want    string // String() of the result; "" for nil
		wantErr string
	}{
		{spec: "", want: ""},
		{spec: "  ", want: ""},
		{spec: ",", want: ""},
		{spec: "publisher.discard-confirms=2", want: "publisher.discard-confirms=2"},
		{spec: "publisher.exit-after-confirm", want: "publisher.exit-after-confirm=1"},
		{spec: "publisher.sigterm-after-confirm", want: "publisher.sigterm-after-confirm=1"},
		{spec: " publisher.exit-after-confirm = 1 , publisher.discard-confirms=3 ", want: "publisher.discard-confirms=3,publisher.exit-after-confirm=1"},
		{spec: "publisher.discard-confirm=1", wantErr: "unknown failpoint"},
		{spec: "publisher.discard-confirms=0", wantErr: "positive integer"},
		{spec: "publisher.discard-confirms=-1", wantErr: "positive integer"},
		{spec: "publisher.discard-confirms=x", wantErr: "positive integer"},
		{spec: "publisher.discard-confirms,publisher.discard-confirms=2", wantErr: "twice"},
	}
	for _, c := range cases {
		t.Run(c.spec, func(t *testing.T) {
			f, err := Parse(c.spec)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("Parse(%q) error = %v, want one containing %q", c.spec, err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", c.spec, err)
			}
			if got := f.String(); got != c.want {
				t.Fatalf("Parse(%q) = %q, want %q", c.spec, got, c.want)
			}
			if c.want == "" && f != nil {
				t.Fatalf("Parse(%q) = non-nil, want nil (inert)", c.spec)
			}
		})
	}
}

func TestANilSetNeverFires(t *testing.T) {
	var f *Failpoints
	if f.Fire(PublisherDiscardConfirms) {
		t.Fatal("nil failpoints fired")
	}
	f.ExitIf(PublisherExitAfterConfirm) // must not exit
}

func TestFireCountsDownExactlyUnderConcurrency(t *testing.T) {
	f, err := Parse("publisher.discard-confirms=5")
	if err != nil {
		t.Fatal(err)
	}
	var fired atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if f.Fire(PublisherDiscardConfirms) {
				fired.Add(1)
			}
		}()
	}
	wg.Wait()
	if fired.Load() != 5 {
		t.Fatalf("fired %d times, want 5", fired.Load())
	}
	if f.Fire(PublisherExitAfterConfirm) {
		t.Fatal("an unarmed failpoint fired")
	}
}

// TestSignalIfIsInertUnlessArmed: an unarmed or nil SignalIf returns at
// once without signalling (the armed path is proven end to end by
// TestASigtermBetweenConfirmAndStampKeepsTheStamp).
func TestSignalIfIsInertUnlessArmed(t *testing.T) {
	var nilFP *Failpoints
	nilFP.SignalIf(t.Context(), PublisherSigtermAfterConfirm)
	f, err := Parse(string(PublisherDiscardConfirms))
	if err != nil {
		t.Fatal(err)
	}
	f.SignalIf(t.Context(), PublisherSigtermAfterConfirm)
}
