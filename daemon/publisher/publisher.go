package publisher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon"
	"github.com/flowforge/flowforge/daemon/backoff"
	"github.com/flowforge/flowforge/daemon/failpoint"
	"github.com/flowforge/flowforge/daemon/metrics"
)

// Defaults for Config.
const (
	BatchSizeDefault    = 200
	PollIntervalDefault = time.Second
)

// Store is what the publisher needs from the database.
type Store interface {
	LockOutbox(ctx context.Context, limit int) (*store.OutboxBatch, error)
	OutboxStatus(ctx context.Context) (store.OutboxStatus, error)
}

// Config configures a Publisher.
type Config struct {
	Store Store
	// DatabaseURL is used for the LISTEN connection; empty disables NOTIFY
	// wake-ups (polling still runs).
	DatabaseURL string
	Broker      broker.Config
	// BatchSize bounds rows per transaction (default BatchSizeDefault).
	BatchSize int
	// PollInterval is the period of the cycle that runs without a NOTIFY.
	PollInterval time.Duration
	Logger       *slog.Logger
	Metrics      *metrics.Metrics
	// Failpoints arms test-only faults (see package failpoint); nil, the
	// normal case, arms none.
	Failpoints *failpoint.Failpoints
}

// errReturned reports that the broker returned messages as unroutable: the
// dispatch queue is gone (deleted, or a node lost it). The rows stay
// pending; the publisher re-dials, which re-declares the topology.
var errReturned = errors.New("the broker returned unroutable messages (is the dispatch queue missing?)")

// errNacked reports that the broker refused messages (basic.nack). A
// quorum queue nacks while it has no leader, and a channel whose queue
// client lost its leader can keep nacking after a new leader was elected
// (seen with RabbitMQ 3.10 when the leader's node is killed): the rows stay
// pending and the publisher re-dials, which gives it a fresh channel and
// possibly another node.
var errNacked = errors.New("the broker nacked messages")

func (c *Config) validate() error {
	if c.Store == nil {
		return errors.New("publisher: Store is required")
	}
	if len(c.Broker.URLs) == 0 {
		return errors.New("publisher: at least one broker URL is required")
	}
	if c.BatchSize <= 0 {
		c.BatchSize = BatchSizeDefault
	}
	if c.PollInterval <= 0 {
		c.PollInterval = PollIntervalDefault
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = metrics.New()
	}
	if c.Broker.Cursor == nil {
		c.Broker.Cursor = &broker.Cursor{}
	}
	return nil
}

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
}

// New validates cfg and returns a Publisher.
func New(cfg Config) (*Publisher, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Broker.Logger == nil {
		cfg.Broker.Logger = cfg.Logger
	}
	return &Publisher{cfg: cfg, log: cfg.Logger.With("component", "publisher")}, nil
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
		p.log.Warn("publisher: broker not reachable at start; will retry", "err", err)
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
	var wake <-chan struct{}
	if p.cfg.DatabaseURL != "" {
		wake = daemon.Wakeups(ctx, p.cfg.DatabaseURL, store.TopicOutbox, p.log)
	}
	tick := time.NewTicker(p.cfg.PollInterval)
	defer tick.Stop()
	defer func() {
		p.mu.Lock()
		if p.pub != nil {
			p.pub.Close()
			p.pub = nil
		}
		p.mu.Unlock()
	}()
	brokerBO := daemon.Recovery{Component: "publisher", Dependency: "rabbitmq", Log: p.log, Metrics: p.cfg.Metrics}
	dbBO := daemon.Recovery{Component: "publisher", Dependency: "postgres", Log: p.log, Metrics: p.cfg.Metrics}
	p.log.Info("publisher: started", "queue", p.cfg.Broker.Queue)
	if p.cfg.Failpoints != nil {
		p.log.Warn("publisher: failpoints armed (testing aid; unset FLOWFORGE_FAILPOINTS in production)", "failpoints", p.cfg.Failpoints.String())
	}
	lastStatus := time.Time{}
	for ctx.Err() == nil {
		pub, err := p.connected(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			d := brokerBO.Fail()
			p.log.Error("publisher: connect to broker", "err", err, "failures", brokerBO.Failures(), "retry_in", d.String())
			_ = backoff.Sleep(ctx, d)
			continue
		}
		brokerBO.Succeeded()
		if pub.Blocked() {
			p.alarm.Store(true)
			p.log.Warn("publisher: broker blocks publishing (resource alarm); rows stay pending")
			select {
			case <-ctx.Done():
			case <-pub.Done():
			case <-time.After(p.cfg.PollInterval):
			}
			continue
		}
		n, err := p.cycle(ctx, pub)
		if time.Since(lastStatus) > 5*time.Second {
			lastStatus = time.Now()
			p.refreshGauges(ctx)
		}
		switch {
		case ctx.Err() != nil:
		case errors.Is(err, broker.ErrConnectionLost) || errors.Is(err, broker.ErrBlocked):
			if pub.Blocked() || errors.Is(err, broker.ErrBlocked) {
				p.alarm.Store(true)
				p.log.Warn("publisher: broker blocks publishing (resource alarm); rows stay pending", "err", err)
			} else {
				p.log.Warn("publisher: broker connection lost; rows stay pending", "err", err)
			}
			p.dropPub(pub)
			d := brokerBO.Fail()
			_ = backoff.Sleep(ctx, d)
		case errors.Is(err, errReturned) || errors.Is(err, errNacked):
			// The queue is declared on every dial: re-dialing repairs a
			// deleted dispatch queue even when no worker is running, and
			// replaces a channel whose quorum queue client keeps nacking.
			d := brokerBO.Fail()
			p.log.Warn("publisher: rows left pending; re-dialing to re-declare the dispatch queue", "err", err, "retry_in", d.String())
			p.dropPub(pub)
			_ = backoff.Sleep(ctx, d)
		case err != nil:
			d := dbBO.Fail()
			p.log.Error("publisher: cycle failed", "err", err, "failures", dbBO.Failures(), "retry_in", d.String())
			_ = backoff.Sleep(ctx, d)
		default:
			if p.alarm.Swap(false) {
				p.log.Info("publisher: broker accepts publishing again (resource alarm cleared)")
			}
			dbBO.Succeeded()
			if n == p.cfg.BatchSize {
				continue // more may be waiting
			}
			select {
			case <-ctx.Done():
			case <-wake:
			case <-tick.C:
			case <-pub.Done():
			}
		}
	}
	p.log.Info("publisher: stopped")
	return nil
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
}

