package broker

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestPublishBatchConfirmedAndConsumed(t *testing.T) {
	cfg := testConfig(t)
	ctx := testCtx(t)
	p := mustPublisher(t, cfg)
	c := mustConsumer(t, cfg, 20)

	msgs := make([]Message, 100)
	for i := range msgs {
		id := strconv.Itoa(1000 + i)
		msgs[i] = Message{ID: id, Body: []byte(fmt.Sprintf(`{"row":%s}`, id))}
	}
	out, err := p.PublishBatch(ctx, msgs)
	if err != nil {
		t.Fatalf("PublishBatch: %v", err)
	}
	if len(out) != len(msgs) {
		t.Fatalf("got %d outcomes, want %d", len(out), len(msgs))
	}
	for i, o := range out {
		if o != Confirmed {
			t.Errorf("message %d: outcome %v, want confirmed", i, o)
		}
	}

	want := map[string]string{}
	for _, m := range msgs {
		want[m.ID] = string(m.Body)
	}
	for range msgs {
		d := recv(t, c)
		body, ok := want[d.MessageID]
		if !ok {
			t.Fatalf("unexpected or duplicate delivery %q", d.MessageID)
		}
		if string(d.Body) != body {
			t.Errorf("message %s: body %q, want %q", d.MessageID, d.Body, body)
		}
		if d.ContentType != "application/json" || d.Redelivered {
			t.Errorf("message %s: content type %q redelivered %v", d.MessageID, d.ContentType, d.Redelivered)
		}
		delete(want, d.MessageID)
		if err := d.Ack(); err != nil {
			t.Fatalf("Ack: %v", err)
		}
	}
	eventually(t, "queue drained", depthIs(ctx, cfg, cfg.Queue, 0))
}

// TestPublishBatchReturnWins publishes for real to routing keys without a
// queue: the broker answers basic.return followed by basic.ack, and the
// outcome must be Returned.
func TestPublishBatchReturnWins(t *testing.T) {
	nowhere := "fftest.nowhere." + randHex(t)
	tests := []struct {
		name string
		ids  []string
		keys func(queue string) []string // nil: PublishBatch (key = queue)
		// deleteQueue deletes the dispatch queue after the publisher
		// declared it.
		deleteQueue bool
		want        []Outcome
	}{
		{
			name: "alternating routable and unroutable",
			ids:  []string{"1", "2", "3", "4", "5", "6"},
			keys: func(q string) []string { return []string{q, nowhere, q, nowhere, q, nowhere} },
			want: []Outcome{Confirmed, Returned, Confirmed, Returned, Confirmed, Returned},
		},
		{
			name: "same id routable and unroutable",
			ids:  []string{"42", "42", "42"},
			keys: func(q string) []string { return []string{nowhere, q, nowhere} },
			want: []Outcome{Returned, Confirmed, Returned},
		},
		{
			name:        "dispatch queue deleted under the publisher",
			ids:         []string{"7", "8", "9"},
			deleteQueue: true,
			want:        []Outcome{Returned, Returned, Returned},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t)
			ctx := testCtx(t)
			p := mustPublisher(t, cfg)
			if tt.deleteQueue {
				adminDo(t, cfg.URLs[0], func(ch *amqp.Channel) error {
					_, err := ch.QueueDelete(cfg.Queue, false, false, false)
					return err
				})
			}
			msgs := make([]Message, len(tt.ids))
			for i, id := range tt.ids {
				msgs[i] = Message{ID: id, Body: []byte(`{}`)}
			}
			var (
				out []Outcome
				err error
			)
			if tt.keys != nil {
				out, err = p.publishBatch(ctx, msgs, tt.keys(cfg.Queue))
			} else {
				out, err = p.PublishBatch(ctx, msgs)
			}
			if err != nil {
				t.Fatalf("PublishBatch: %v", err)
			}
			for i := range tt.want {
				if out[i] != tt.want[i] {
					t.Errorf("message %d: outcome %v, want %v", i, out[i], tt.want[i])
				}
			}
			if tt.deleteQueue {
				_, _, err := QueueDepth(ctx, cfg)
				if !errors.Is(err, ErrQueueNotFound) {
					t.Errorf("QueueDepth after delete: %v, want ErrQueueNotFound", err)
				}
				return
			}
			confirmed := 0
			for _, o := range out {
				if o == Confirmed {
					confirmed++
				}
			}
			eventually(t, "only confirmed messages queued", depthIs(ctx, cfg, cfg.Queue, confirmed))
			// The publisher stays usable after returns.
			out, err = p.PublishBatch(ctx, []Message{{ID: "after", Body: []byte(`{}`)}})
			if err != nil || out[0] != Confirmed {
				t.Fatalf("publish after returns: %v %v", out, err)
			}
		})
	}
}

