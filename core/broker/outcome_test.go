package broker

import (
	"strings"
	"testing"
)

// TestEveryOutcomeHasItsOwnName: Outcomes lists every outcome once, from
// NotSent to Refused, and each has a name of its own (the metric label).
func TestEveryOutcomeHasItsOwnName(t *testing.T) {
	t.Parallel()
	got := Outcomes()
	if len(got) != int(Refused)+1 || got[0] != NotSent || got[len(got)-1] != Refused {
		t.Fatalf("Outcomes() = %v, want NotSent .. Refused", got)
	}
	seen := map[string]Outcome{}
	for _, o := range got {
		name := o.String()
		if strings.HasPrefix(name, "outcome(") {
			t.Errorf("outcome %d has no name", int(o))
		}
		if p, dup := seen[name]; dup {
			t.Errorf("outcomes %d and %d are both %q", int(p), int(o), name)
		}
		seen[name] = o
	}
}

func TestOutcomeString(t *testing.T) {
	for o, want := range map[Outcome]string{
		NotSent: "not sent", Confirmed: "confirmed", Nacked: "nacked",
		Returned: "returned", TimedOut: "timed out", Outcome(42): "outcome(42)",
	} {
		if got := o.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(o), got, want)
		}
	}
	var zero Outcome
	if zero == Confirmed {
		t.Error("zero Outcome must not be Confirmed")
	}
}
