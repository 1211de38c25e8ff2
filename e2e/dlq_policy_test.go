package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/e2e/harness"
)

// Mode 41: the dead-letter queue is bounded.

// TestDeadLetterPolicyBoundsTheQueueAndCountsDrops, on a private node: the
// dead-letter policy that ffctl broker policy prints is applied with
// rabbitmqctl, and a worker still starts (a policy, unlike new queue
// arguments, is no 406 at the topology check). Then limit+extra garbage
// messages reach the dispatch queue; the worker dead-letters each as
// poison; the dead-letter queue holds exactly limit (the oldest dropped),
// the broker counts the extra drops (messages_dead_lettered_maxlen with the
// dead-letter strategy disabled), and the worker exports the depth as
// flowforge_dead_letter_queue_messages. Last, with a short message-ttl,
// dead letters expire and the broker counts the expiries.
func TestDeadLetterPolicyBoundsTheQueueAndCountsDrops(t *testing.T) {
	r := harness.StartRabbit(t, harness.RabbitOptions{})
	s := harness.NewStack(t, harness.StackOptions{AMQPURLs: []string{r.URL()}})
	ctx := t.Context()
	queue := s.Queue
	cfg := broker.Config{URLs: []string{r.URL()}, Queue: queue}
	declare := func() {
		t.Helper()
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		c, err := broker.DialConsumer(dctx, cfg, 1, "")
		if err != nil {
			t.Fatalf("declare topology: %v", err)
		}
		c.Close()
	}
	declare() // the topology of a daemon that ran before the policy existed
	const limit, extra = 20, 7
	out, stderr, code := s.CLI(t, "broker", "policy", "-o", "json", "--dlq-max-length", strconv.Itoa(limit))
	if code != 0 {
		t.Fatalf("ffctl broker policy: exit %d: %s", code, stderr)
	}
	var printed struct {
		Vhost  string            `json:"vhost"`
		Policy broker.PolicySpec `json:"policy"`
	}
	if err := json.Unmarshal([]byte(out), &printed); err != nil {
		t.Fatalf("ffctl broker policy -o json: %v\n%s", err, out)
	}
	spec := printed.Policy
	t.Logf("rabbitmqctl %v", spec.RabbitmqctlArgs(printed.Vhost))
	r.Ctl(t, spec.RabbitmqctlArgs(printed.Vhost)...)

	w := s.DaemonWithHealth(t, "worker", "worker")
	addr := w.Health
	w.WaitForLog(t, "worker: started", 60*time.Second)

	conn, err := amqp.Dial(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for i := range limit + extra {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, amqp.Publishing{Body: []byte(fmt.Sprintf("poison %d", i))})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			t.Fatalf("publish %d: confirmed %v err %v", i, ok, err)
		}
	}
	harness.WaitMetric(t, addr, limit+extra, "flowforge_poison_messages_total")
	depth := func(queue string) int {
		c, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		q, err := c.QueueDeclarePassive(broker.DeadLetterQueue(queue), true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return q.Messages
	}
	harness.Eventually(t, 30*time.Second, fmt.Sprintf("the broker to count %d drops", extra), func() (bool, error) {
		return droppedCounters(t, r).maxlen >= extra, nil
	})
	t.Logf("dead-letter queue depth %d (limit %d), broker counters %+v", depth(queue), limit, droppedCounters(t, r))
	if d := depth(queue); d != limit {
		t.Fatalf("dead-letter queue holds %d messages, want its limit %d", d, limit)
	}
	if c := droppedCounters(t, r).maxlen; c != extra {
		t.Fatalf("broker counted %d drops, want %d", c, extra)
	}
	harness.WaitMetric(t, addr, limit, "flowforge_dead_letter_queue_messages")

	// A short message-ttl, on a second queue: a quorum queue computes a
	// message's expiry when it is enqueued, so a new TTL applies to new
	// dead letters only (documented).
	queue2 := queue + "-ttl"
	cfg.Queue = queue2
	declare()
	short, err := broker.DeadLetterPolicy{Queue: queue2, MaxLength: limit, MessageTTL: 200 * time.Millisecond}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	r.Ctl(t, short.RabbitmqctlArgs("/")...)
	const expiring = 5
	for i := range expiring {
		if err := ch.PublishWithContext(ctx, "", broker.DeadLetterQueue(queue2), false, false, amqp.Publishing{Body: []byte(fmt.Sprintf("old %d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	expiredBefore := droppedCounters(t, r).expired
	// Expiry happens at the queue's head when the queue is visited: each
	// poll publishes one more (itself expiring) dead letter.
	harness.Eventually(t, 30*time.Second, "expired dead letters to be dropped and counted", func() (bool, error) {
		if err := ch.PublishWithContext(ctx, "", broker.DeadLetterQueue(queue2), false, false, amqp.Publishing{Body: []byte("nudge")}); err != nil {
			return false, err
		}
		return depth(queue2) <= 1 && droppedCounters(t, r).expired-expiredBefore >= expiring, nil
	})
}

// dlqCounters are the broker's counts of messages dropped, not
// dead-lettered further, from quorum queues (dead_letter_strategy
// disabled).
type dlqCounters struct{ maxlen, expired int }

var counterRE = regexp.MustCompile(`messages_dead_lettered_(maxlen|expired)_total\s*=>\s*(\d+)`)

// droppedCounters reads the broker's global counters for quorum queues
// with dead-lettering disabled (what the prometheus plugin exports as
// rabbitmq_global_messages_dead_lettered_{maxlen,expired}_total).
func droppedCounters(t *testing.T, r *harness.Rabbit) dlqCounters {
	t.Helper()
	out := r.Ctl(t, "eval", `maps:get([{queue_type, rabbit_quorum_queue}, {dead_letter_strategy, disabled}], rabbit_global_counters:overview()).`)
	var c dlqCounters
	for _, m := range counterRE.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[2])
		switch m[1] {
		case "maxlen":
			c.maxlen = n
		case "expired":
			c.expired = n
		}
	}
	return c
}
