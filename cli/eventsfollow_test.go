package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/flowforge/flowforge/cli"
	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/daemon/logtest"
)

// tailTrial is a running `ffctl events tail -o json` against a test
// harness's database and the test broker, with a channel to publish
// transition events on and the tail's standard output and error.
type tailTrial struct {
	t           *testing.T
	ch          *amqp.Channel
	out, errOut logtest.Buffer
	cancel      context.CancelFunc
	code        chan int
}

// startTail starts events tail on the harness's database, the stream on
// exchange first (deleted, with every exchange in cleanup, at the end).
func startTail(t *testing.T, h *harness, first string, cleanup ...string) *tailTrial {
	t.Helper()
	amqpURL := testAMQPURL()
	if err := h.s.EnableStream(h.ctx, first, "test"); err != nil {
		t.Fatal(err)
	}
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, x := range append([]string{first}, cleanup...) {
			_ = ch.ExchangeDelete(x, false, false)
		}
	})
	ctx, cancel := context.WithTimeout(h.ctx, 60*time.Second)
	t.Cleanup(cancel)
	tt := &tailTrial{t: t, ch: ch, cancel: cancel, code: make(chan int, 1)}
	go func() {
		tt.code <- cli.Run(ctx, []string{"ffctl", "--database-url", h.url, "--amqp-url", amqpURL, "events", "tail", "-o", "json"},
			nil, strings.NewReader(""), &tt.out, &tt.errOut)
	}()
	return tt
}

// publish declares exchange (as a publisher does) and publishes a run
// event of run id run to it.
func (tt *tailTrial) publish(exchange, run string) {
	tt.t.Helper()
	e := core.TransitionEvent{EventID: run, Seq: 1, RunID: run, Workflow: "follow", Kind: core.TransitionRun, To: "RUNNING", At: time.Now().UTC()}
	body, err := json.Marshal(e)
	if err != nil {
		tt.t.Fatal(err)
	}
	if err := tt.ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		tt.t.Fatal(err)
	}
	if err := tt.ch.PublishWithContext(context.Background(), exchange, e.RoutingKey(), false, false, amqp.Publishing{Body: body}); err != nil {
		tt.t.Fatal(err)
	}
}

// waitFor polls cond for up to 30 s, calling each (if any) between
// looks; it fails the test with the tail's output when cond never holds.
func (tt *tailTrial) waitFor(what string, cond func() bool, each func()) {
	tt.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tt.t.Fatalf("gave up waiting for %s; stdout %q, stderr %q", what, tt.out.String(), tt.errOut.String())
		}
		if each != nil {
			each()
		}
		time.Sleep(50 * time.Millisecond) // poll interval, not a wait for state
	}
}

// printed waits until the tail prints an event of a run whose id starts
// with prefix, publishing prefix-1, prefix-2 ... to exchange meanwhile.
func (tt *tailTrial) printed(exchange, prefix string) {
	tt.t.Helper()
	i := 0
	tt.waitFor("the tail to print an event published to "+exchange, func() bool { return strings.Contains(tt.out.String(), `"run_id":"`+prefix+`-`) },
		func() { i++; tt.publish(exchange, fmt.Sprintf("%s-%d", prefix, i)) })
}

// note waits until the tail's standard error holds text.
func (tt *tailTrial) note(text string) {
	tt.t.Helper()
	tt.waitFor("the note "+text, func() bool { return strings.Contains(tt.errOut.String(), text) }, nil)
}

// stop interrupts the tail and checks it exits 0 with notes only on its
// standard error (no log records, without --log-level).
func (tt *tailTrial) stop() {
	tt.t.Helper()
	tt.cancel()
	if c := <-tt.code; c != 0 {
		tt.t.Fatalf("events tail: exit %d, stderr %q", c, tt.errOut.String())
	}
	if strings.Contains(tt.errOut.String(), `"msg"`) {
		tt.t.Fatalf("events tail's stderr holds log records: %q", tt.errOut.String())
	}
}

// TestEventsTailFollowsTheStreamToAnotherExchange: a running events tail
// follows the stream when another publisher sends it to another exchange
// (the database's setting changes): it says so on standard error and
// prints the events published to the new exchange; a stream turned off is
// noted too. A tail once stayed bound to the exchange it started on and
// went quiet without a word (a trial found it).
func TestEventsTailFollowsTheStreamToAnotherExchange(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	suffix := uuid.NewString()[:8]
	first, second := "flowforge.events.follow-a-"+suffix, "flowforge.events.follow-b-"+suffix
	tt := startTail(t, h, first, second)
	tt.printed(first, "a")
	if err := h.s.EnableStream(h.ctx, second, "another publisher"); err != nil {
		t.Fatal(err)
	}
	tt.note("note: the transition stream now goes to exchange " + second + " (it went to " + first + "); following it (events published there in the 2 s before this note are not shown)")
	tt.publish(second, "b-1")
	tt.waitFor("the event of the second exchange", func() bool { return strings.Contains(tt.out.String(), `"run_id":"b-1"`) }, nil)
	if _, err := h.s.DisableStream(h.ctx, "test"); err != nil {
		t.Fatal(err)
	}
	tt.note("note: the transition stream was turned off")
	tt.stop()
}

// TestEventsTailBindsAgainToItsExchangeDeletedAndDeclaredAgain: the
// stream's exchange deleted on the broker takes the tail's binding with
// it; a publisher declares it again, without the binding. The tail binds
// again at its next look at the setting: after a delete and a declare
// back to back (no note: it cannot tell), and after a delete it saw, which
// it notes, and the exchange's return too. A tail once went quiet for good
// without a word (a new user's trial).
func TestEventsTailBindsAgainToItsExchangeDeletedAndDeclaredAgain(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	exchange := "flowforge.events.rebind-" + uuid.NewString()[:8]
	tt := startTail(t, h, exchange)
	tt.printed(exchange, "a")
	if err := tt.ch.ExchangeDelete(exchange, false, false); err != nil {
		t.Fatal(err)
	}
	tt.printed(exchange, "b") // publish declares it again at once
	if err := tt.ch.ExchangeDelete(exchange, false, false); err != nil {
		t.Fatal(err)
	}
	tt.note("note: exchange " + exchange + " no longer exists on the broker (deleted); nothing is shown until a publisher declares it again")
	if err := tt.ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	tt.note("note: exchange " + exchange + " exists again; following it (events published there in the 2 s before this note are not shown)")
	tt.publish(exchange, "c-1")
	tt.waitFor("the event published after the note", func() bool { return strings.Contains(tt.out.String(), `"run_id":"c-1"`) }, nil)
	if n := strings.Count(tt.errOut.String(), "no longer exists"); n != 1 {
		t.Fatalf("the exchange's deletion noted %d times, want once: %q", n, tt.errOut.String())
	}
	tt.stop()
}