func TestPublishBatchBlocked(t *testing.T) {
	cfg := testConfig(t)
	p := mustPublisher(t, cfg)
	// A real resource alarm would block the shared broker for everyone, so
	// simulate the connection.blocked notification's effect.
	p.blocked.Store(true)
	if !p.Blocked() {
		t.Fatal("Blocked() = false")
	}
	out, err := p.PublishBatch(testCtx(t), []Message{{ID: "1"}, {ID: "2"}})
	if !errors.Is(err, ErrBlocked) {
		t.Fatalf("err = %v, want ErrBlocked", err)
	}
	for i, o := range out {
		if o != NotSent {
			t.Errorf("message %d: outcome %v, want not sent", i, o)
		}
	}
	p.blocked.Store(false)
	out, err = p.PublishBatch(testCtx(t), []Message{{ID: "3", Body: []byte(`{}`)}})
	if err != nil || out[0] != Confirmed {
		t.Fatalf("after unblock: %v %v", out, err)
	}
}

// TestPublishBatchConfirmTimeout freezes the broker->client direction so
// confirms never arrive: PublishBatch must give up after ConfirmTimeout,
// close the connection and report nothing as confirmed.
func TestPublishBatchConfirmTimeout(t *testing.T) {
	cfg := testConfig(t)
	px, pu := newProxy(t, cfg.URLs[0])
	cfg.URLs = []string{pu}
	cfg.ConfirmTimeout = 500 * time.Millisecond
	p := mustPublisher(t, cfg)

	px.frozen.Store(true)
	start := time.Now()
	out, err := p.PublishBatch(testCtx(t), []Message{{ID: "1", Body: []byte(`{}`)}, {ID: "2", Body: []byte(`{}`)}})
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("PublishBatch took %v", elapsed)
	}
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, ErrConnectionLost) {
		t.Fatalf("err = %v, want ErrTimeout and ErrConnectionLost", err)
	}
	for i, o := range out {
		if o != TimedOut {
			t.Errorf("message %d: outcome %v, want timed out", i, o)
		}
	}
	select {
	case <-p.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after timeout")
	}
	if _, err := p.PublishBatch(testCtx(t), []Message{{ID: "3"}}); !errors.Is(err, ErrConnectionLost) {
		t.Errorf("publish on dead publisher: %v, want ErrConnectionLost", err)
	}
}

func TestPermanentRefusalIsA406FromTheBroker(t *testing.T) {
	t.Parallel()
	size := &amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - message size 300 is larger than configured max size 250", Server: true}
	cases := []struct {
		name   string
		err    error
		want   bool
		reason string
	}{
		{"nil", nil, false, ""},
		{"406 from the broker, wrapped", fmt.Errorf("publish batch: %w: %w", ErrConnectionLost, fmt.Errorf("channel closed: %w", size)), true, size.Reason},
		{"406 raised by the client", &amqp.Error{Code: amqp.PreconditionFailed, Reason: "x", Server: false}, false, ""},
		{"404 from the broker", &amqp.Error{Code: amqp.NotFound, Reason: "NOT_FOUND - no queue", Server: true}, false, ""},
		{"connection lost", fmt.Errorf("publish batch: %w", ErrConnectionLost), false, ""},
		{"channel closed", fmt.Errorf("publish batch: %w", amqp.ErrClosed), false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			reason, ok := PermanentRefusal(c.err)
			if ok != c.want || reason != c.reason {
				t.Fatalf("PermanentRefusal(%v) = %q, %v; want %q, %v", c.err, reason, ok, c.reason, c.want)
			}
		})
	}
}
