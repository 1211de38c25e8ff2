package publisher

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon"
	"github.com/flowforge/flowforge/daemon/backoff"
)

// Publisher drains the outbox.
type Publisher struct {
	cfg Config
	log *slog.Logger

	mu  sync.Mutex
	pub *broker.Publisher
	// alarm is set when a publish found the broker blocking (resource
	// alarm) and cleared by the next cycle that completes: the broker only
	// tells a connection it is blocked once it publishes, and the blocked
	// connection is closed when the confirm wait times out, so the state
	// must outlive the connection for readiness to stay 503.
	alarm atomic.Bool
	// isolate counts the rows still to publish one per batch after the
	// broker refused a multi-row batch permanently (a 406 closes the
	// channel without saying which message it refused): a single-row batch
	// refused that way names its row, which is quarantined. Owned by Run.
	isolate int
}

// New validates cfg and returns a Publisher.
func New(cfg Config) (*Publisher, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Broker.Logger == nil {
		cfg.Broker.Logger = cfg.Logger
	}
	return &Publisher{cfg: cfg, log: cfg.Logger}, nil
}

// BrokerReady is the readiness check of the broker dependency: an error
// while the publisher has no open connection or the broker blocks it with a
// resource alarm.
func (p *Publisher) BrokerReady(ctx context.Context) error {
	if p.alarm.Load() {
		return errors.New("blocked by a broker resource alarm")
	}
	p.mu.Lock()
	pub := p.pub
	p.mu.Unlock()
	if pub == nil {
		return errors.New("not connected")
	}
	if pub.Blocked() {
		return errors.New("blocked by a broker resource alarm")
	}
	select {
	case <-pub.Done():
		return errors.New("connection closed")
	default:
	}
	return nil
}

// Start dials the broker once so that a permanent misconfiguration (a
// dispatch queue declared with other arguments) fails the process at start
// with a clear error, instead of looping. Transient failures are left to
// Run's reconnect loop.
func (p *Publisher) Start(ctx context.Context) error {
	pub, err := broker.DialPublisher(ctx, p.cfg.Broker)
	var mismatch *broker.TopologyMismatchError
	if errors.As(err, &mismatch) {
		return err
	}
	if err != nil {
		p.log.Warn("publisher: broker not reachable at start; will retry", "error", err)
		return nil
	}
	p.setPub(pub)
	return nil
}

func (p *Publisher) setPub(pub *broker.Publisher) {
	p.mu.Lock()
	p.pub = pub
	p.mu.Unlock()
}

// Run publishes until ctx ends, then returns nil.
func (p *Publisher) Run(ctx context.Context) error {
	l := &runLoop{
		brokerBO: daemon.Recovery{Component: "publisher", Dependency: "rabbitmq", Log: p.log, Metrics: p.cfg.Metrics},
		dbBO:     daemon.Recovery{Component: "publisher", Dependency: "postgres", Log: p.log, Metrics: p.cfg.Metrics},
	}
	if p.cfg.DatabaseURL != "" {
		var wait func()
		l.wake, wait = daemon.Wakeups(ctx, p.cfg.DatabaseURL, store.OutboxChannel, p.log)
		defer wait()
	}
	tick := time.NewTicker(p.cfg.PollInterval)
	defer tick.Stop()
	l.tick = tick.C
	defer func() {
		p.mu.Lock()
		if p.pub != nil {
			p.pub.Close()
			p.pub = nil
		}
		p.mu.Unlock()
	}()
	p.log.Info("publisher: started", "queue", p.cfg.Broker.Queue)
	if p.cfg.Failpoints != nil {
		p.log.Warn("publisher: failpoints armed (testing aid; unset FLOWFORGE_FAILPOINTS in production)", "failpoints", p.cfg.Failpoints.String())
	}
	for ctx.Err() == nil {
		p.step(ctx, l)
	}
	p.log.Info("publisher: stopped")
	return nil
}

// runLoop is the state of Run's loop.
type runLoop struct {
	brokerBO, dbBO daemon.Recovery
	wake           <-chan struct{} // NOTIFYs of the outbox (nil without DatabaseURL)
	tick           <-chan time.Time
	lastStatus     time.Time // of the last refresh of the outbox gauges
}

