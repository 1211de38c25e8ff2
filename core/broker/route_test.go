package broker

import (
	"errors"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestHandlerQueueNamesOnlySafeHandlers(t *testing.T) {
	long := strings.Repeat("h", maxQueueNameLen)
	tests := []struct {
		name, queue, handler string
		want                 string // "" when the handler gets no queue
	}{
		{name: "plain", queue: "q", handler: "http", want: "q.h.http"},
		{name: "dots dashes underscores", queue: "q", handler: "a.b-c_d9", want: "q.h.a.b-c_d9"},
		{name: "upper case", queue: "q", handler: "Resize", want: "q.h.Resize"},
		{name: "empty", queue: "q", handler: ""},
		{name: "space", queue: "q", handler: "my handler"},
		{name: "slash", queue: "q", handler: "a/b"},
		{name: "hash (a topic wildcard)", queue: "q", handler: "a#"},
		{name: "leading dot", queue: "q", handler: ".h"},
		{name: "non-ascii", queue: "q", handler: "héllo"},
		{name: "too long", queue: "q", handler: long},
		{name: "just fits", queue: "q", handler: long[:maxQueueNameLen-len("q.h.")], want: "q.h." + long[:maxQueueNameLen-len("q.h.")]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := HandlerQueue(tt.queue, tt.handler)
			if got != tt.want || ok != (tt.want != "") {
				t.Fatalf("HandlerQueue(%q, %q) = %q, %v; want %q", tt.queue, tt.handler, got, ok, tt.want)
			}
			x, key := RoutingKey(tt.queue, tt.handler)
			if ok && (x != RouteExchange(tt.queue) || key != tt.handler) {
				t.Errorf("RoutingKey = %q, %q; want the route exchange and the handler", x, key)
			}
			if !ok && (x != "" || key != tt.queue) {
				t.Errorf("RoutingKey = %q, %q; want the default exchange and the shared queue", x, key)
			}
		})
	}
}

// TestRoutingTopologyIsDeclared: a consumer with handlers declares the
// route exchange (direct, alternate exchange = the unrouted exchange), the
// unrouted exchange (fanout) and a quorum queue per safe handler that
// dead-letters into the shared dead-letter queue; a handler whose name is
// not safe gets no queue.
func TestRoutingTopologyIsDeclared(t *testing.T) {
	cfg := testConfig(t)
	cfg.Handlers = []string{"alpha", "beta", "bad name"}
	mustConsumer(t, cfg, 1)
	u := cfg.URLs[0]
	// Declaring again with exactly FlowForge's arguments succeeds: the
	// broker refuses (406) a redeclare with other arguments or type.
	for _, x := range exchanges(cfg.Queue) {
		adminDo(t, u, func(ch *amqp.Channel) error {
			return ch.ExchangeDeclarePassive(x.name, x.kind, true, false, false, false, nil)
		})
		adminDo(t, u, func(ch *amqp.Channel) error {
			return ch.ExchangeDeclare(x.name, x.kind, true, false, false, false, x.args)
		})
	}
	for _, h := range []string{"alpha", "beta"} {
		name, _ := HandlerQueue(cfg.Queue, h)
		adminDo(t, u, func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclare(name, true, false, false, false, amqp.Table{
				amqp.QueueTypeArg:           amqp.QueueTypeQuorum,
				"x-dead-letter-exchange":    "",
				"x-dead-letter-routing-key": DeadLetterQueue(cfg.Queue),
			})
			return err
		})
	}
	err := adminTry(u, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclarePassive(cfg.Queue+".h.bad name", true, false, false, false, nil)
		return err
	})
	if !isAMQPCode(err, amqp.NotFound) {
		t.Errorf("a queue for the unsafe handler name: passive declare err = %v, want 404", err)
	}
	// The route exchange with another type is a mismatch naming it.
	other := testConfig(t)
	adminDo(t, u, func(ch *amqp.Channel) error {
		return ch.ExchangeDeclare(RouteExchange(other.Queue), amqp.ExchangeFanout, true, false, false, false, nil)
	})
	_, err = DialPublisher(testCtx(t), other)
	var mm *TopologyMismatchError
	if !errors.As(err, &mm) || mm.Kind != "exchange" || mm.Queue != RouteExchange(other.Queue) {
		t.Fatalf("err = %v, want an exchange *TopologyMismatchError for %s", err, RouteExchange(other.Queue))
	}
	if !strings.Contains(err.Error(), "alternate-exchange") || !strings.Contains(err.Error(), "delete exchange") {
		t.Errorf("message lacks what to declare or how to migrate: %v", err)
	}
}

