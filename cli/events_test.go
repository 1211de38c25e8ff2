package cli_test

import (
	"testing"
)

// TestEventsTailRefusesBadInput: every bad input of `events tail` and
// `events off` exits 2 with its own message, before anything connects to
// the broker, and changes nothing.
func TestEventsTailRefusesBadInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	before := h.snapshot()
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"stream off", []string{"events", "tail"}, "ffctl: the transition stream is off (start a publisher with --events-exchange NAME)\n"},
		{"bad workflow name", []string{"events", "tail", "--workflow", "Nightly Report"}, "ffctl: --workflow: workflow name \"Nightly Report\" must match [a-z0-9][a-z0-9._-]*\n"},
		{"empty workflow name", []string{"events", "tail", "--workflow", ""}, "ffctl: --workflow: workflow name is missing\n"},
		{"an argument", []string{"events", "tail", "nightly"}, "ffctl: events tail takes no arguments (got \"nightly\"); use --workflow W\n"},
		{"bad output", []string{"events", "tail", "-o", "yaml"}, "ffctl: -o \"yaml\": want table or json\n"},
		{"off with an argument", []string{"events", "off", "now"}, "ffctl: events off takes no arguments (got \"now\")\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := h.ff(c.args...)
			if r.code != 2 || r.stderr != c.want || r.stdout != "" {
				t.Fatalf("got %s\nwant exit 2 and stderr %q", r, c.want)
			}
		})
	}
	h.assertUnchanged(before)
}

// TestEventsOffTurnsTheStreamOff: `events off` deletes the setting a
// publisher wrote and says whether the stream was on.
func TestEventsOffTurnsTheStreamOff(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	if err := h.s.EnableStream(h.ctx, "flowforge.events", "test"); err != nil {
		t.Fatal(err)
	}
	if r := h.must("events", "off"); r.stdout != "the transition stream is off (a publisher started with --events-exchange turns it on again)\n" {
		t.Fatalf("first off: %s", r)
	}
	if r := h.must("events", "off"); r.stdout != "the transition stream was already off\n" {
		t.Fatalf("second off: %s", r)
	}
}
