// Package broker is the only package in FlowForge that speaks AMQP. It
// carries dispatch messages from the outbox publisher to workers through
// durable quorum queues on RabbitMQ: one per handler and a shared one
// (default "flowforge.dispatch").
//
// # Topology
//
// Every Publisher and Consumer declares, on every dial:
//
//   - <Queue>.dead: durable, x-queue-type=quorum (the dead-letter queue);
//   - <Queue>: durable, x-queue-type=quorum, x-dead-letter-exchange="" and
//     x-dead-letter-routing-key=<Queue>.dead, so a rejected message is
//     moved to <Queue>.dead by the broker (the shared queue);
//   - <Queue>.unrouted: a durable fanout exchange, bound to <Queue>;
//   - <Queue>.route: a durable direct exchange with alternate-exchange
//     <Queue>.unrouted.
//
// A Consumer also declares, for each of Config.Handlers whose name is safe
// (HandlerQueue), <Queue>.h.<handler>: durable, quorum, dead-lettering into
// <Queue>.dead like the shared queue, bound to <Queue>.route with the
// handler's name as key; it consumes those queues and the shared queue.
//
// Each queue is first looked up with a passive declare on a throwaway
// channel, then declared with FlowForge's arguments on another throwaway
// channel.
//
// # Routing
//
// PublishBatch sends a message to <Queue>.route with its Message.Handler
// as routing key (RoutingKey): it lands in the handler's queue when a
// worker bound one, else the alternate exchange hands it to the shared
// queue. Publisher confirms cover both (a message routed by the alternate
// exchange is confirmed normally); a message neither routes (the shared
// queue deleted) is returned. A handler without a safe name, and an empty
// one, go to the shared queue by the default exchange. Older publishers
// publish to the shared queue directly, which consumers still consume.
//
// # Behaviour on faults
//
//   - Connection loss. Nothing reconnects inside this package. A Publisher
//     closes Done() and fails PublishBatch with an error wrapping
//     ErrConnectionLost; messages of the interrupted batch that had no
//     confirm are TimedOut (fate unknown) or NotSent, never Confirmed. A
//     Consumer closes Deliveries() and Err() wraps ErrConnectionLost; the
//     broker requeues its unacknowledged deliveries. The caller closes the
//     dead value and dials a new one; Config.Cursor makes the next dial
//     start with the next cluster node.
//   - Return. Publishes are mandatory. A message the broker cannot route
//     (no queue, e.g. the dispatch queue was deleted) comes back as
//     basic.return and is reported Returned even though the broker also
//     acks it: the return always wins. Returns are matched to publishes by a
//     per-publisher sequence number header ("flowforge-publish-seq"), and
//     are drained continuously so they can never stall the connection.
//   - Nack. A basic.nack makes the message Nacked; the batch itself
//     succeeds. Publish Nacked messages again later.
//   - Confirm timeout. A batch whose publishing or confirms take longer
//     than Config.ConfirmTimeout closes the connection and returns an
//     error wrapping ErrTimeout and ErrConnectionLost; PublishBatch never
//     hangs.
//   - Blocked. While the broker blocks the connection because of a memory
//     or disk alarm (connection.blocked), Publisher.Blocked() is true and
//     PublishBatch returns ErrBlocked without publishing (all NotSent).
//   - Consumer cancel. When the broker cancels the consumer (basic.cancel,
//     e.g. the queue was deleted), Deliveries() closes and Err() wraps
//     ErrConsumerCancelled; the channel stays open so deliveries in hand
//     can still be settled. Redialing re-declares the queue. The broker
//     cancelling one queue's consumer (a handler queue deleted) cancels
//     the Consumer's other consumers too, so that it ends as a whole.
//   - Queue mismatch. If a queue exists with other arguments (e.g. a
//     classic queue of the same name), or an exchange with another type or
//     arguments, the broker refuses the declare with 406
//     PRECONDITION_FAILED; DialPublisher and DialConsumer return a
//     *TopologyMismatchError explaining how to migrate. Retrying does not
//     help.
//   - Login refused. A wrong user or password, an unknown vhost or one the
//     user may not use is a refusal (IsLoginRefused), not an outage:
//     CheckLogin, which a daemon runs at start, reports it wrapping
//     ErrLoginRefused with the broker's reply. Retrying does not help.
//
// Deliveries are settled with Delivery.Ack, Requeue (redelivered later with
// Redelivered set) or Reject (dead-lettered to <Queue>.dead).
//
// # Dead letters
//
// Publisher.RedriveDeadLetters takes one pass over <Queue>.dead: the
// dispatches a quorum queue's delivery-limit dead-lettered (RedriveTarget:
// x-death[0] reason delivery_limit in <Queue> or a handler queue) are
// published again to the queue they died in and acked once that copy is
// confirmed; everything else is returned to the head, in its order, with
// one nack when the pass ends (redrive.go).
//
// Ping and QueueDepth open short-lived connections for readiness probes
// and inspection (ffctl outbox status).
package broker