// cycle publishes one batch; it returns how many rows the batch held.
func (p *Publisher) cycle(ctx context.Context, pub *broker.Publisher) (int, error) {
	batch, err := p.cfg.Store.LockOutbox(ctx, p.cfg.BatchSize)
	if err != nil {
		return 0, err
	}
	defer batch.Rollback()
	if len(batch.Rows) == 0 {
		return 0, nil
	}
	msgs := make([]broker.Message, len(batch.Rows))
	for i, r := range batch.Rows {
		msgs[i] = broker.Message{ID: strconv.FormatInt(r.ID, 10), Body: r.Payload}
	}
	outcomes, pubErr := pub.PublishBatch(ctx, msgs)
	p.injectFaults(outcomes)
	var confirmed []int64
	returned, nacked := 0, 0
	failed := map[string][]int64{}
	for i, r := range batch.Rows {
		o := broker.NotSent
		if i < len(outcomes) {
			o = outcomes[i]
		}
		p.cfg.Metrics.PublishOutcomes.WithLabelValues(o.String()).Inc()
		if o == broker.Confirmed {
			confirmed = append(confirmed, r.ID)
			continue
		}
		if o == broker.Returned {
			returned++
		}
		if o == broker.Nacked {
			nacked++
		}
		reason := o.String()
		if o == broker.TimedOut && pubErr == nil {
			reason = "confirm lost"
		}
		if pubErr != nil {
			reason = fmt.Sprintf("%s: %v", o, pubErr)
		}
		failed[reason] = append(failed[reason], r.ID)
	}
	// The stamps are written with a fresh context: once the broker has
	// confirmed, shutting down must not discard what we know.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := batch.MarkPublished(wctx, confirmed); err != nil {
		return 0, err
	}
	for reason, ids := range failed {
		if err := batch.MarkFailed(wctx, ids, reason); err != nil {
			return 0, err
		}
	}
	if err := batch.Commit(); err != nil {
		return 0, err
	}
	if len(failed) > 0 {
		reasons := make([]string, 0, len(failed))
		for reason := range failed {
			reasons = append(reasons, reason)
		}
		sort.Strings(reasons)
		p.log.Warn("publisher: rows left pending", "confirmed", len(confirmed), "pending", len(batch.Rows)-len(confirmed), "reasons", reasons)
	}
	if pubErr != nil {
		return len(batch.Rows), fmt.Errorf("publish batch: %w", pubErr)
	}
	if returned > 0 {
		return len(batch.Rows), fmt.Errorf("%d of %d rows: %w", returned, len(batch.Rows), errReturned)
	}
	if nacked > 0 {
		return len(batch.Rows), fmt.Errorf("%d of %d rows: %w", nacked, len(batch.Rows), errNacked)
	}
	return len(batch.Rows), nil
}

// injectFaults applies the armed failpoints to a batch the broker has
// answered. publisher.discard-confirms turns every confirm of the batch into
// a lost one (the messages are in the queue; the rows must stay pending).
// publisher.exit-after-confirm ends the process once the broker confirmed
// something, before any row is stamped: the open transaction dies with it.
func (p *Publisher) injectFaults(outcomes []broker.Outcome) {
	if p.cfg.Failpoints == nil || !hasConfirmed(outcomes) {
		return
	}
	if p.cfg.Failpoints.Fire(failpoint.PublisherDiscardConfirms) {
		p.log.Warn("publisher: failpoint discards the confirms of this batch", "failpoint", failpoint.PublisherDiscardConfirms)
		for i, o := range outcomes {
			if o == broker.Confirmed {
				outcomes[i] = broker.TimedOut
			}
		}
	}
	p.cfg.Failpoints.ExitIf(failpoint.PublisherExitAfterConfirm)
}

func hasConfirmed(outcomes []broker.Outcome) bool {
	for _, o := range outcomes {
		if o == broker.Confirmed {
			return true
		}
	}
	return false
}
