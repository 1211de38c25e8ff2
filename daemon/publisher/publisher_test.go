package publisher

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/broker/brokertest"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
	"github.com/flowforge/flowforge/daemon/metrics"
)

// The test speaks AMQP directly only to break the topology under the
// publisher and to observe the broker; the code under test goes through
// core/broker.

func publisherAMQPURL(t testing.TB) string {
	t.Helper()
	return brokertest.URL(t)
}

// testQueueName is a fresh dispatch queue name for a test (fftest. and
// ten hex digits).
func testQueueName() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return "fftest." + hex.EncodeToString(b)
}

// publisherChannel opens a raw channel for the test's own observations.
func publisherChannel(t testing.TB, url string) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// publishOutcomes reads flowforge_publish_total{outcome=...} from m.
func publishOutcomes(t *testing.T, m *metrics.Metrics, outcome string) float64 {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "flowforge_publish_total" {
			continue
		}
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					return mt.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

type outboxRow struct {
	published bool
	attempts  int
	lastError string
}

func readOutboxRow(t *testing.T, db *sql.DB) outboxRow {
	t.Helper()
	var r outboxRow
	var lastErr sql.NullString
	err := db.QueryRowContext(t.Context(), `SELECT published_at IS NOT NULL, publish_attempts, last_error FROM outbox`).Scan(&r.published, &r.attempts, &lastErr)
	if err != nil {
		t.Fatalf("read outbox row: %v", err)
	}
	r.lastError = lastErr.String
	return r
}

// TestAReturnedAndConfirmedPublishStaysPendingThenTheQueueIsRedeclared
// deletes the dispatch queue under a connected publisher (no worker runs to
// re-declare it). RabbitMQ then answers a mandatory publish with a
// basic.return AND a basic.ack; the publisher must treat it as returned
// (the row stays pending, never stamped), then re-dial, which re-declares
// the queue, and publish the row for real.
func TestAReturnedAndConfirmedPublishStaysPendingThenTheQueueIsRedeclared(t *testing.T) {
	amqpURL := publisherAMQPURL(t)
	st, db, _ := storetest.NewWithDB(t)
	ctx := t.Context()

	queue := testQueueName()
	raw := publisherChannel(t, amqpURL)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = broker.DeleteTopology(ctx, broker.Config{URLs: []string{amqpURL}, Queue: queue})
	})

	def, err := core.ParseDefinition([]byte("name: one\ntasks:\n  - {name: a, handler: noop}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.ApplyWorkflow(ctx, def); err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	p, err := New(Config{Store: st, Broker: broker.Config{URLs: []string{amqpURL}, Queue: queue},
		PollInterval: 50 * time.Millisecond, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if p.lanes[0].pub == nil {
		t.Fatal("publisher did not connect at start")
	}
	t.Cleanup(p.closeLanes)

	if _, err := raw.QueueDelete(queue, false, false, false); err != nil {
		t.Fatalf("delete the dispatch queue: %v", err)
	}
	// Precondition: the broker really does both for this publish.
	if err := raw.Confirm(false); err != nil {
		t.Fatal(err)
	}
	returns := raw.NotifyReturn(make(chan amqp.Return, 1))
	dc, err := raw.PublishWithDeferredConfirm("", queue, true, false, amqp.Publishing{Body: []byte("probe")})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-returns:
	case <-time.After(10 * time.Second):
		t.Fatal("the broker did not return a mandatory publish to the deleted queue")
	}
	if acked, err := dc.WaitContext(ctx); err != nil || !acked {
		t.Fatalf("the broker did not also ack the returned publish (acked=%v, err=%v)", acked, err)
	}

	if _, err := st.Trigger(ctx, store.TriggerRequest{Workflow: "one", Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	n, err := p.cycle(ctx, p.lanes[0], p.lanes[0].pub)
	if n != 1 {
		t.Fatalf("cycle took %d rows, want 1", n)
	}
	if err == nil {
		t.Fatal("cycle reported success for a returned message")
	}
	row := readOutboxRow(t, db)
	if row.published || row.attempts != 1 || row.lastError != "returned" {
		t.Fatalf("after the return: %+v, want pending, 1 attempt, last_error \"returned\"", row)
	}
	if got := publishOutcomes(t, m, "returned"); got != 1 {
		t.Fatalf("flowforge_publish_total{outcome=returned} = %v, want 1", got)
	}
	if got := publishOutcomes(t, m, "confirmed"); got != 0 {
		t.Fatalf("flowforge_publish_total{outcome=confirmed} = %v, want 0", got)
	}

	// The loop re-dials, re-declaring the queue, and publishes the row.
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = p.Run(runCtx)
	}()
	t.Cleanup(func() { stop(); <-done })
	deadline := time.Now().Add(20 * time.Second)
	for {
		if row = readOutboxRow(t, db); row.published {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("row never published after the queue was re-declared: %+v", row)
		}
		time.Sleep(25 * time.Millisecond)
	}
	q, err := raw.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("the publisher did not re-declare the dispatch queue: %v", err)
	}
	if q.Messages != 1 {
		t.Fatalf("dispatch queue holds %d messages, want 1", q.Messages)
	}
	if got := publishOutcomes(t, m, "confirmed"); got != 1 {
		t.Fatalf("flowforge_publish_total{outcome=confirmed} = %v, want 1", got)
	}
	if row.attempts < 2 || row.lastError != "" {
		t.Fatalf("published row: %+v, want at least 2 attempts (returned first) and no last_error", row)
	}
}

