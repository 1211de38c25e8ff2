package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Message is one dispatch message to publish.
type Message struct {
	// ID identifies the message end to end: the outbox row id as decimal
	// text. It is sent as the AMQP MessageId property.
	ID string
	// Body is the JSON payload (sent with ContentType application/json).
	Body []byte
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

// Publisher publishes dispatch messages with publisher confirms on one AMQP
// connection and channel. It does not reconnect: when Done is closed (or a
// call returns an error wrapping ErrConnectionLost) Close it and dial a new
// one. Its methods are safe for concurrent use; PublishBatch calls are
// serialized.
type Publisher struct {
	cfg  Config
	log  *slog.Logger
	conn *amqp.Connection
	ch   *amqp.Channel

	pubMu sync.Mutex // serializes PublishBatch
	seq   uint64     // last seqHeader value used; guarded by pubMu

	returns *returnTracker
	blocked atomic.Bool
	closing atomic.Bool

	done     chan struct{} // closed when the connection or channel closed
	reasonMu sync.Mutex
	reason   error // why done closed; guarded by reasonMu

	closeOnce sync.Once
	closeErr  error
	wg        sync.WaitGroup // watch and returns.run
}

// DialPublisher connects to the first reachable URL of cfg.URLs, declares
// the topology (dispatch queue and dead-letter queue, see package doc),
// opens a channel in confirm mode and registers return, blocked and close
// listeners. It honours ctx for the whole setup. Errors: invalid cfg, every
// URL failing (the error names each URL, password redacted, and wraps each
// failure), ctx ending (wraps ctx.Err()), and *TopologyMismatchError when a
// queue exists with other arguments.
func DialPublisher(ctx context.Context, cfg Config) (*Publisher, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("dial publisher: %w", err)
	}
	conn, err := dial(ctx, cfg, "publisher")
	if err != nil {
		return nil, fmt.Errorf("dial publisher: %w", err)
	}
	p, err := setupPublisher(ctx, cfg, conn)
	if err != nil {
		_ = conn.CloseDeadline(time.Now().Add(cfg.DialTimeout))
		var mm *TopologyMismatchError
		if errors.As(err, &mm) {
			return nil, err
		}
		return nil, fmt.Errorf("dial publisher: %w", err)
	}
	return p, nil
}

func setupPublisher(ctx context.Context, cfg Config, conn *amqp.Connection) (*Publisher, error) {
	// The AMQP calls below take no ctx; closing the connection aborts them.
	stop := context.AfterFunc(ctx, func() { _ = conn.CloseDeadline(time.Now()) })
	connClose := conn.NotifyClose(make(chan *amqp.Error, 1))
	blocks := conn.NotifyBlocked(make(chan amqp.Blocking, 8))
	err := declareTopology(conn, cfg.Queue, cfg.Logger)
	var ch *amqp.Channel
	if err == nil {
		ch, err = conn.Channel()
		if err != nil {
			err = lost(fmt.Errorf("open channel: %w", err))
		}
	}
	if err == nil {
		if err = ch.Confirm(false); err != nil {
			err = fmt.Errorf("enable confirms: %w", err)
		}
	}
	if !stop() {
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, err
	}
	p := &Publisher{
		cfg:     cfg,
		log:     cfg.Logger.With("queue", cfg.Queue),
		conn:    conn,
		ch:      ch,
		returns: newReturnTracker(ch.NotifyReturn(make(chan amqp.Return, returnsBuffer))),
		done:    make(chan struct{}),
	}
	chClose := ch.NotifyClose(make(chan *amqp.Error, 1))
	p.wg.Add(2)
	go func() {
		defer p.wg.Done()
		p.returns.run()
	}()
	go p.watch(connClose, chClose, blocks)
	return p, nil
}

