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

// TestEventsTailFollowsTheStreamToAnotherExchange: a running events tail
// follows the stream when another publisher sends it to another exchange
// (the database's setting changes): it says so on standard error and
// prints the events published to the new exchange; a stream turned off is
// noted too. A tail once stayed bound to the exchange it started on and
// went quiet without a word (a trial found it).
func TestEventsTailFollowsTheStreamToAnotherExchange(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	amqpURL := testAMQPURL()
	suffix := uuid.NewString()[:8]
	first, second := "flowforge.events.follow-a-"+suffix, "flowforge.events.follow-b-"+suffix
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
		_ = ch.ExchangeDelete(first, false, false)
		_ = ch.ExchangeDelete(second, false, false)
	})
	publish := func(exchange, run string) {
		t.Helper()
		e := core.TransitionEvent{EventID: run, Seq: 1, RunID: run, Workflow: "follow", Kind: core.TransitionRun, To: "RUNNING", At: time.Now().UTC()}
		body, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if err := ch.PublishWithContext(h.ctx, exchange, e.RoutingKey(), false, false, amqp.Publishing{Body: body}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(h.ctx, 60*time.Second)
	defer cancel()
	var out, errOut logtest.Buffer
	code := make(chan int, 1)
	go func() {
		code <- cli.Run(ctx, []string{"ffctl", "--database-url", h.url, "--amqp-url", amqpURL, "events", "tail", "-o", "json"},
			nil, strings.NewReader(""), &out, &errOut)
	}()
	// until the tail is bound: an event on the first exchange comes through
	waitFor := func(what string, cond func() bool, each func()) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("gave up waiting for %s; stdout %q, stderr %q", what, out.String(), errOut.String())
			}
			if each != nil {
				each()
			}
			time.Sleep(50 * time.Millisecond) // poll interval, not a wait for state
		}
	}
	i := 0
	waitFor("the tail to print an event of the first exchange", func() bool { return strings.Contains(out.String(), `"run_id":"a-`) },
		func() { i++; publish(first, fmt.Sprintf("a-%d", i)) })
	if err := h.s.EnableStream(h.ctx, second, "another publisher"); err != nil {
		t.Fatal(err)
	}
	waitFor("the note of the new exchange", func() bool {
		return strings.Contains(errOut.String(), "note: the transition stream now goes to exchange "+second+" (it went to "+first+"); following it (events published there in the 2 s before this note are not shown)")
	}, nil)
	publish(second, "b-1")
	waitFor("the event of the second exchange", func() bool { return strings.Contains(out.String(), `"run_id":"b-1"`) }, nil)
	if _, err := h.s.DisableStream(h.ctx, "test"); err != nil {
		t.Fatal(err)
	}
	waitFor("the note of the stream turned off", func() bool {
		return strings.Contains(errOut.String(), "note: the transition stream was turned off")
	}, nil)
	cancel()
	if c := <-code; c != 0 {
		t.Fatalf("events tail: exit %d, stderr %q", c, errOut.String())
	}
	// Without --log-level its standard error holds its notes only, not
	// the broker's records of connecting.
	if strings.Contains(errOut.String(), `"msg"`) {
		t.Fatalf("events tail's stderr holds log records: %q", errOut.String())
	}
}
