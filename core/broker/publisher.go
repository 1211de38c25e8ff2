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

// Publisher publishes dispatch messages with publisher confirms on one AMQP
// connection and channel. It does not reconnect: when Done is closed (or a
// call returns an error wrapping ErrConnectionLost) Close it and dial a new
// one. Its methods are safe for concurrent use; PublishBatch calls are
// serialized.
type Publisher struct {
	cfg  Config
	log  *slog.Logger
	conn *amqp.Connection
	sock *corkConn // conn's socket, corked while a batch is written
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
// the topology (dispatch queue and dead-letter queue, see package doc, and
// the events exchange when cfg.EventsExchange is set),
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
	conn, sock, err := dialCorkable(ctx, cfg, "publisher")
	if err != nil {
		return nil, fmt.Errorf("dial publisher: %w", err)
	}
	p, err := setupPublisher(ctx, cfg, conn, sock)
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

func setupPublisher(ctx context.Context, cfg Config, conn *amqp.Connection, sock *corkConn) (*Publisher, error) {
	// The AMQP calls below take no ctx; closing the connection aborts them.
	stop := context.AfterFunc(ctx, func() { _ = conn.CloseDeadline(time.Now()) })
	connClose := conn.NotifyClose(make(chan *amqp.Error, 1))
	blocks := conn.NotifyBlocked(make(chan amqp.Blocking, 8))
	_, err := declareTopology(conn, cfg.Queue, nil, cfg.Logger)
	if err == nil && cfg.EventsExchange != "" {
		err = declareEventsExchange(conn, cfg.EventsExchange)
	}
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
		sock:    sock,
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
