package broker

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Errors returned by this package wrap them with %w, so test
// for them with errors.Is.
var (
	// ErrConnectionLost reports that the AMQP connection or channel is gone
	// (network failure, broker shutdown, channel exception, forced close after
	// a timeout, or use after Close). The Publisher or Consumer that returned
	// it is dead: Close it and dial a new one.
	ErrConnectionLost = errors.New("broker connection lost")

	// ErrBlocked reports that the broker has blocked the publishing
	// connection because of a resource alarm (memory or disk,
	// connection.blocked). Nothing was published; retry after Blocked()
	// turns false.
	ErrBlocked = errors.New("broker connection blocked by resource alarm")

	// ErrTimeout reports that a publish or the wait for publisher confirms
	// exceeded Config.ConfirmTimeout. It always comes together with
	// ErrConnectionLost, because the connection is closed when it happens.
	ErrTimeout = errors.New("broker confirm timeout")

	// ErrConsumerCancelled reports that the broker cancelled the consumer
	// (basic.cancel from the server, e.g. because the queue was deleted).
	ErrConsumerCancelled = errors.New("consumer cancelled by broker")

	// ErrQueueNotFound reports that a queue inspected with a passive declare
	// (QueueDepth) does not exist.
	ErrQueueNotFound = errors.New("queue not found")
)

// TopologyMismatchError reports that a queue FlowForge needs already exists
// on the broker with arguments that differ from the ones FlowForge declares
// (the broker answered queue.declare with 406 PRECONDITION_FAILED). It is
// returned by DialPublisher and DialConsumer; retrying does not help, an
// operator has to migrate the queue. Match it with errors.As.
type TopologyMismatchError struct {
	// Kind is "exchange" when the mismatching object is an exchange (the
	// route or unrouted exchange); empty means a queue.
	Kind string
	// Queue is the name of the mismatching queue (the dispatch queue, its
	// dead-letter queue or a handler's queue) or exchange.
	Queue string
	// Required lists the arguments FlowForge declares the (durable, quorum)
	// queue with, e.g. `x-queue-type="quorum"`.
	Required string
	// Detail is the broker's reply text, e.g. "PRECONDITION_FAILED -
	// inequivalent arg 'x-queue-type' for queue ...".
	Detail string
}

// Error explains the mismatch and how to migrate.
func (e *TopologyMismatchError) Error() string {
	var b strings.Builder
	if e.Kind == "exchange" {
		fmt.Fprintf(&b, "exchange %q exists with a different type or arguments than FlowForge needs: %s", e.Queue, e.Required)
		if e.Detail != "" {
			fmt.Fprintf(&b, "; broker said: %s", e.Detail)
		}
		fmt.Fprintf(&b, "; to migrate: stop all FlowForge daemons, delete the exchange "+
			"(rabbitmqadmin delete exchange name=%s), then restart the daemons so FlowForge re-declares it", e.Queue)
		return b.String()
	}
	fmt.Fprintf(&b, "queue %q exists with different arguments than FlowForge needs: a durable quorum queue with %s", e.Queue, e.Required)
	if e.Detail != "" {
		fmt.Fprintf(&b, "; broker said: %s", e.Detail)
	}
	fmt.Fprintf(&b, "; to migrate: stop all FlowForge daemons, drain or move the queue's messages "+
		"(e.g. with a shovel to a temporary queue), delete the queue (rabbitmqctl delete_queue %s), "+
		"then restart the daemons so FlowForge re-declares it", e.Queue)
	return b.String()
}

// dialError collects the failure of every URL one Dial tried.
type dialError struct {
	errs []error
}

func (e *dialError) Error() string {
	parts := make([]string, len(e.errs))
	for i, err := range e.errs {
		parts[i] = err.Error()
	}
	return fmt.Sprintf("all %d broker urls failed: %s", len(e.errs), strings.Join(parts, "; "))
}

func (e *dialError) Unwrap() []error { return e.errs }
