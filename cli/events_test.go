package cli_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/cli"
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

// TestEventsTailOfAWorkflowNotAppliedSaysSoAndFollows: `events tail
// --workflow W` for a W not applied yet says so on standard error and
// follows all the same (W may be applied later); for an applied workflow
// it says nothing. Each tail is ended by its context (as by ctrl-C), exit 0.
func TestEventsTailOfAWorkflowNotAppliedSaysSoAndFollows(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	amqpURL := testAMQPURL()
	if err := h.s.EnableStream(h.ctx, "flowforge.events.clitest", "test"); err != nil {
		t.Fatal(err)
	}
	h.apply("name: known\ntasks:\n  - {name: a, handler: noop}\n")
	for _, c := range []struct{ workflow, stderr string }{
		{"later", "note: no workflow \"later\" is applied yet; following its transitions once it is\n"},
		{"known", ""},
	} {
		t.Run(c.workflow, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(h.ctx, 2*time.Second)
			defer cancel()
			var out, errOut bytes.Buffer
			code := cli.Run(ctx, []string{"ffctl", "--database-url", h.url, "--amqp-url", amqpURL, "--log-level", "warn", "events", "tail", "--workflow", c.workflow},
				nil, strings.NewReader(""), &out, &errOut)
			if code != 0 || errOut.String() != c.stderr || out.String() != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 0, nothing printed and stderr %q", code, out.String(), errOut.String(), c.stderr)
			}
		})
	}
}
