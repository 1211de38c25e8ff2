package publisher

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/broker/brokertest"
	"github.com/flowforge/flowforge/core/store/storetest"
	"github.com/flowforge/flowforge/daemon/logtest"
	"github.com/flowforge/flowforge/daemon/metrics"
)

// redriveWarning is the start of the warning the publisher logs once per
// process when it re-drives.
const redriveWarning = "publisher: a quorum-queue delivery-limit dead-lettered dispatches"

// putDeadLetter publishes body into queue's dead-letter queue (confirmed),
// dead-lettered from queue for reason, as RabbitMQ's x-death records it.
func putDeadLetter(t *testing.T, ch *amqp.Channel, queue, reason, body string) {
	t.Helper()
	headers := amqp.Table{"x-death": []any{amqp.Table{"reason": reason, "queue": queue, "count": int64(1)}},
		"x-first-death-reason": reason, "x-first-death-queue": queue}
	dc, err := ch.PublishWithDeferredConfirm("", broker.DeadLetterQueue(queue), true, false,
		amqp.Publishing{MessageId: body, Body: []byte(body), Headers: headers})
	if err != nil {
		t.Fatal(err)
	}
	if !dc.Wait() {
		t.Fatalf("dead letter %q nacked", body)
	}
}

// TestThePublisherRedrivesDeliveryLimitDeadLettersCountsThemAndWarnsOnce
// (mode 138): a running publisher sends the dispatches a delivery-limit
// dead-lettered back to their queue within a few intervals, counts them in
// flowforge_dispatches_redriven_total{queue} and warns once however many
// it sends; garbage a worker rejected stays in the dead-letter queue.
func TestThePublisherRedrivesDeliveryLimitDeadLettersCountsThemAndWarnsOnce(t *testing.T) {
	amqpURL := publisherAMQPURL(t)
	st, _ := storetest.New(t)
	queue := brokertest.Queue(t, amqpURL)
	raw := publisherChannel(t, amqpURL)
	if err := raw.Confirm(false); err != nil {
		t.Fatal(err)
	}
	var logs logtest.Buffer
	m := metrics.New()
	p, err := New(Config{Store: st, Broker: broker.Config{URLs: []string{amqpURL}, Queue: queue},
		RedriveInterval: 20 * time.Millisecond, Metrics: m, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = p.Run(ctx)
	}()
	t.Cleanup(func() { stop(); <-done })

	obs := publisherChannel(t, amqpURL)
	depth := func(q string) int {
		info, err := obs.QueueDeclarePassive(q, true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return info.Messages
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 15s", what)
			}
			time.Sleep(20 * time.Millisecond) // poll interval, not a wait for state
		}
	}
	redriven := func() float64 { return testutil.ToFloat64(m.DispatchesRedriven.WithLabelValues(queue)) }

	putDeadLetter(t, raw, queue, "rejected", "garbage")
	putDeadLetter(t, raw, queue, broker.DeathReasonDeliveryLimit, "dispatch 1")
	putDeadLetter(t, raw, queue, broker.DeathReasonDeliveryLimit, "dispatch 2")
	waitFor("two dispatches back in the queue", func() bool { return depth(queue) == 2 })
	putDeadLetter(t, raw, queue, broker.DeathReasonDeliveryLimit, "dispatch 3")
	waitFor("the third back in the queue", func() bool { return depth(queue) == 3 })
	if got := redriven(); got != 3 {
		t.Errorf("flowforge_dispatches_redriven_total{queue=%q} = %v, want 3", queue, got)
	}
	if n := strings.Count(logs.String(), redriveWarning); n != 1 {
		t.Errorf("the delivery-limit warning was logged %d times, want once:\n%s", n, logs.String())
	}
	stop()
	<-done
	if d := depth(broker.DeadLetterQueue(queue)); d != 1 {
		t.Fatalf("the dead-letter queue holds %d messages, want the garbage alone", d)
	}
	d, ok, err := raw.Get(broker.DeadLetterQueue(queue), true)
	if err != nil || !ok || string(d.Body) != "garbage" {
		t.Errorf("the dead-letter queue holds %q (%v, %v), want the garbage as it was", d.Body, ok, err)
	}
}