// publisherFixture is a store with the one-task workflows "small" (task
// "a") and "big" (a task name of core.MaxNameLength bytes, so its dispatch
// message is larger), and a fresh queue on the test broker.
func publisherFixture(t testing.TB) (*store.Store, *sql.DB, string, string) {
	t.Helper()
	amqpURL := publisherAMQPURL(t)
	st, db, _ := storetest.NewWithDB(t)
	queue := testQueueName()
	_ = publisherChannel(t, amqpURL) // checks the broker answers
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = broker.DeleteTopology(ctx, broker.Config{URLs: []string{amqpURL}, Queue: queue})
	})
	for _, src := range []string{
		"name: small\ntasks:\n  - {name: a, handler: noop}\n",
		"name: big\ntasks:\n  - {name: " + strings.Repeat("b", core.MaxNameLength) + ", handler: noop}\n",
	} {
		def, err := core.ParseDefinition([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := st.ApplyWorkflow(t.Context(), def); err != nil {
			t.Fatal(err)
		}
	}
	return st, db, amqpURL, queue
}

// TestAnOversizedRowIsQuarantinedAndTheRestOfItsBatchIsPublished puts a
// row larger than MaxMessageBytes between smaller ones: one cycle
// publishes and stamps the others and quarantines it with its reason,
// counted in the metrics; it is never handed to the broker.
func TestAnOversizedRowIsQuarantinedAndTheRestOfItsBatchIsPublished(t *testing.T) {
	t.Parallel()
	st, db, amqpURL, queue := publisherFixture(t)
	ctx := t.Context()
	for _, wf := range []string{"small", "big", "small", "small"} {
		if _, err := st.Trigger(ctx, store.TriggerRequest{Workflow: wf, Actor: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	var small, big int
	if err := db.QueryRowContext(ctx, `SELECT min(length(payload::text)), max(length(payload::text)) FROM outbox`).Scan(&small, &big); err != nil {
		t.Fatal(err)
	}
	limit := (small + big) / 2
	m := metrics.New()
	p, err := New(Config{Store: st, Broker: broker.Config{URLs: []string{amqpURL}, Queue: queue}, MaxMessageBytes: limit, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil || p.lanes[0].pub == nil {
		t.Fatalf("start: %v (connected %v)", err, p.lanes[0].pub != nil)
	}
	t.Cleanup(p.closeLanes)
	n, err := p.cycle(ctx, p.lanes[0], p.lanes[0].pub)
	if err != nil || n != 4 {
		t.Fatalf("cycle: %d rows, err %v; want 4 rows and no error", n, err)
	}
	var published, quarantined int
	var reason string
	if err := db.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE published_at IS NOT NULL), count(*) FILTER (WHERE quarantined_at IS NOT NULL), coalesce(max(quarantine_reason), '') FROM outbox`).Scan(&published, &quarantined, &reason); err != nil {
		t.Fatal(err)
	}
	if published != 3 || quarantined != 1 {
		t.Fatalf("%d published, %d quarantined; want 3 and 1", published, quarantined)
	}
	want := fmt.Sprintf("message of %d bytes is larger than the max message size of %d bytes", big, limit)
	if !strings.Contains(reason, want) {
		t.Fatalf("quarantine reason %q, want it to contain %q", reason, want)
	}
	if got := testutil.ToFloat64(m.OutboxQuarantinedTotal); got != 1 {
		t.Fatalf("flowforge_outbox_quarantined_total = %v, want 1", got)
	}
	if got := publishOutcomes(t, m, "confirmed"); got != 3 {
		t.Fatalf("confirmed publishes = %v, want 3 (the big row is never sent)", got)
	}
	q, err := publisherChannel(t, amqpURL).QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil || q.Messages != 3 {
		t.Fatalf("dispatch queue: %d messages (err %v), want 3", q.Messages, err)
	}
	// The next cycle finds nothing: the quarantined row does not block.
	if n, err := p.cycle(ctx, p.lanes[0], p.lanes[0].pub); err != nil || n != 0 {
		t.Fatalf("second cycle: %d rows, err %v; want none", n, err)
	}
}

// closeLanes closes the connections Start opened (tests that drive cycles
// themselves, without Run).
func (p *Publisher) closeLanes() {
	for _, l := range p.lanes {
		if pub := l.current(); pub != nil {
			l.dropPub(pub)
		}
	}
}