// TestDispatchesGoToTheirHandlersQueue: a dispatch whose handler has a
// bound queue lands there; one whose handler has none (unbound, unsafe or
// empty) falls through the alternate exchange to the shared queue; every
// one is Confirmed, none Returned.
func TestDispatchesGoToTheirHandlersQueue(t *testing.T) {
	cfg := testConfig(t)
	withHandlers := cfg
	withHandlers.Handlers = []string{"alpha"}
	cons := mustConsumer(t, withHandlers, 1)
	if err := cons.Cancel(testCtx(t)); err != nil { // the queues stay, nobody takes from them
		t.Fatal(err)
	}
	p := mustPublisher(t, cfg)
	msgs := []Message{
		{ID: "1", Body: []byte(`{}`), Handler: "alpha"},
		{ID: "2", Body: []byte(`{}`), Handler: "alpha"},
		{ID: "3", Body: []byte(`{}`), Handler: "gamma"}, // no queue bound
		{ID: "4", Body: []byte(`{}`), Handler: "bad name"},
		{ID: "5", Body: []byte(`{}`)},
	}
	out, err := p.PublishBatch(testCtx(t), msgs)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range out {
		if o != Confirmed {
			t.Errorf("message %s: %v, want Confirmed", msgs[i].ID, o)
		}
	}
	alpha, _ := HandlerQueue(cfg.Queue, "alpha")
	ctx := testCtx(t)
	eventually(t, "alpha's queue", depthIs(ctx, cfg, alpha, 2))
	eventually(t, "the shared queue", depthIs(ctx, cfg, cfg.Queue, 3))
}

// TestAConsumerTakesItsHandlerQueuesAndTheSharedQueue: one Deliveries
// channel carries both, and a rejected delivery of a handler queue goes to
// the shared dead-letter queue.
func TestAConsumerTakesItsHandlerQueuesAndTheSharedQueue(t *testing.T) {
	cfg := testConfig(t)
	cfg.Handlers = []string{"alpha", "beta"}
	c := mustConsumer(t, cfg, 2)
	p := mustPublisher(t, cfg)
	out, err := p.PublishBatch(testCtx(t), []Message{
		{ID: "a", Body: []byte(`{}`), Handler: "alpha"},
		{ID: "b", Body: []byte(`{}`), Handler: "beta"},
		{ID: "s", Body: []byte(`{}`), Handler: "gamma"},
	})
	if err != nil || out[0] != Confirmed || out[1] != Confirmed || out[2] != Confirmed {
		t.Fatalf("PublishBatch = %v, %v", out, err)
	}
	got := map[string]Delivery{}
	for range 3 {
		d := recv(t, c)
		got[d.MessageID] = d
	}
	for _, id := range []string{"a", "b", "s"} {
		if _, ok := got[id]; !ok {
			t.Errorf("message %s not received (got %v)", id, len(got))
		}
	}
	if err := got["a"].Reject(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"b", "s"} {
		if err := got[id].Ack(); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the dead-letter queue", depthIs(testCtx(t), cfg, DeadLetterQueue(cfg.Queue), 1))
}

// TestAMessageNoQueueCanTakeIsReturned: with the shared queue deleted, a
// dispatch for a handler without a queue of its own has nowhere to go
// (the alternate exchange routes it nowhere): it is Returned, not
// Confirmed, so its outbox row stays pending.
func TestAMessageNoQueueCanTakeIsReturned(t *testing.T) {
	cfg := testConfig(t)
	p := mustPublisher(t, cfg)
	adminDo(t, cfg.URLs[0], func(ch *amqp.Channel) error {
		_, err := ch.QueueDelete(cfg.Queue, false, false, false)
		return err
	})
	out, err := p.PublishBatch(testCtx(t), []Message{{ID: "1", Body: []byte(`{}`), Handler: "gamma"}})
	if err != nil {
		t.Fatal(err)
	}
	if out[0] != Returned {
		t.Fatalf("outcome %v, want Returned", out[0])
	}
}

// TestDeletingAHandlerQueueEndsTheConsumer: the broker cancels the
// consumer of a deleted handler queue; the whole Consumer ends with
// ErrConsumerCancelled naming that queue, so that the worker re-dials and
// re-declares it.
func TestDeletingAHandlerQueueEndsTheConsumer(t *testing.T) {
	cfg := testConfig(t)
	cfg.Handlers = []string{"alpha"}
	c := mustConsumer(t, cfg, 1)
	alpha, _ := HandlerQueue(cfg.Queue, "alpha")
	adminDo(t, cfg.URLs[0], func(ch *amqp.Channel) error {
		_, err := ch.QueueDelete(alpha, false, false, false)
		return err
	})
	waitClosed(t, c)
	if err := c.Err(); !errors.Is(err, ErrConsumerCancelled) || !strings.Contains(err.Error(), alpha) {
		t.Fatalf("Err() = %v, want ErrConsumerCancelled naming %s", err, alpha)
	}
}
