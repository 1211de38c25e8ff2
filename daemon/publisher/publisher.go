package publisher

import (
	"cmp"
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
	// MaxMessageBytesDefault is FlowForge's own limit on a dispatch
	// message body: 1 MiB. A dispatch carries ids and two names bounded at
	// apply (core.MaxNameLength, core.MaxHandlerLength), well under 1 KiB,
	// so anything near the limit is an anomaly; and it stays far below
	// every RabbitMQ default max_message_size (128 MiB up to 3.13, 16 MiB
	// from 4.0), so FlowForge refuses an oversized row itself, cleanly,
	// before the broker closes the channel over it.
	MaxMessageBytesDefault = 1 << 20
)

// QuarantineActor is the actor of the publisher's quarantine audit rows.
const QuarantineActor = "publisher"

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
	// MaxMessageBytes bounds a dispatch message body, in bytes (default
	// MaxMessageBytesDefault; keep it below the broker's
	// max_message_size). A larger row is quarantined before publishing.
	MaxMessageBytes int
	Logger          *slog.Logger
	Metrics         *metrics.Metrics
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

// Bounds of Config.PollInterval: the poll is the publisher's safety net
// for lost notifications; shorter than PollIntervalMin it busy-loops the
// database, longer than PollIntervalMax it leaves rows waiting.
const (
	PollIntervalMin = 10 * time.Millisecond
	PollIntervalMax = time.Minute
)

