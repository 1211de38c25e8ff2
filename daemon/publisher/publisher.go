package publisher

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/tracing"
	"github.com/flowforge/flowforge/daemon"
	"github.com/flowforge/flowforge/daemon/backoff"
)

// Publisher drains the outbox through Config.Lanes lanes: each a loop of
// cycles on a broker connection of its own, so that while one lane's
// batch waits for its confirms (a quorum queue confirms once its log is
// on disk) the next lane locks and publishes what came meanwhile. The
// lanes' batches are disjoint (FOR UPDATE SKIP LOCKED), as two
// publishers' are.
type Publisher struct {
	cfg    Config
	log    *slog.Logger
	tracer trace.Tracer // publish spans of traced rows (trace.go)
	lanes  []*lane
	// stream is the transition stream's loop (stream.go); nil when
	// Config.EventsExchange is empty.
	stream *streamLoop
	// alarm is set when a publish found the broker blocking (resource
	// alarm) and cleared by the next cycle that completes: the broker only
	// tells a connection it is blocked once it publishes, and the blocked
	// connection is closed when the confirm wait times out, so the state
	// must outlive the connection for readiness to stay 503.
	alarm atomic.Bool
	// alarmLogged is set when the publisher logged that the broker blocks
	// publishing and cleared, with a log line, by the first cycle after it
	// that published rows: an alarm is logged once when it is raised and
	// once when publishing resumes, however many lanes, cycles and
	// re-dials it lasts (a lane's empty cycle on a fresh connection, which
	// the broker blocks only once it publishes, clears alarm but is no
	// proof that the alarm ended).
	alarmLogged atomic.Bool
}

// lane is one loop of cycles and its broker connection.
type lane struct {
	n   int // 0, 1, ...: lane 0 also refreshes the outbox gauges
	mu  sync.Mutex
	pub *broker.Publisher
	// isolate counts the rows still to publish one per batch after the
	// broker refused a multi-row batch permanently (a 406 closes the
	// channel without saying which message it refused): a single-row batch
	// refused that way names its row, which is quarantined. Owned by the
	// lane's loop.
	isolate int
	// wake is signalled (one pending signal at most) by every outbox
	// NOTIFY and every (re)connect of the listener.
	wake chan struct{}
}

// New validates cfg and returns a Publisher.
func New(cfg Config) (*Publisher, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Broker.Logger == nil {
		cfg.Broker.Logger = cfg.Logger
	}
	p := &Publisher{cfg: cfg, log: cfg.Logger, tracer: tracing.Tracer(cfg.TracerProvider)}
	for n := range cfg.Lanes {
		p.lanes = append(p.lanes, &lane{n: n, wake: make(chan struct{}, 1)})
	}
	// Every publisher runs the stream loop: it idles while the stream is
	// off and publishes when another process turned it on.
	p.stream = &streamLoop{
		brokerBO: daemon.Recovery{Component: "publisher", Dependency: "rabbitmq", Log: p.log, Metrics: cfg.Metrics},
		dbBO:     daemon.Recovery{Component: "publisher", Dependency: "postgres", Log: p.log, Metrics: cfg.Metrics},
		wake:     make(chan struct{}, 1),
	}
	return p, nil
}

// BrokerReady is the readiness check of the broker dependency: an error
// while a lane has no open connection or the broker blocks it with a
// resource alarm.
func (p *Publisher) BrokerReady(ctx context.Context) error {
	if p.alarm.Load() {
		return errors.New("blocked by a broker resource alarm")
	}
	for _, l := range p.lanes {
		pub := l.current()
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
	}
	return nil
}

// Start dials every lane's connection once, so that a permanent
// misconfiguration (a dispatch queue declared with other arguments) fails
// the process at start with a clear error, instead of looping, and so that
// every lane has declared the topology before Run logs "publisher:
// started". Transient failures are left to Run's reconnect loops.
func (p *Publisher) Start(ctx context.Context) error {
	for _, l := range p.lanes {
		pub, err := broker.DialPublisher(ctx, p.cfg.Broker)
		var mismatch *broker.TopologyMismatchError
		if errors.As(err, &mismatch) {
			return err
		}
		if err != nil {
			p.log.Warn("publisher: broker not reachable at start; will retry", "error", err)
			return nil
		}
		l.setPub(pub)
	}
	return nil
}

// current returns the lane's connection, nil when it has none.
func (l *lane) current() *broker.Publisher {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pub
}