// step is one turn of Run's loop: connect when needed, run a cycle unless
// the broker blocks publishing, and wait as its outcome says.
func (p *Publisher) step(ctx context.Context, l *runLoop) {
	pub, err := p.connected(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		d := l.brokerBO.Fail()
		p.log.Error("publisher: connect to broker", "error", err, "failures", l.brokerBO.Failures(), "retry_in", d.String())
		_ = backoff.Sleep(ctx, d)
		return
	}
	l.brokerBO.Succeeded()
	if pub.Blocked() {
		p.alarm.Store(true)
		p.log.Warn("publisher: broker blocks publishing (resource alarm); rows stay pending")
		select {
		case <-ctx.Done():
		case <-pub.Done():
		case <-time.After(p.cfg.PollInterval):
		}
		return
	}
	limit := p.batchLimit()
	n, err := p.cycle(ctx, pub)
	if time.Since(l.lastStatus) > 5*time.Second {
		l.lastStatus = time.Now()
		p.refreshGauges(ctx)
	}
	p.settle(ctx, l, pub, err, n == limit)
}

// settle handles the outcome of a cycle on pub that ended with err: a lost
// or blocking broker, returned or nacked rows and a database error back
// off (the broker ones drop pub to re-dial); a cycle that succeeded waits
// for a NOTIFY, the poll tick or the connection's end, unless it was full
// (more may be waiting).
func (p *Publisher) settle(ctx context.Context, l *runLoop, pub *broker.Publisher, err error, full bool) {
	switch {
	case ctx.Err() != nil:
	case errors.Is(err, broker.ErrConnectionLost) || errors.Is(err, broker.ErrBlocked):
		if pub.Blocked() || errors.Is(err, broker.ErrBlocked) {
			p.alarm.Store(true)
			p.log.Warn("publisher: broker blocks publishing (resource alarm); rows stay pending", "error", err)
		} else {
			p.log.Warn("publisher: broker connection lost; rows stay pending", "error", err)
		}
		p.dropPub(pub)
		d := l.brokerBO.Fail()
		_ = backoff.Sleep(ctx, d)
	case errors.Is(err, errReturned) || errors.Is(err, errNacked):
		// The queue is declared on every dial: re-dialing repairs a
		// deleted dispatch queue even when no worker is running, and
		// replaces a channel whose quorum queue client keeps nacking.
		d := l.brokerBO.Fail()
		p.log.Warn("publisher: rows left pending; re-dialing to re-declare the dispatch queue", "error", err, "retry_in", d.String())
		p.dropPub(pub)
		_ = backoff.Sleep(ctx, d)
	case err != nil:
		d := l.dbBO.Fail()
		p.log.Error("publisher: cycle failed", "error", err, "failures", l.dbBO.Failures(), "retry_in", d.String())
		_ = backoff.Sleep(ctx, d)
	default:
		if p.alarm.Swap(false) {
			p.log.Info("publisher: broker accepts publishing again (resource alarm cleared)")
		}
		l.dbBO.Succeeded()
		if full {
			return // more may be waiting
		}
		select {
		case <-ctx.Done():
		case <-l.wake:
		case <-l.tick:
		case <-pub.Done():
		}
	}
}

func (p *Publisher) connected(ctx context.Context) (*broker.Publisher, error) {
	p.mu.Lock()
	pub := p.pub
	p.mu.Unlock()
	if pub != nil {
		select {
		case <-pub.Done():
			p.dropPub(pub)
		default:
			return pub, nil
		}
	}
	pub, err := broker.DialPublisher(ctx, p.cfg.Broker)
	if err != nil {
		return nil, err
	}
	p.setPub(pub)
	return pub, nil
}

func (p *Publisher) dropPub(pub *broker.Publisher) {
	pub.Close()
	p.mu.Lock()
	if p.pub == pub {
		p.pub = nil
	}
	p.mu.Unlock()
}

func (p *Publisher) refreshGauges(ctx context.Context) {
	st, err := p.cfg.Store.OutboxStatus(ctx)
	if err != nil {
		return
	}
	p.cfg.Metrics.OutboxPending.Set(float64(st.Pending))
	p.cfg.Metrics.OutboxOldestSeconds.Set(st.OldestPendingSeconds)
	p.cfg.Metrics.OutboxQuarantined.Set(float64(st.Quarantined))
}
