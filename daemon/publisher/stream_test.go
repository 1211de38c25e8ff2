package publisher

import (
	"bytes"
	"context"
	"database/sql"
	"log/slog"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
	"github.com/flowforge/flowforge/daemon/metrics"
)

// TestAStreamBatchGoesOnlyToTheExchangeItsTransactionReads (mode 122):
// a publisher follows the database's exchange setting, reading it every
// second; a batch it publishes between a change of the setting and its
// next read must not go to the old exchange. The interleaving is forced:
// the publisher's loop has just read X, the test sets Y in the database
// and writes a run's transitions, and the loop's next cycle runs before
// it reads the setting again. Nothing reaches X and the rows stay; the
// next step reads Y and publishes them there. A trial saw a switch of
// exchange split one run's events between the two for 0.4 s, consecutive
// seqs alternating.
func TestAStreamBatchGoesOnlyToTheExchangeItsTransactionReads(t *testing.T) {
	amqpURL := publisherAMQPURL(t)
	st, db, _ := storetest.NewWithDB(t)
	ctx := t.Context()
	queue := testQueueName()
	x, y := queue+".events-x", queue+".events-y"
	cfg := broker.Config{URLs: []string{amqpURL}, Queue: queue}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = broker.DeleteExchange(ctx, cfg, x)
		_ = broker.DeleteExchange(ctx, cfg, y)
		_ = broker.DeleteTopology(ctx, cfg)
	})
	def, err := core.ParseDefinition([]byte("name: one\ntasks:\n  - {name: a, handler: noop}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.ApplyWorkflow(ctx, def); err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{Store: st, Broker: cfg, PollInterval: 50 * time.Millisecond, Metrics: metrics.New(), EventsExchange: x})
	if err != nil {
		t.Fatal(err)
	}
	s := p.stream
	t.Cleanup(func() {
		if s.pub != nil {
			s.pub.Close()
		}
	})
	if _, err := p.streamStep(ctx, s); err != nil {
		t.Fatal(err)
	}
	if s.exchange != x || s.pub == nil {
		t.Fatalf("after the first step: exchange %q, connected %v; want %q, connected", s.exchange, s.pub != nil, x)
	}
	raw := publisherChannel(t, amqpURL)
	onX, err := raw.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.QueueBind(onX.Name, "#", x, false, nil); err != nil {
		t.Fatal(err)
	}

	if err := st.EnableStream(ctx, y, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Trigger(ctx, store.TriggerRequest{Workflow: "one", Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	var rows int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM transition_stream`).Scan(&rows); err != nil || rows == 0 {
		t.Fatalf("stream rows: %d, %v; want the run's", rows, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.mark.Settled == 0 && time.Now().Before(deadline) { // the mark settles in a cycle or two
		if _, err := p.streamCycle(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if n := queueLength(t, raw, onX.Name); n != 0 {
		t.Fatalf("%d events reached %s after the database's setting moved to %s, want none", n, x, y)
	}
	var left int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM transition_stream`).Scan(&left); err != nil || left != rows {
		t.Fatalf("stream rows after the cycles: %d, %v; want the %d unpublished", left, err, rows)
	}
	if _, err := p.streamStep(ctx, s); err != nil {
		t.Fatal(err)
	}
	if s.exchange != y {
		t.Fatalf("the step after: exchange %q, want %q", s.exchange, y)
	}
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM transition_stream`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("stream rows after the step on %s: %d, %v; want every row published", y, left, err)
	}
}

// queueLength reads how many messages the queue holds.
func queueLength(t *testing.T, ch *amqp.Channel, name string) int {
	t.Helper()
	q, err := ch.QueueDeclarePassive(name, false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return q.Messages
}

// countingStore counts the stream batches a publisher takes.
type countingStore struct {
	Store
	batches int
}

func (c *countingStore) LockStream(ctx context.Context, limit int, mark store.StreamMark) (*store.StreamBatch, error) {
	c.batches++
	return c.Store.LockStream(ctx, limit, mark)
}

// TestAPublisherIdlesWithTheStreamOffOnceNothingIsLeft: with the stream
// turned off by another process (`ffctl events off`), a publisher given
// --events-exchange publishes the rows written before, then runs no
// stream batch until its next read of the setting, where it looks once
// more. It ran a batch on every step, with nothing to publish, for as
// long as it ran.
func TestAPublisherIdlesWithTheStreamOffOnceNothingIsLeft(t *testing.T) {
	f := newStreamOffFixture(t)
	real, db, ctx, cfg, x := f.st, f.db, t.Context(), f.cfg, f.x
	st := &countingStore{Store: real}
	var logs bytes.Buffer
	p, err := New(Config{Store: st, Broker: cfg, PollInterval: 50 * time.Millisecond, Metrics: metrics.New(), EventsExchange: x,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), ID: "publisher-ops1-4242-1a2b"})
	if err != nil {
		t.Fatal(err)
	}
	s := p.stream
	t.Cleanup(func() {
		if s.pub != nil {
			s.pub.Close()
		}
	})
	if _, err := p.streamStep(ctx, s); err != nil { // turns the stream on
		t.Fatal(err)
	}
	if on, err := real.StreamSetting(ctx); err != nil || on.EnabledBy != "publisher-ops1-4242-1a2b" {
		t.Fatalf("the stream's setting: %+v, %v; want it turned on by the publisher's id", on, err)
	}
	if _, err := real.Trigger(ctx, store.TriggerRequest{Workflow: "one", Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := real.DisableStream(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	s.settingAt = time.Time{} // the next step reads the setting: off
	st.batches = 0
	left := func() (n int) {
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM transition_stream`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	deadline := time.Now().Add(10 * time.Second)
	for left() > 0 && time.Now().Before(deadline) { // the rows written while on
		if _, err := p.streamStep(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if n := left(); n != 0 {
		t.Fatalf("%d rows written before the stream went off are unpublished, want none", n)
	}
	published := st.batches
	for range 5 {
		if _, err := p.streamStep(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if extra := st.batches - published; extra > 1 {
		t.Fatalf("%d stream batches in 5 steps after the last row went, with the stream off; want at most the one that found nothing", extra)
	}
	before := st.batches
	s.settingAt = time.Now().Add(-2 * streamSettingEvery) // the next read is due: it looks once more
	if _, err := p.streamStep(ctx, s); err != nil {
		t.Fatal(err)
	}
	if st.batches != before+1 {
		t.Fatalf("the step after the next read of the setting ran %d batches, want 1", st.batches-before)
	}
	// The turn off is logged once, with where the rows left still go.
	if n := strings.Count(logs.String(), "the stream is off; events written before it was turned off still go to the exchange it went to"); n != 1 {
		t.Fatalf("the stream turned off was logged %d times, want once:\n%s", n, logs.String())
	}
}

// TestRowsLeftWhenTheStreamGoesOffArePublishedWithoutTheFlag: the rows
// written before `ffctl events off` go to the exchange the stream went to,
// published by a publisher started later without --events-exchange (the
// procedure the docs gave: remove every publisher's flag, then turn the
// stream off). A new user's trial found them left unpublished for good (no
// publisher had the flag), the stream's oldest age rising.
func TestRowsLeftWhenTheStreamGoesOffArePublishedWithoutTheFlag(t *testing.T) {
	f := newStreamOffFixture(t)
	st, db, ctx, cfg, x := f.st, f.db, t.Context(), f.cfg, f.x
	raw := publisherChannel(t, f.amqpURL)
	if err := raw.ExchangeDeclare(x, "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	onX, err := raw.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.QueueBind(onX.Name, "#", x, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.EnableStream(ctx, x, "test"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := st.Trigger(ctx, store.TriggerRequest{Workflow: "one", Actor: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	var rows int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM transition_stream`).Scan(&rows); err != nil || rows != 6 {
		t.Fatalf("stream rows: %d, %v; want the 3 runs' and tasks' creations", rows, err)
	}
	if _, err := st.DisableStream(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{Store: st, Broker: cfg, PollInterval: 50 * time.Millisecond, Metrics: metrics.New()}) // no --events-exchange
	if err != nil {
		t.Fatal(err)
	}
	s := p.stream
	t.Cleanup(func() {
		if s.pub != nil {
			s.pub.Close()
		}
	})
	left := rows
	for deadline := time.Now().Add(10 * time.Second); left > 0 && time.Now().Before(deadline); {
		if _, err := p.streamStep(ctx, s); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM transition_stream`).Scan(&left); err != nil {
			t.Fatal(err)
		}
	}
	if left != 0 || s.exchange != x {
		t.Fatalf("%d of %d rows left unpublished, the loop's exchange %q; want all published to %s", left, rows, s.exchange, x)
	}
	deadline := time.Now().Add(5 * time.Second)
	for queueLength(t, raw, onX.Name) < rows && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := queueLength(t, raw, onX.Name); n != rows {
		t.Fatalf("%d events reached %s, want the %d rows left", n, x, rows)
	}
}

// streamOffFixture is the setup of the stream-off tests: a database with
// the one-task workflow "one" applied, and a broker configuration with a
// dispatch queue and an events exchange (x) of the test's own, deleted
// when it ends.
type streamOffFixture struct {
	st      *store.Store
	db      *sql.DB
	amqpURL string
	cfg     broker.Config
	x       string
}

func newStreamOffFixture(t *testing.T) streamOffFixture {
	t.Helper()
	f := streamOffFixture{amqpURL: publisherAMQPURL(t)}
	f.st, f.db, _ = storetest.NewWithDB(t)
	queue := testQueueName()
	f.x = queue + ".events"
	f.cfg = broker.Config{URLs: []string{f.amqpURL}, Queue: queue}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = broker.DeleteExchange(ctx, f.cfg, f.x)
		_ = broker.DeleteTopology(ctx, f.cfg)
	})
	def, err := core.ParseDefinition([]byte("name: one\ntasks:\n  - {name: a, handler: noop}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.st.ApplyWorkflow(t.Context(), def); err != nil {
		t.Fatal(err)
	}
	return f
}