func (l *lane) setPub(pub *broker.Publisher) {
	l.mu.Lock()
	l.pub = pub
	l.mu.Unlock()
}

// dropPub closes pub and forgets it if it is still the lane's connection.
func (l *lane) dropPub(pub *broker.Publisher) {
	pub.Close()
	l.mu.Lock()
	if l.pub == pub {
		l.pub = nil
	}
	l.mu.Unlock()
}

// Run publishes until ctx ends, then returns nil. Every lane runs its loop
// in a goroutine of its own, woken by the one LISTEN connection, beside the
// stream loop and the re-driver of dead-lettered dispatches (redrive.go);
// Run waits for them all.
func (p *Publisher) Run(ctx context.Context) error {
	if p.cfg.DatabaseURL != "" {
		lctx, stop := context.WithCancel(ctx)
		var listening sync.WaitGroup
		listening.Add(1)
		go func() {
			defer listening.Done()
			daemon.Listen(lctx, p.cfg.DatabaseURL, store.OutboxChannel, p.log, func([]string) { p.wakeAll() })
		}()
		defer func() {
			stop()
			listening.Wait()
		}()
	}
	p.log.Info("publisher: started", "queue", p.cfg.Broker.Queue, "lanes", len(p.lanes))
	if p.cfg.Failpoints != nil {
		p.log.Warn("publisher: failpoints armed (testing aid; unset FLOWFORGE_FAILPOINTS in production)", "failpoints", p.cfg.Failpoints.String())
	}
	var lanes sync.WaitGroup
	for _, ln := range p.lanes {
		lanes.Add(1)
		go func() {
			defer lanes.Done()
			p.runLane(ctx, ln)
		}()
	}
	if p.stream != nil {
		lanes.Add(1)
		go func() {
			defer lanes.Done()
			p.runStream(ctx, p.stream)
		}()
	}
	lanes.Add(1)
	go func() {
		defer lanes.Done()
		p.runRedrive(ctx)
	}()
	lanes.Wait()
	p.log.Info("publisher: stopped")
	return nil
}

// wakeAll signals every lane's wake and the stream loop's (one busy with a batch sees it once
// the batch is done).
func (p *Publisher) wakeAll() {
	for _, l := range p.lanes {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	if p.stream != nil {
		select {
		case p.stream.wake <- struct{}{}:
		default:
		}
	}
}

// runLane runs ln's cycles until ctx ends, then closes its connection.
func (p *Publisher) runLane(ctx context.Context, ln *lane) {
	l := &runLoop{
		brokerBO: daemon.Recovery{Component: "publisher", Dependency: "rabbitmq", Log: p.log, Metrics: p.cfg.Metrics},
		dbBO:     daemon.Recovery{Component: "publisher", Dependency: "postgres", Log: p.log, Metrics: p.cfg.Metrics},
		wake:     ln.wake,
	}
	tick := time.NewTicker(p.cfg.PollInterval)
	defer tick.Stop()
	l.tick = tick.C
	defer func() {
		if pub := ln.current(); pub != nil {
			ln.dropPub(pub)
		}
	}()
	for ctx.Err() == nil {
		p.step(ctx, ln, l)
	}
}

// runLoop is the state of one lane's loop between steps.
type runLoop struct {
	brokerBO, dbBO daemon.Recovery
	wake           <-chan struct{} // the lane's NOTIFY wake-ups
	tick           <-chan time.Time
	lastStatus     time.Time // of the last refresh of the outbox gauges (lane 0)
}

// step runs one cycle of ln when its broker connection is open and
// unblocked (dialling it when it is not), then waits as settle says.
func (p *Publisher) step(ctx context.Context, ln *lane, l *runLoop) {
	pub, err := p.connected(ctx, ln)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		d := l.brokerBO.Fail()
		p.log.Error("publisher: connect to broker", "error", err, "lane", ln.n, "failures", l.brokerBO.Failures(), "retry_in", d.String())
		_ = backoff.Sleep(ctx, d)
		return
	}
	if pub.Blocked() {
		p.alarmRaised(ln, nil)
		select {
		case <-ctx.Done():
		case <-pub.Done():
		case <-time.After(p.cfg.PollInterval):
		}
		return
	}
	// A connection that is open and not blocked is a recovery from a
	// broker failure (logged once by brokerBO); a blocked one is not.
	l.brokerBO.Succeeded()
	limit := ln.batchLimit(p.cfg.BatchSize)
	n, err := p.cycle(ctx, ln, pub)
	if ln.n == 0 && time.Since(l.lastStatus) > 5*time.Second {
		l.lastStatus = time.Now()
		p.refreshGauges(ctx)
	}
	p.settle(ctx, ln, l, pub, err, n > 0, n == limit)
}

