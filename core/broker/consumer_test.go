package broker

import (
	"errors"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

func publishOne(t *testing.T, p *Publisher, id string) {
	t.Helper()
	out, err := p.PublishBatch(testCtx(t), []Message{{ID: id, Body: []byte(`{"id":"` + id + `"}`)}})
	if err != nil || out[0] != Confirmed {
		t.Fatalf("publish %s: %v %v", id, out, err)
	}
}

func TestDeliveryRequeueThenReject(t *testing.T) {
	cfg := testConfig(t)
	ctx := testCtx(t)
	p := mustPublisher(t, cfg)
	c := mustConsumer(t, cfg, 1)
	publishOne(t, p, "r1")

	d := recv(t, c)
	if d.MessageID != "r1" || d.Redelivered {
		t.Fatalf("first delivery: id %q redelivered %v", d.MessageID, d.Redelivered)
	}
	if err := d.Requeue(); err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	d = recv(t, c)
	if d.MessageID != "r1" || !d.Redelivered {
		t.Fatalf("after requeue: id %q redelivered %v, want r1 redelivered", d.MessageID, d.Redelivered)
	}
	if d.DeliveryCount < 1 {
		t.Errorf("DeliveryCount = %d, want >= 1", d.DeliveryCount)
	}
	if err := d.Reject(); err != nil {
		t.Fatalf("Reject: %v", err)
	}

	dead := DeadLetterQueue(cfg.Queue)
	eventually(t, "rejected message dead-lettered", depthIs(ctx, cfg, dead, 1))
	eventually(t, "dispatch queue empty", depthIs(ctx, cfg, cfg.Queue, 0))
	adminDo(t, cfg.URLs[0], func(ch *amqp.Channel) error {
		m, ok, err := ch.Get(dead, true)
		if err != nil {
			return err
		}
		if !ok || m.MessageId != "r1" || string(m.Body) != `{"id":"r1"}` {
			t.Errorf("dead-letter queue holds ok=%v id=%q body=%q", ok, m.MessageId, m.Body)
		}
		return nil
	})
}

func TestConsumerQueueDeleted(t *testing.T) {
	cfg := testConfig(t)
	c := mustConsumer(t, cfg, 1)
	adminDo(t, cfg.URLs[0], func(ch *amqp.Channel) error {
		_, err := ch.QueueDelete(cfg.Queue, false, false, false)
		return err
	})
	waitClosed(t, c)
	if err := c.Err(); !errors.Is(err, ErrConsumerCancelled) {
		t.Fatalf("Err() = %v, want ErrConsumerCancelled", err)
	}
}

func TestConsumerCancelKeepsChannelForAcks(t *testing.T) {
	cfg := testConfig(t)
	ctx := testCtx(t)
	p := mustPublisher(t, cfg)
	c := mustConsumer(t, cfg, 1)
	publishOne(t, p, "c1")
	d := recv(t, c)

	if err := c.Cancel(ctx); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	waitClosed(t, c)
	if err := c.Err(); err != nil {
		t.Fatalf("Err() after Cancel = %v, want nil", err)
	}
	if err := d.Ack(); err != nil {
		t.Fatalf("Ack after Cancel: %v", err)
	}
	publishOne(t, p, "c2")
	// c2 stays queued (no consumer) and c1 is gone.
	eventually(t, "only c2 queued", depthIs(ctx, cfg, cfg.Queue, 1))
}

func TestConsumerConnectionLost(t *testing.T) {
	cfg := testConfig(t)
	px, pu := newProxy(t, cfg.URLs[0])
	pcfg := cfg
	pcfg.URLs = []string{pu}
	c := mustConsumer(t, pcfg, 1)
	px.dropAll()
	waitClosed(t, c)
	if err := c.Err(); !errors.Is(err, ErrConnectionLost) {
		t.Fatalf("Err() = %v, want ErrConnectionLost", err)
	}
}

func TestConsumerClose(t *testing.T) {
	cfg := testConfig(t)
	p := mustPublisher(t, cfg)
	c, err := DialConsumer(testCtx(t), cfg, 1, "fftest-consumer")
	if err != nil {
		t.Fatal(err)
	}
	if c.Tag() != "fftest-consumer" {
		t.Errorf("Tag() = %q", c.Tag())
	}
	publishOne(t, p, "x1")
	d := recv(t, c) // left unsettled: Close must requeue it
	for range 2 {
		if err := c.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	waitClosed(t, c)
	if err := c.Err(); err != nil {
		t.Errorf("Err() after Close = %v, want nil", err)
	}
	if err := d.Ack(); !errors.Is(err, ErrConnectionLost) {
		t.Errorf("Ack after Close = %v, want ErrConnectionLost", err)
	}
	if err := c.Cancel(testCtx(t)); !errors.Is(err, ErrConnectionLost) {
		t.Errorf("Cancel after Close = %v, want ErrConnectionLost", err)
	}
	eventually(t, "unsettled delivery requeued", depthIs(testCtx(t), cfg, cfg.Queue, 1))
}

func TestDialConsumerPrefetch(t *testing.T) {
	cfg := Config{URLs: []string{defaultTestURL}}
	for _, n := range []int{0, -1, 70000} {
		if _, err := DialConsumer(testCtx(t), cfg, n, ""); err == nil {
			t.Errorf("prefetch %d: no error", n)
		}
	}
}