// Validate checks the settings of c against their bounds, the one place
// they are checked (ffctl maps its flags to a Config and reports this
// error as a usage error): BatchSize, PollInterval and MaxMessageBytes must
// not be negative; zero ones take their defaults in New. The error is a
// *daemon.SettingError. The dependencies (Store, Broker) are New's to
// check.
func (c Config) Validate() error {
	for _, err := range []error{
		daemon.CheckNotNegative("publisher", "BatchSize", "", c.BatchSize, BatchSizeDefault),
		daemon.CheckNotNegative("publisher", "PollInterval", "poll-interval", c.PollInterval, PollIntervalDefault),
		daemon.CheckRange("publisher", "PollInterval", "poll-interval", c.PollInterval, PollIntervalDefault, PollIntervalMin, PollIntervalMax),
		daemon.CheckNotNegative("publisher", "MaxMessageBytes", "max-message-bytes", c.MaxMessageBytes, MaxMessageBytesDefault),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

func (c *Config) validate() error {
	if c.Store == nil {
		return errors.New("publisher: Store is required")
	}
	if len(c.Broker.URLs) == 0 {
		return errors.New("publisher: at least one broker URL is required")
	}
	if err := c.Validate(); err != nil {
		return err
	}
	c.BatchSize = cmp.Or(c.BatchSize, BatchSizeDefault)
	c.PollInterval = cmp.Or(c.PollInterval, PollIntervalDefault)
	c.MaxMessageBytes = cmp.Or(c.MaxMessageBytes, MaxMessageBytesDefault)
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

// batchLimit is the number of rows the next cycle locks: one while a
// permanent refusal is being isolated, else BatchSize.
func (p *Publisher) batchLimit() int {
	if p.isolate > 0 {
		return 1
	}
	return p.cfg.BatchSize
}

// cycle publishes one batch; it returns how many rows the batch held.
// Rows the broker refuses permanently (see quarantineReasons) are
// quarantined in the batch's transaction; the others are published.
func (p *Publisher) cycle(ctx context.Context, pub *broker.Publisher) (int, error) {
	limit := p.batchLimit()
	batch, err := p.cfg.Store.LockOutbox(ctx, limit)
	if err != nil {
		return 0, err
	}
	defer batch.Rollback()
	if len(batch.Rows) == 0 {
		p.isolate = 0
		return 0, nil
	}
	quarantine := map[int64]string{}
	var sendable []store.OutboxRow
	for _, r := range batch.Rows {
		if len(r.Payload) > p.cfg.MaxMessageBytes {
			quarantine[r.ID] = fmt.Sprintf("message of %d bytes is larger than the max message size of %d bytes (--max-message-bytes)", len(r.Payload), p.cfg.MaxMessageBytes)
			continue
		}
		sendable = append(sendable, r)
	}
	msgs := make([]broker.Message, len(sendable))
	for i, r := range sendable {
		msgs[i] = broker.Message{ID: strconv.FormatInt(r.ID, 10), Body: r.Payload}
	}
	outcomes, pubErr := pub.PublishBatch(ctx, msgs)
	p.injectFaults(ctx, outcomes)
	refused, permanent := broker.PermanentRefusal(pubErr)
	if permanent && len(sendable) == 1 {
		quarantine[sendable[0].ID] = "the broker refused the message: " + refused
		pubErr = nil
		outcomes = []broker.Outcome{broker.Refused}
	}
	res := p.sortOutcomes(sendable, outcomes, pubErr)
	if permanent && len(sendable) > 1 {
		p.isolate = len(sendable) - len(res.confirmed)
		p.log.Warn("publisher: the broker refused a message of the batch permanently; publishing the unconfirmed rows one at a time to find it", "reason", refused, "rows", p.isolate)
	} else if p.isolate > 0 {
		p.isolate--
	}
	// The stamps are written with a fresh context: once the broker has
	// confirmed, shutting down must not discard what we know. The batch's
	// transaction outlives ctx (store.OutboxBatch), so the commit stands.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := p.record(wctx, batch, res, quarantine); err != nil {
		return 0, err
	}
	if err := batch.Commit(); err != nil {
		return 0, err
	}
	p.logOutcome(len(batch.Rows), res, quarantine)
	switch {
	case pubErr != nil:
		return len(batch.Rows), fmt.Errorf("publish batch: %w", pubErr)
	case res.returned > 0:
		return len(batch.Rows), fmt.Errorf("%d of %d rows: %w", res.returned, len(batch.Rows), errReturned)
	case res.nacked > 0:
		return len(batch.Rows), fmt.Errorf("%d of %d rows: %w", res.nacked, len(batch.Rows), errNacked)
	}
	return len(batch.Rows), nil
}

// batchResult is what the broker's outcomes mean for a batch's rows.
type batchResult struct {
	confirmed        []int64
	failed           map[string][]int64 // reason -> rows left pending
	returned, nacked int
}

// sortOutcomes sorts the published rows by outcome, counting each in
// flowforge_publish_total. A Refused row is counted but neither confirmed
// nor failed: it is quarantined.
func (p *Publisher) sortOutcomes(rows []store.OutboxRow, outcomes []broker.Outcome, pubErr error) batchResult {
	res := batchResult{failed: map[string][]int64{}}
	for i, r := range rows {
		o := broker.NotSent
		if i < len(outcomes) {
			o = outcomes[i]
		}
		p.cfg.Metrics.PublishOutcomes.WithLabelValues(o.String()).Inc()
		switch o {
		case broker.Confirmed:
			res.confirmed = append(res.confirmed, r.ID)
			continue
		case broker.Refused:
			continue
		case broker.Returned:
			res.returned++
		case broker.Nacked:
			res.nacked++
		}
		reason := o.String()
		if o == broker.TimedOut && pubErr == nil {
			reason = "confirm lost"
		}
		if pubErr != nil {
			reason = fmt.Sprintf("%s: %v", o, pubErr)
		}
		res.failed[reason] = append(res.failed[reason], r.ID)
	}
	return res
}

// record writes the batch's stamps, failures and quarantines in its
// transaction.
func (p *Publisher) record(ctx context.Context, batch *store.OutboxBatch, res batchResult, quarantine map[int64]string) error {
	if err := batch.MarkPublished(ctx, res.confirmed); err != nil {
		return err
	}
	for reason, ids := range res.failed {
		if err := batch.MarkFailed(ctx, ids, reason); err != nil {
			return err
		}
	}
	for id, reason := range quarantine {
		if _, err := batch.Quarantine(ctx, []int64{id}, QuarantineActor, reason); err != nil {
			return err
		}
	}
	return nil
}

// logOutcome logs what a committed batch left behind and counts the
// quarantines.
func (p *Publisher) logOutcome(rows int, res batchResult, quarantine map[int64]string) {
	for id, reason := range quarantine {
		p.cfg.Metrics.OutboxQuarantinedTotal.Inc()
		p.log.Error("publisher: quarantined an outbox row the broker refuses permanently; the others are published (see ffctl outbox quarantined)", "outbox_id", id, "reason", reason)
	}
	if len(quarantine) > 0 {
		p.cfg.Metrics.OutboxQuarantined.Add(float64(len(quarantine)))
	}
	if len(res.failed) > 0 {
		reasons := make([]string, 0, len(res.failed))
		for reason := range res.failed {
			reasons = append(reasons, reason)
		}
		sort.Strings(reasons)
		p.log.Warn("publisher: rows left pending", "confirmed", len(res.confirmed), "pending", rows-len(res.confirmed)-len(quarantine), "reasons", reasons)
	}
}

// injectFaults applies the armed failpoints to a batch the broker has
// answered. publisher.discard-confirms turns every confirm of the batch into
// a lost one (the messages are in the queue; the rows must stay pending).
// publisher.exit-after-confirm ends the process once the broker confirmed
// something, before any row is stamped: the open transaction dies with it.
// publisher.sigterm-after-confirm sends the process SIGTERM at that point
// and returns once the signal has cancelled ctx.
func (p *Publisher) injectFaults(ctx context.Context, outcomes []broker.Outcome) {
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
	p.cfg.Failpoints.SignalIf(ctx, failpoint.PublisherSigtermAfterConfirm)
}

func hasConfirmed(outcomes []broker.Outcome) bool {
	for _, o := range outcomes {
		if o == broker.Confirmed {
			return true
		}
	}
	return false
}