// watch tracks blocked/unblocked and close notifications until the
// connection is closed.
func (p *Publisher) watch(connClose, chClose <-chan *amqp.Error, blocks <-chan amqp.Blocking) {
	defer p.wg.Done()
	for connClose != nil || chClose != nil || blocks != nil {
		select {
		case b, ok := <-blocks:
			if !ok {
				blocks = nil
				continue
			}
			p.blocked.Store(b.Active)
			if b.Active {
				p.log.Warn("broker: blocked publishing connection (resource alarm)", "reason", b.Reason)
			} else {
				p.log.Info("broker: unblocked publishing connection")
			}
		case e, ok := <-connClose:
			if !ok {
				connClose = nil
				p.markDone(errors.New("connection closed"))
				continue
			}
			p.markDone(fmt.Errorf("connection closed: %w", e))
		case e, ok := <-chClose:
			if !ok {
				chClose = nil
				p.markDone(errors.New("channel closed"))
				continue
			}
			p.markDone(fmt.Errorf("channel closed: %w", e))
		}
	}
	p.markDone(errors.New("connection closed"))
}

// markDone records why the publisher died (first reason wins) and closes
// done.
func (p *Publisher) markDone(reason error) {
	p.reasonMu.Lock()
	defer p.reasonMu.Unlock()
	if p.reason != nil {
		return
	}
	p.reason = reason
	close(p.done)
	if p.closing.Load() {
		p.log.Debug("broker: publisher closed")
	} else {
		p.log.Warn("broker: publisher connection lost", "error", reason)
	}
}

// deadErr is the error for using a dead publisher.
func (p *Publisher) deadErr() error {
	p.reasonMu.Lock()
	defer p.reasonMu.Unlock()
	if p.closing.Load() {
		return fmt.Errorf("%w: publisher closed", ErrConnectionLost)
	}
	return lost(p.reason)
}

// Blocked reports whether the broker currently blocks this connection
// because of a resource alarm (between connection.blocked and
// connection.unblocked). While it is true PublishBatch returns ErrBlocked
// without publishing.
func (p *Publisher) Blocked() bool { return p.blocked.Load() }

// Done returns a channel that is closed when the publisher's connection or
// channel has closed, for any reason including Close. After that every
// PublishBatch fails with ErrConnectionLost; Close the publisher and dial a
// new one.
func (p *Publisher) Done() <-chan struct{} { return p.done }

// Close closes the connection (waiting at most Config.DialTimeout for the
// broker's close-ok) and stops the publisher's goroutines. It is idempotent
// and safe to call concurrently with PublishBatch, which then fails with
// ErrConnectionLost. Unconfirmed messages of an interrupted batch are
// reported TimedOut.
func (p *Publisher) Close() error {
	p.closeOnce.Do(func() {
		p.closing.Store(true)
		err := p.conn.CloseDeadline(time.Now().Add(p.cfg.DialTimeout))
		if err != nil && !errors.Is(err, amqp.ErrClosed) {
			p.closeErr = fmt.Errorf("close publisher: %w", err)
		}
		close(p.returns.stop)
		p.wg.Wait()
	})
	return p.closeErr
}

// abort force-closes the connection after a timeout or a stuck write. The
// socket deadline unblocks a write the broker stopped reading.
func (p *Publisher) abort() {
	_ = p.conn.CloseDeadline(time.Now().Add(time.Second))
}

// PublishBatch publishes msgs to the dispatch queue (default exchange,
// routing key Config.Queue, persistent, mandatory, ContentType
// application/json, MessageId = ID) and waits for all publisher confirms,
// bounded by ctx and Config.ConfirmTimeout.
//
// The returned outcomes are aligned with msgs and always have len(msgs)
// entries, also when err is non-nil. Nacked and Returned are per-message
// results, not errors. Errors:
//   - ErrBlocked: the connection is blocked by a resource alarm (checked
//     before each message); the rest of the batch is NotSent.
//   - ErrTimeout together with ErrConnectionLost: publishing or confirming
//     took longer than ConfirmTimeout; the connection has been closed and
//     unconfirmed messages are TimedOut.
//   - ErrConnectionLost: the connection or channel closed; unconfirmed
//     messages are TimedOut or NotSent, never Confirmed.
//   - ctx.Err(): ctx ended. While confirms are awaited the connection is
//     kept and pending messages are TimedOut; if ctx ends while messages are
//     still being written the connection is closed (a write the broker does
//     not read can only be interrupted that way) and the error also wraps
//     ErrConnectionLost.
func (p *Publisher) PublishBatch(ctx context.Context, msgs []Message) ([]Outcome, error) {
	return p.publishBatch(ctx, msgs, nil)
}

