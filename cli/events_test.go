package cli_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/cli"
	"github.com/flowforge/flowforge/core/store"
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
		{"stream off", []string{"events", "tail"}, "ffctl: the transition stream is off (start or restart a publisher with --events-exchange NAME: it turns the stream on when it starts)\n"},
		{"bad workflow name", []string{"events", "tail", "--workflow", "Nightly Report"}, "ffctl: --workflow: workflow name \"Nightly Report\" must match [a-z0-9][a-z0-9._-]*\n"},
		{"empty workflow name", []string{"events", "tail", "--workflow", ""}, "ffctl: --workflow: workflow name is missing\n"},
		{"an argument", []string{"events", "tail", "nightly"}, "ffctl: events tail takes no arguments (got \"nightly\"); use --workflow W\n"},
		{"bad output", []string{"events", "tail", "-o", "yaml"}, "ffctl: -o \"yaml\": want table or json\n"},
		{"off with an argument", []string{"events", "off", "now"}, "ffctl: events off takes no arguments (got \"now\")\n"},
		{"status with an argument", []string{"events", "status", "now"}, "ffctl: events status takes no arguments (got \"now\")\n"},
		{"status, bad output", []string{"events", "status", "-o", "yaml"}, "ffctl: -o \"yaml\": want table or json\n"},
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
	if r := h.must("events", "off"); r.stdout != "the transition stream is off; rows already written still go to exchange flowforge.events (a publisher started with --events-exchange turns it on again)\n" {
		t.Fatalf("first off: %s", r)
	}
	if r := h.must("events", "off"); r.stdout != "the transition stream was already off\n" {
		t.Fatalf("second off: %s", r)
	}
	type offResult struct {
		WasOn bool `json:"was_on"`
		Drain *struct {
			Exchange string `json:"exchange"`
			OffBy    string `json:"off_by"`
		} `json:"drain"`
	}
	if err := h.s.EnableStream(h.ctx, "flowforge.events.b", "test"); err != nil {
		t.Fatal(err)
	}
	for i, wantOn := range []bool{true, false} {
		r := decode[offResult](t, h.must("events", "off", "-o", "json").stdout)
		if r.WasOn != wantOn || r.Drain == nil || r.Drain.Exchange != "flowforge.events.b" || !strings.HasPrefix(r.Drain.OffBy, "cli:") {
			t.Fatalf("off -o json, call %d: %+v (drain %+v); want was_on %v, rows left going to flowforge.events.b, off by the cli", i+1, r, r.Drain, wantOn)
		}
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

// TestEventsStatusShowsTheSettingAndTheBacklog: `events status` says
// whether the stream is on and where it goes, and counts the rows written
// and not yet published, and those a publish failed for with the newest
// one's error; off, it says off and still counts what is left to publish.
func TestEventsStatusShowsTheSettingAndTheBacklog(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	type status struct {
		On        bool       `json:"on"`
		Exchange  string     `json:"exchange"`
		EnabledAt *time.Time `json:"enabled_at"`
		EnabledBy string     `json:"enabled_by"`
		Pending   int64      `json:"pending"`
		Oldest    float64    `json:"oldest_pending_seconds"`
		Failing   int64      `json:"failing"`
		LastError string     `json:"last_error"`
		Drain     *struct {
			Exchange string    `json:"exchange"`
			OffAt    time.Time `json:"off_at"`
			OffBy    string    `json:"off_by"`
		} `json:"drain"`
	}
	st := decode[status](t, h.must("events", "status", "-o", "json").stdout)
	if st != (status{}) {
		t.Fatalf("a stream never on: %+v, want all zero (drain null)", st)
	}
	if r := h.must("events", "status"); r.stdout != "stream                off\npending               0\noldest pending age    0.0s\npending with errors   0\n" {
		t.Fatalf("off, table:\n%s", r.stdout)
	}

	if err := h.s.EnableStream(h.ctx, "flowforge.events.statustest", "test"); err != nil {
		t.Fatal(err)
	}
	h.apply("name: one\ntasks:\n  - {name: a, handler: noop}\n")
	h.trigger("one") // the run's creation and its task's: two rows
	st = decode[status](t, h.must("events", "status", "-o", "json").stdout)
	if !st.On || st.Exchange != "flowforge.events.statustest" || st.EnabledBy != "test" || st.EnabledAt == nil ||
		time.Since(*st.EnabledAt) > time.Minute || st.Pending != 2 || st.Oldest < 0 || st.Failing != 0 || st.LastError != "" {
		t.Fatalf("on, two rows written: %+v", st)
	}

	// A publisher's batch whose publish failed: the rows stay, counted as
	// failing, with the error recorded.
	b, err := h.s.LockStream(h.ctx, 100, store.StreamMark{}) // takes the first mark
	if err != nil {
		t.Fatal(err)
	}
	mark := b.Mark
	if err := b.Commit(h.ctx); err != nil {
		t.Fatal(err)
	}
	if b, err = h.s.LockStream(h.ctx, 100, mark); err != nil {
		t.Fatal(err)
	}
	if len(b.Rows) != 2 {
		_ = b.Rollback()
		t.Fatalf("batch of %d rows, want the 2 written", len(b.Rows))
	}
	if err := b.MarkFailed(h.ctx, []int64{b.Rows[0].ID, b.Rows[1].ID}, "NOT_FOUND - no exchange 'flowforge.events.statustest'"); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(h.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := h.s.DisableStream(h.ctx, "test"); err != nil {
		t.Fatal(err)
	}
	st = decode[status](t, h.must("events", "status", "-o", "json").stdout)
	if st.On || st.Exchange != "" || st.EnabledAt != nil || st.Pending != 2 || st.Failing != 2 ||
		st.LastError != "NOT_FOUND - no exchange 'flowforge.events.statustest'" ||
		st.Drain == nil || st.Drain.Exchange != "flowforge.events.statustest" || st.Drain.OffBy != "test" || time.Since(st.Drain.OffAt) > time.Minute {
		t.Fatalf("off, two rows failing: %+v (drain %+v)", st, st.Drain)
	}
	out := h.must("events", "status").stdout
	for _, want := range []string{"stream                off since ", " (by test); rows left go to exchange flowforge.events.statustest\n",
		"pending               2\n", "pending with errors   2\n",
		"last error            NOT_FOUND - no exchange 'flowforge.events.statustest'\n"} {
		if !strings.Contains(out, want) {
			t.Fatalf("off, failing, table lacks %q:\n%s", want, out)
		}
	}
	// Rows left by an older release's turn off, which recorded no
	// exchange for them: the note says who publishes them.
	if _, err := h.db.ExecContext(h.ctx, `DELETE FROM transition_stream_drain`); err != nil {
		t.Fatal(err)
	}
	out = h.must("events", "status").stdout
	if want := "stream                off\n"; !strings.Contains(out, want) ||
		!strings.Contains(out, "note: these rows were written before the stream went off (by an older release, which recorded no\nexchange for them); only a running publisher started with --events-exchange publishes them\n") {
		t.Fatalf("off, no drain recorded, table:\n%s", out)
	}
}
