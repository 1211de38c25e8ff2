package broker

import (
	"fmt"
)

// Message is one dispatch message to publish.
type Message struct {
	// ID identifies the message end to end: the outbox row id as decimal
	// text. It is sent as the AMQP MessageId property.
	ID string
	// Body is the JSON payload (sent with ContentType application/json).
	Body []byte
	// Handler is the dispatch's handler name: the message is routed to
	// the handler's own queue when one is bound, else to the shared queue
	// (see RoutingKey). Empty: the shared queue.
	Handler string
	// Exchange, when not empty, sends the message to this exchange with
	// routing key Key instead (the transition stream's topic exchange,
	// see Config.EventsExchange), not mandatory: an event no queue is
	// bound to is dropped by the broker and confirmed, as a subscriber
	// model wants. Handler is then ignored.
	Exchange string
	Key      string
}

// Outcome is what became of one message of a PublishBatch. The zero value
// is NotSent, so an outcome nobody set never reads as Confirmed.
type Outcome int

const (
	// NotSent: the message was not handed to the broker (the batch stopped
	// before it: blocked connection, cancelled ctx, connection lost). Safe
	// to publish again.
	NotSent Outcome = iota
	// Confirmed: the broker acknowledged the message (basic.ack) and did not
	// return it, so it is stored in the dispatch queue. The only outcome
	// that allows marking the outbox row as dispatched.
	Confirmed
	// Nacked: the broker refused the message (basic.nack), e.g. the quorum
	// queue could not accept it. Publish it again later.
	Nacked
	// Returned: the broker returned the message as unroutable (basic.return;
	// the dispatch queue does not exist, e.g. it was deleted). A returned
	// message is Returned even if it was acknowledged afterwards.
	Returned
	// TimedOut: the message was published but no confirm arrived before
	// the deadline, ctx ended, or the connection was lost. Its fate is
	// unknown: it may or may not be in the queue, so publishing it again can
	// produce a duplicate (consumers deduplicate by MessageId).
	TimedOut
	// Refused: the message is refused permanently; no retry can cure it
	// (see PermanentRefusal). PublishBatch never reports it itself: the
	// caller, which knows which message the refusal was about, does.
	Refused

	// outcomeCount counts the outcomes above; Outcomes lists them.
	outcomeCount
)

// Outcomes returns every Outcome, in the order of their values (NotSent
// first). The slice is the caller's.
func Outcomes() []Outcome {
	out := make([]Outcome, 0, outcomeCount)
	for o := range outcomeCount {
		out = append(out, o)
	}
	return out
}

// String returns a lowercase name such as "confirmed" or "timed out": the
// label value flowforge_publish_total counts the outcome under.
func (o Outcome) String() string {
	switch o {
	case NotSent:
		return "not sent"
	case Confirmed:
		return "confirmed"
	case Nacked:
		return "nacked"
	case Returned:
		return "returned"
	case TimedOut:
		return "timed out"
	case Refused:
		return "refused"
	default:
		return fmt.Sprintf("outcome(%d)", int(o))
	}
}