// publishBatch implements PublishBatch. keys, if not nil, overrides the
// routing key per message (tests use it to publish unroutable messages).
func (p *Publisher) publishBatch(ctx context.Context, msgs []Message, keys []string) ([]Outcome, error) {
	out := make([]Outcome, len(msgs))
	if len(msgs) == 0 {
		return out, nil
	}
	p.pubMu.Lock()
	defer p.pubMu.Unlock()

	if err := p.canPublish(ctx); err != nil {
		return out, fmt.Errorf("publish batch: %w", err)
	}

	wctx, cancel := context.WithTimeout(ctx, p.cfg.ConfirmTimeout)
	defer cancel()
	// Watchdog for the publish phase: when the broker stops reading (alarm,
	// flow control, dead peer) a write blocks in the kernel and only closing
	// the socket frees it.
	aborted := make(chan struct{})
	stopWatchdog := context.AfterFunc(wctx, func() {
		defer close(aborted)
		p.abort()
	})

	seqs, dcs, pubErr := p.publishAll(wctx, msgs, keys, out)

	watchdogFired := !stopWatchdog()
	if watchdogFired {
		<-aborted
	} else {
		p.awaitConfirms(wctx, dcs)
	}

	// Decide outcomes: confirms first, then returns, which win.
	pending := p.confirmOutcomes(dcs, out)
	p.returnOutcomes(msgs, seqs, out)

	return out, p.batchErr(ctx, wctx, watchdogFired, pubErr, pending, len(msgs))
}

// canPublish says why a batch cannot start: the publisher is dead (its
// deadErr), the connection is blocked (ErrBlocked) or ctx ended (ctx.Err()).
func (p *Publisher) canPublish(ctx context.Context) error {
	select {
	case <-p.done:
		return p.deadErr()
	default:
	}
	if p.blocked.Load() {
		return ErrBlocked
	}
	return ctx.Err()
}

// publishAll publishes msgs in order until one fails, the connection is
// blocked or wctx ends, marking each published message TimedOut in out
// until a confirm says otherwise. It returns, aligned with msgs, each
// published message's sequence number (seqHeader) and deferred confirm
// (zero and nil for the messages not sent), and why it stopped early
// (ErrBlocked, the publish error, or nil).
func (p *Publisher) publishAll(wctx context.Context, msgs []Message, keys []string, out []Outcome) ([]uint64, []*amqp.DeferredConfirmation, error) {
	seqs := make([]uint64, len(msgs))
	dcs := make([]*amqp.DeferredConfirmation, len(msgs))
	for i, m := range msgs {
		if p.blocked.Load() {
			return seqs, dcs, ErrBlocked
		}
		if wctx.Err() != nil {
			break
		}
		key := p.cfg.Queue
		if keys != nil {
			key = keys[i]
		}
		p.seq++
		dc, err := p.ch.PublishWithDeferredConfirm("", key, true, false, amqp.Publishing{
			Headers:      amqp.Table{seqHeader: int64(p.seq)},
			ContentType:  "application/json",
			DeliveryMode: amqp.Persistent,
			MessageId:    m.ID,
			Timestamp:    time.Now().UTC(),
			Body:         m.Body,
		})
		if err != nil {
			return seqs, dcs, err
		}
		seqs[i], dcs[i] = p.seq, dc
		out[i] = TimedOut // until a confirm says otherwise
	}
	return seqs, dcs, nil
}

// confirmOutcomes sets out[i] from each resolved confirmation dcs[i]
// (Confirmed, Nacked, or TimedOut when a closing channel resolved it) and
// returns how many published messages are still TimedOut.
func (p *Publisher) confirmOutcomes(dcs []*amqp.DeferredConfirmation, out []Outcome) int {
	pending := 0
	for i, dc := range dcs {
		if dc == nil {
			continue
		}
		select {
		case <-dc.Done():
			if dc.Acked() {
				out[i] = Confirmed
			} else if p.ch.IsClosed() || p.conn.IsClosed() {
				// amqp091 resolves pending confirms as nacks when the channel
				// closes: the real fate is unknown.
				out[i] = TimedOut
			} else {
				out[i] = Nacked
			}
		default:
		}
		if out[i] == TimedOut {
			pending++
		}
	}
	return pending
}

