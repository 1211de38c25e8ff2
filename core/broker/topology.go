package broker

import (
	"errors"
	"fmt"
	"log/slog"

	amqp "github.com/rabbitmq/amqp091-go"
)

// queueSpec is one queue FlowForge declares.
type queueSpec struct {
	name string
	args amqp.Table
	// required describes name's properties for TopologyMismatchError.
	required string
}

// topology returns the queues for dispatch queue queue, dead-letter queue
// first so that it exists before anything can be dead-lettered into it.
func topology(queue string) []queueSpec {
	dead := DeadLetterQueue(queue)
	return []queueSpec{
		{
			name:     dead,
			args:     amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum},
			required: `x-queue-type="quorum"`,
		},
		{
			name: queue,
			args: amqp.Table{
				amqp.QueueTypeArg:           amqp.QueueTypeQuorum,
				"x-dead-letter-exchange":    "",
				"x-dead-letter-routing-key": dead,
			},
			required: fmt.Sprintf(`x-queue-type="quorum", x-dead-letter-exchange="", x-dead-letter-routing-key=%q`, dead),
		},
	}
}

// declareTopology declares the dispatch queue and its dead-letter queue on
// conn, then the routing (declareRouting: the route and unrouted exchanges
// and a queue per handler of handlers, which it returns). For each queue it first checks with a passive declare on a
// throwaway channel whether the queue exists, then declares it (durable,
// quorum, dead-letter arguments) on another throwaway channel. If the
// broker refuses the declare with 406 PRECONDITION_FAILED it returns a
// *TopologyMismatchError. A closed connection yields an error wrapping
// ErrConnectionLost. Publisher and Consumer call it on every dial.
func declareTopology(conn *amqp.Connection, queue string, handlers []string, log *slog.Logger) ([]string, error) {
	for _, q := range topology(queue) {
		existing, exists, err := inspectQueue(conn, q.name)
		if err != nil {
			return nil, fmt.Errorf("declare topology: %w", err)
		}
		if exists {
			log.Debug("broker: queue exists, verifying arguments", "queue", q.name, "messages", existing.Messages, "consumers", existing.Consumers)
		}
		if err := declareQueue(conn, q); err != nil {
			if isAMQPCode(err, amqp.PreconditionFailed) {
				mm := &TopologyMismatchError{Queue: q.name, Required: q.required, Detail: amqpReason(err)}
				return nil, mm
			}
			return nil, fmt.Errorf("declare topology: queue %s: %w", q.name, err)
		}
	}
	return declareRouting(conn, queue, handlers, log)
}

// declareQueue declares q on its own channel, so that a channel exception
// cannot poison the caller's channel.
func declareQueue(conn *amqp.Connection, q queueSpec) error {
	return onChannel(conn, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(q.name, true, false, false, false, q.args)
		return err
	})
}

// inspectQueue passively declares name on a throwaway channel. exists is
// false (and err nil) when the broker answers 404 NOT_FOUND.
func inspectQueue(conn *amqp.Connection, name string) (q amqp.Queue, exists bool, err error) {
	ch, err := conn.Channel()
	if err != nil {
		return q, false, lost(fmt.Errorf("open channel: %w", err))
	}
	q, err = ch.QueueDeclarePassive(name, true, false, false, false, nil)
	if err != nil {
		if isAMQPCode(err, amqp.NotFound) {
			return q, false, nil // the exception closed the channel
		}
		if conn.IsClosed() {
			return q, false, lost(fmt.Errorf("inspect queue %s: %w", name, err))
		}
		return q, false, fmt.Errorf("inspect queue %s: %w", name, err)
	}
	if err := ch.Close(); err != nil {
		return q, true, lost(fmt.Errorf("close channel: %w", err))
	}
	return q, true, nil
}

// amqpReason returns the broker's reply text of an AMQP exception, or the
// error text.
func amqpReason(err error) string {
	if ae, ok := asAMQP(err); ok {
		return ae.Reason
	}
	return err.Error()
}

func asAMQP(err error) (*amqp.Error, bool) {
	var ae *amqp.Error
	if errors.As(err, &ae) {
		return ae, true
	}
	return nil, false
}