// settle handles a cycle's outcome: a lost or blocked connection is dropped
// and re-dialled after a backoff; returned or nacked rows make the lane
// re-dial (the queue may be gone); a database fault backs off; a success
// runs the next cycle at once when the batch was full, else waits for a
// NOTIFY, the poll tick or the connection's end.
func (p *Publisher) settle(ctx context.Context, ln *lane, l *runLoop, pub *broker.Publisher, err error, published, full bool) {
	switch {
	case ctx.Err() != nil:
	case errors.Is(err, broker.ErrConnectionLost) || errors.Is(err, broker.ErrBlocked):
		if pub.Blocked() || errors.Is(err, broker.ErrBlocked) {
			// Not a broker failure: the connection is dropped and
			// re-dialled as before, but the alarm is logged when it is
			// raised and when it clears, not per re-dial, and no re-dial
			// is taken for a recovery.
			p.alarmRaised(ln, err)
			ln.dropPub(pub)
			_ = backoff.Sleep(ctx, p.cfg.PollInterval)
			return
		}
		p.log.Warn("publisher: broker connection lost; rows stay pending", "error", err, "lane", ln.n)
		ln.dropPub(pub)
		d := l.brokerBO.Fail()
		_ = backoff.Sleep(ctx, d)
	case errors.Is(err, errReturned) || errors.Is(err, errNacked):
		d := l.brokerBO.Fail()
		p.log.Warn("publisher: rows left pending; re-dialing to re-declare the dispatch queue", "error", err, "lane", ln.n, "retry_in", d.String())
		ln.dropPub(pub)
		_ = backoff.Sleep(ctx, d)
	case err != nil:
		d := l.dbBO.Fail()
		p.log.Error("publisher: cycle failed", "error", err, "lane", ln.n, "failures", l.dbBO.Failures(), "retry_in", d.String())
		_ = backoff.Sleep(ctx, d)
	default:
		p.alarm.Store(false)
		if published {
			// Only a publish shows the alarm over: a fresh connection
			// looks unblocked until it publishes (flowforge_publisher_blocked
			// follows the log, not readiness's moment-to-moment view).
			p.cfg.Metrics.PublisherBlocked.Set(0)
			if p.alarmLogged.Swap(false) {
				p.log.Info("publisher: broker accepts publishing again (resource alarm cleared)")
			}
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

// alarmRaised records that the broker blocks publishing (a resource
// alarm: readiness reports it) and logs it unless already logged (see
// alarmLogged).
func (p *Publisher) alarmRaised(ln *lane, err error) {
	p.alarm.Store(true)
	p.cfg.Metrics.PublisherBlocked.Set(1)
	if p.alarmLogged.Swap(true) {
		return
	}
	args := []any{"lane", ln.n}
	if err != nil {
		args = append(args, "error", err)
	}
	p.log.Warn("publisher: broker blocks publishing (resource alarm); rows stay pending", args...)
}

// connected returns ln's open connection, dialling a new one when it has
// none or it closed.
func (p *Publisher) connected(ctx context.Context, ln *lane) (*broker.Publisher, error) {
	if pub := ln.current(); pub != nil {
		select {
		case <-pub.Done():
			ln.dropPub(pub)
		default:
			return pub, nil
		}
	}
	pub, err := broker.DialPublisher(ctx, p.cfg.Broker)
	if err != nil {
		return nil, err
	}
	ln.setPub(pub)
	return pub, nil
}

// refreshGauges sets the outbox gauges from store.OutboxStatus (a failed
// read leaves them as they were).
func (p *Publisher) refreshGauges(ctx context.Context) {
	st, err := p.cfg.Store.OutboxStatus(ctx)
	if err != nil {
		return
	}
	p.cfg.Metrics.OutboxPending.Set(float64(st.Pending))
	p.cfg.Metrics.OutboxOldestSeconds.Set(st.OldestPendingSeconds)
	p.cfg.Metrics.OutboxQuarantined.Set(float64(st.Quarantined))
}