// returnOutcomes marks Returned, whatever its confirm said, each published
// message (seqs[i] != 0) that the broker returned, and logs how many.
func (p *Publisher) returnOutcomes(msgs []Message, seqs []uint64, out []Outcome) {
	returned := p.returns.flush()
	nReturned := 0
	for i, seq := range seqs {
		if seq != 0 && returned.has(seq, msgs[i].ID) {
			out[i] = Returned
			nReturned++
		}
	}
	if nReturned > 0 {
		p.log.Warn("broker: returned unroutable messages", "returned", nReturned, "batch", len(msgs))
	}
}

// awaitConfirms waits until every non-nil confirmation is resolved or wctx
// ends.
func (p *Publisher) awaitConfirms(wctx context.Context, dcs []*amqp.DeferredConfirmation) {
	for _, dc := range dcs {
		if dc == nil {
			continue
		}
		select {
		case <-dc.Done():
		case <-wctx.Done():
			return
		}
	}
}

// batchErr builds the error of a batch: nil when every published message
// got a definite answer (Confirmed, Nacked or Returned) and nothing stopped
// the batch early.
func (p *Publisher) batchErr(ctx, wctx context.Context, watchdogFired bool, pubErr error, pending, total int) error {
	ctxErr := ctx.Err()
	if watchdogFired {
		if ctxErr != nil {
			return fmt.Errorf("publish batch: interrupted while writing, connection closed: %w: %w", ErrConnectionLost, ctxErr)
		}
		return fmt.Errorf("publish batch: publishing took longer than %s, connection closed: %w: %w",
			p.cfg.ConfirmTimeout, ErrTimeout, ErrConnectionLost)
	}
	if pending > 0 && wctx.Err() != nil {
		if ctxErr != nil {
			return fmt.Errorf("publish batch: %d of %d messages unconfirmed: %w", pending, total, ctxErr)
		}
		p.abort()
		return fmt.Errorf("publish batch: %d of %d messages unconfirmed after %s, connection closed: %w: %w",
			pending, total, p.cfg.ConfirmTimeout, ErrTimeout, ErrConnectionLost)
	}
	switch {
	case errors.Is(pubErr, ErrBlocked):
		return fmt.Errorf("publish batch: %w", ErrBlocked)
	case pubErr != nil:
		if cause := p.closeCause(); cause != nil && !p.closing.Load() {
			return fmt.Errorf("publish batch: %w: %w", lost(pubErr), cause)
		}
		return fmt.Errorf("publish batch: %w", lost(pubErr))
	case pending > 0:
		// Only a closing channel resolves confirms without an answer.
		p.closeCause()
		return fmt.Errorf("publish batch: %d of %d messages unconfirmed: %w", pending, total, p.deadErrNow())
	}
	return nil
}

// PermanentRefusal reports whether err (from PublishBatch) says that the
// broker refused a message for good, and the broker's reason. The
// refusals no retry can cure, as RabbitMQ reports them:
//   - 406 PRECONDITION_FAILED closing the channel while publishing: the
//     message is larger than the broker's max_message_size, or another
//     property of the message itself is refused.
//
// The channel is closed, so the rest of the batch is TimedOut or NotSent:
// the broker does not say which message it refused. A batch of one
// message names it.
func PermanentRefusal(err error) (reason string, ok bool) {
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Server && ae.Code == amqp.PreconditionFailed {
		return ae.Reason, true
	}
	return "", false
}

// closeCauseWait bounds how long a failed batch waits for the broker's
// reason for closing the channel.
const closeCauseWait = time.Second

// closeCause waits (at most closeCauseWait) for the connection or channel
// to be reported closed and returns why, or nil if it was not.
func (p *Publisher) closeCause() error {
	t := time.NewTimer(closeCauseWait)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		return nil
	}
	p.reasonMu.Lock()
	defer p.reasonMu.Unlock()
	return p.reason
}

// deadErrNow is deadErr without waiting for watch to have noticed the
// close.
func (p *Publisher) deadErrNow() error {
	select {
	case <-p.done:
		return p.deadErr()
	default:
		if p.closing.Load() {
			return fmt.Errorf("%w: publisher closed", ErrConnectionLost)
		}
		return ErrConnectionLost
	}
}
