package broker

import (
	"fmt"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// death is an x-death header of one entry, as RabbitMQ writes it.
func death(reason, queue string) amqp.Table {
	return amqp.Table{"x-death": []any{amqp.Table{"reason": reason, "queue": queue, "count": int64(1), "exchange": "", "routing-keys": []any{queue}}},
		"x-first-death-reason": reason, "x-first-death-queue": queue}
}

// TestRedriveTargetRedrivesOnlyDeliveryLimitDeathsOfItsDispatchQueues:
// the re-driver's decision (mode 138) from a dead letter's headers. Only a
// most recent death by delivery_limit in the queue or one of its handler
// queues is re-driven, to that queue; garbage the worker rejected, expired
// messages, other queues' dead letters and messages without x-death stay.
func TestRedriveTargetRedrivesOnlyDeliveryLimitDeathsOfItsDispatchQueues(t *testing.T) {
	t.Parallel()
	const q = "ff.dispatch"
	twice := func(first, second amqp.Table) amqp.Table {
		return amqp.Table{"x-death": []any{first["x-death"].([]any)[0], second["x-death"].([]any)[0]}}
	}
	for _, c := range []struct {
		name    string
		headers amqp.Table
		want    string
	}{
		{"delivery limit in the shared queue", death(DeathReasonDeliveryLimit, q), q},
		{"delivery limit in a handler's queue", death(DeathReasonDeliveryLimit, q+".h.noop"), q + ".h.noop"},
		{"an entry as a plain map", amqp.Table{"x-death": []any{map[string]any{"reason": "delivery_limit", "queue": q}}}, q},
		{"garbage the worker rejected", death("rejected", q), ""},
		{"garbage rejected in a handler's queue", death("rejected", q+".h.noop"), ""},
		{"expired", death("expired", q), ""},
		{"over a max-length", death("maxlen", q), ""},
		{"delivery limit in another queue", death(DeathReasonDeliveryLimit, "other"), ""},
		{"delivery limit in a queue that only starts with the name", death(DeathReasonDeliveryLimit, q+"x"), ""},
		{"delivery limit in a handler queue without a handler", death(DeathReasonDeliveryLimit, q+".h."), ""},
		{"delivery limit in the dead-letter queue itself", death(DeathReasonDeliveryLimit, q+".dead"), ""},
		{"rejected last, after a delivery limit", twice(death("rejected", q), death(DeathReasonDeliveryLimit, q)), ""},
		{"delivery limit last, after a rejection", twice(death(DeathReasonDeliveryLimit, q), death("rejected", q)), q},
		{"only x-first-death-reason", amqp.Table{"x-first-death-reason": "delivery_limit", "x-first-death-queue": q}, ""},
		{"no headers", nil, ""},
		{"an empty x-death", amqp.Table{"x-death": []any{}}, ""},
		{"x-death not an array", amqp.Table{"x-death": "delivery_limit"}, ""},
		{"an entry not a table", amqp.Table{"x-death": []any{"delivery_limit"}}, ""},
	} {
		got, ok := RedriveTarget(q, c.headers)
		if ok != (c.want != "") || got != c.want {
			t.Errorf("%s: RedriveTarget = %q, %v; want %q, %v", c.name, got, ok, c.want, c.want != "")
		}
	}
}

// deadLetter is a message put into the dead-letter queue by a test.
type deadLetter struct {
	body    string
	headers amqp.Table
}

// putDeadLetters publishes letters into queue's dead-letter queue, in order,
// each confirmed.
func putDeadLetters(t *testing.T, cfg Config, letters []deadLetter) {
	t.Helper()
	adminDo(t, cfg.URLs[0], func(ch *amqp.Channel) error {
		if err := ch.Confirm(false); err != nil {
			return err
		}
		for i, l := range letters {
			dc, err := ch.PublishWithDeferredConfirm("", DeadLetterQueue(cfg.Queue), true, false,
				amqp.Publishing{MessageId: fmt.Sprint(i + 1), Body: []byte(l.body), Headers: l.headers})
			if err != nil {
				return err
			}
			if !dc.Wait() {
				return fmt.Errorf("dead letter %d nacked", i)
			}
		}
		return nil
	})
}

// getAll takes every message of queue (basic.get, then closes the channel)
// and returns their bodies in order.
func getAll(t *testing.T, cfg Config, queue string) []string {
	t.Helper()
	var bodies []string
	adminDo(t, cfg.URLs[0], func(ch *amqp.Channel) error {
		for {
			d, ok, err := ch.Get(queue, true)
			if err != nil || !ok {
				return err
			}
			bodies = append(bodies, string(d.Body))
		}
	})
	return bodies
}

// TestARedrivePassSendsDeliveryLimitDeadLettersBackAndKeepsTheRestInOrder:
// a pass over a dead-letter queue mixing garbage, a message put there by
// hand and dispatches a delivery-limit dead-lettered re-drives each of
// those to the queue it died in (one whose handler queue is gone to the
// shared queue), and leaves the others where they were, in their order,
// bodies and headers intact; a second pass changes nothing.
func TestARedrivePassSendsDeliveryLimitDeadLettersBackAndKeepsTheRestInOrder(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	p := mustPublisher(t, cfg)
	q, alpha := cfg.Queue, cfg.Queue+".h.alpha"
	adminDo(t, cfg.URLs[0], func(ch *amqp.Channel) error {
		s := handlerQueueSpec(q, alpha)
		_, err := ch.QueueDeclare(s.name, true, false, false, false, s.args)
		return err
	})
	putDeadLetters(t, cfg, []deadLetter{
		{"garbage 1", death("rejected", q)},
		{"dispatch 1", death(DeathReasonDeliveryLimit, alpha)},
		{"by hand", nil},
		{"dispatch 2", death(DeathReasonDeliveryLimit, q)},
		{"garbage 2", death("rejected", alpha)},
		{"dispatch 3", death(DeathReasonDeliveryLimit, q+".h.gone")},
	})
	ctx := testCtx(t)
	pass, err := p.RedriveDeadLetters(ctx, 100)
	if err != nil {
		t.Fatalf("RedriveDeadLetters: %v", err)
	}
	if pass.Kept != 3 || pass.Redriven[q] != 2 || pass.Redriven[alpha] != 1 || len(pass.Redriven) != 2 {
		t.Fatalf("pass = %+v, want 3 kept, 2 re-driven to %s and 1 to %s", pass, q, alpha)
	}
	again, err := p.RedriveDeadLetters(ctx, 100)
	if err != nil || again.Kept != 3 || len(again.Redriven) != 0 {
		t.Fatalf("second pass = %+v, %v; want 3 kept, nothing re-driven", again, err)
	}
	var kept []amqp.Delivery
	adminDo(t, cfg.URLs[0], func(ch *amqp.Channel) error {
		for {
			d, ok, err := ch.Get(DeadLetterQueue(q), true)
			if err != nil || !ok {
				return err
			}
			kept = append(kept, d)
		}
	})
	want := []string{"garbage 1", "by hand", "garbage 2"}
	if len(kept) != len(want) {
		t.Fatalf("the dead-letter queue holds %d messages, want %v", len(kept), want)
	}
	for i, d := range kept {
		reason, _ := d.Headers["x-first-death-reason"].(string)
		if string(d.Body) != want[i] || (i != 1 && reason != "rejected") {
			t.Errorf("dead letter %d: %q (x-first-death-reason %q), want %q as it was", i, d.Body, reason, want[i])
		}
	}
	if got := getAll(t, cfg, alpha); len(got) != 1 || got[0] != "dispatch 1" {
		t.Errorf("%s holds %q, want [dispatch 1]", alpha, got)
	}
	if got := getAll(t, cfg, q); len(got) != 2 || got[0] != "dispatch 2" || got[1] != "dispatch 3" {
		t.Errorf("%s holds %q, want [dispatch 2, dispatch 3]", q, got)
	}
}

// TestADeadLetterIsAckedOnlyOnceItsCopyIsConfirmed: with the queue a
// dispatch died in gone (the broker returns its copy), the dead letter
// stays in the dead-letter queue: it is acked only after a confirmed copy.
func TestADeadLetterIsAckedOnlyOnceItsCopyIsConfirmed(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	p := mustPublisher(t, cfg)
	putDeadLetters(t, cfg, []deadLetter{{"dispatch", death(DeathReasonDeliveryLimit, cfg.Queue)}})
	adminDo(t, cfg.URLs[0], func(ch *amqp.Channel) error {
		_, err := ch.QueueDelete(cfg.Queue, false, false, false)
		return err
	})
	pass, err := p.RedriveDeadLetters(testCtx(t), 100)
	if err != nil {
		t.Fatalf("RedriveDeadLetters: %v", err)
	}
	if pass.Kept != 1 || pass.Failed != 1 || len(pass.Redriven) != 0 {
		t.Errorf("pass = %+v, want the one dead letter kept", pass)
	}
	if got := getAll(t, cfg, DeadLetterQueue(cfg.Queue)); len(got) != 1 || got[0] != "dispatch" {
		t.Errorf("the dead-letter queue holds %q, want [dispatch]", got)
	}
}
