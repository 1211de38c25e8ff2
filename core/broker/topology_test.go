package broker

import (
	"context"
	"errors"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestTopologyDeclared(t *testing.T) {
	cfg := testConfig(t)
	mustPublisher(t, cfg)
	// Declaring again with exactly FlowForge's arguments must succeed,
	// proving the queues are durable quorum queues with the DLX arguments.
	for _, q := range topology(cfg.Queue) {
		adminDo(t, cfg.URLs[0], func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclare(q.name, true, false, false, false, q.args)
			return err
		})
	}
	// A second dial over the existing queues is fine too.
	mustConsumer(t, cfg, 1)
}

func TestTopologyMismatch(t *testing.T) {
	dialers := map[string]func(ctx context.Context, cfg Config) error{
		"publisher": func(ctx context.Context, cfg Config) error {
			p, err := DialPublisher(ctx, cfg)
			if err == nil {
				_ = p.Close()
			}
			return err
		},
		"consumer": func(ctx context.Context, cfg Config) error {
			c, err := DialConsumer(ctx, cfg, 1, "")
			if err == nil {
				_ = c.Close()
			}
			return err
		},
	}
	tests := []struct {
		name string
		// existing declares the conflicting queue and returns its name.
		existing func(ch *amqp.Channel, queue string) (string, error)
	}{
		{
			name: "classic dispatch queue",
			existing: func(ch *amqp.Channel, q string) (string, error) {
				_, err := ch.QueueDeclare(q, true, false, false, false, nil)
				return q, err
			},
		},
		{
			name: "classic dead-letter queue",
			existing: func(ch *amqp.Channel, q string) (string, error) {
				_, err := ch.QueueDeclare(DeadLetterQueue(q), true, false, false, false, nil)
				return DeadLetterQueue(q), err
			},
		},
		{
			name: "quorum dispatch queue without dead-letter arguments",
			existing: func(ch *amqp.Channel, q string) (string, error) {
				_, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum})
				return q, err
			},
		},
	}
	for _, tt := range tests {
		for dname, dialFn := range dialers {
			t.Run(tt.name+"/"+dname, func(t *testing.T) {
				cfg := testConfig(t)
				var conflicting string
				adminDo(t, cfg.URLs[0], func(ch *amqp.Channel) (err error) {
					conflicting, err = tt.existing(ch, cfg.Queue)
					return err
				})
				err := dialFn(testCtx(t), cfg)
				var mm *TopologyMismatchError
				if !errors.As(err, &mm) {
					t.Fatalf("err = %v, want *TopologyMismatchError", err)
				}
				if mm.Queue != conflicting {
					t.Errorf("Queue = %q, want %q", mm.Queue, conflicting)
				}
				msg := err.Error()
				for _, want := range []string{conflicting, "quorum", "delete", "rabbitmqctl delete_queue", "x-queue-type"} {
					if !strings.Contains(msg, want) {
						t.Errorf("message lacks %q: %s", want, msg)
					}
				}
				if strings.HasPrefix(msg, "PRECONDITION_FAILED") || strings.HasPrefix(msg, "Exception") {
					t.Errorf("bare broker error: %s", msg)
				}
			})
		}
	}
}
