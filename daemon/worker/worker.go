package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon"
	"github.com/flowforge/flowforge/daemon/backoff"
	"github.com/flowforge/flowforge/daemon/clock"
	"github.com/flowforge/flowforge/daemon/failpoint"
	"github.com/flowforge/flowforge/daemon/metrics"
)

// Defaults for Config.
const (
	ConcurrencyDefault = 4
	LeaseDefault       = 30 * time.Second
	SlotWaitDefault    = time.Minute
	// UnknownHandlerGraceDefault is how long a READY task whose handler
	// this worker does not register is handed back to the queue for another
	// worker before a worker claims it and fails it permanently.
	UnknownHandlerGraceDefault = time.Minute
)

// ConcurrencyMax is the largest Concurrency Validate accepts. The
// concurrency is also the consumer's prefetch, which AMQP caps at 65535;
// past a few thousand slots a worker's batches and its database pool, not
// its slots, bound it.
const ConcurrencyMax = 10_000

// LeaseMin is the shortest Lease Validate accepts: heartbeats run every
// Lease/3, and a renewal must fit in that with a database round trip to
// spare.
const LeaseMin = 300 * time.Millisecond

// ErrAborted is the cause of handler contexts cancelled by Abort: the
// worker was told to stop without waiting (a second stop signal). The
// attempt is recorded as failed and retried after its backoff.
var ErrAborted = errors.New("worker aborted: a second stop signal cancelled the handler")

// ErrTimeout is the cause of a handler context whose task timeout elapsed.
var ErrTimeout = errors.New("task timeout")

// Store is what the worker needs from the database.
type Store interface {
	ClaimMany(ctx context.Context, reqs []store.ClaimRequest, workerID string, lease time.Duration) ([]store.ClaimResult, error)
	TaskStateOf(ctx context.Context, id uuid.UUID) (core.TaskState, int64, error)
	ClaimedBy(ctx context.Context, id uuid.UUID, token int64, workerID string) (store.ClaimedTask, bool, error)
	FinishMany(ctx context.Context, reqs []store.FinishRequest) ([]store.FinishResult, error)
	FinishRecorded(ctx context.Context, id uuid.UUID, token int64, workerID string) (core.TaskState, bool, error)
	ClaimIdempotencyKey(ctx context.Context, key string, id uuid.UUID, token int64) (store.KeyClaim, error)
	ReadyFor(ctx context.Context, id uuid.UUID) (time.Duration, bool, error)
}

// Renewer renews leases. The worker renews through its own small pool so
// that handlers or claims that exhaust the main pool cannot starve
// heartbeats.
type Renewer interface {
	Renew(ctx context.Context, id uuid.UUID, token int64, lease time.Duration) (store.RenewResult, error)
}

// Config configures a Worker.
type Config struct {
	Store Store
	// Renewer defaults to Store when it implements Renewer.
	Renewer  Renewer
	Broker   broker.Config
	Registry *core.Registry
	// Concurrency is the number of handlers run at once and the consumer's
	// prefetch (default ConcurrencyDefault).
	Concurrency int
	// Lease is how long a claim is valid without a heartbeat; heartbeats
	// run every Lease/3 (default LeaseDefault; at least LeaseMin).
	Lease time.Duration
	// SlotWait bounds how long a delivery waits, unacked, for a free slot
	// before it is handed back to the queue. Keep it well below the
	// broker's consumer_timeout (default SlotWaitDefault).
	SlotWait time.Duration
	// UnknownHandlerGrace: a delivery whose handler this worker does not
	// register is handed back (requeued, no attempt used) so that a worker
	// that does can take it, until its task has been READY this long
	// (database clock); then it is claimed and fails permanently with
	// "unknown handler" (default UnknownHandlerGraceDefault).
	UnknownHandlerGrace time.Duration
	// ID names this process in leases and history (worker_id) and is its
	// consumer tag; see CheckID.
	ID      string
	Logger  *slog.Logger
	Metrics *metrics.Metrics
	// Clock is the process clock (default clock.System); it only measures
	// the worker's own intervals, never a lease.
	Clock clock.Clock
	// DatabaseURL, when set, is where the worker LISTENs on
	// store.CancelChannel (a dedicated connection, reconnected with
	// backoff) so that a cancelled run's handlers stop within a database
	// round trip instead of at their next heartbeat. Empty: heartbeats
	// alone deliver cancellation (within Lease/3).
	DatabaseURL string
	// Failpoints is a testing aid (package failpoint); nil in production.
	Failpoints *failpoint.Failpoints
}

// Validate checks the settings of c against their bounds, the one place
// they are checked (ffctl maps its flags to a Config and reports this
// error as a usage error): Concurrency, SlotWait and UnknownHandlerGrace
// must not be negative, Lease must be 0 or at least LeaseMin, and ID must
// pass CheckID. Zero settings take their defaults in New. The error is a
// *daemon.SettingError, or CheckID's wrapped for the ID. The dependencies
// (Store, Renewer, Registry, Broker) are New's to check.
func (c Config) Validate() error {
	if c.Lease != 0 && c.Lease < LeaseMin {
		return &daemon.SettingError{Component: "worker", Field: "Lease", Flag: "lease", Value: c.Lease,
			Want: fmt.Sprintf("at least %s, or 0 for the default (%s)", LeaseMin, LeaseDefault)}
	}
	for _, err := range []error{
		daemon.CheckNotNegative("worker", "Concurrency", "concurrency", c.Concurrency, ConcurrencyDefault),
		daemon.CheckRange("worker", "Concurrency", "concurrency", c.Concurrency, ConcurrencyDefault, 1, ConcurrencyMax),
		daemon.CheckNotNegative("worker", "SlotWait", "slot-wait", c.SlotWait, SlotWaitDefault),
		daemon.CheckNotNegative("worker", "UnknownHandlerGrace", "unknown-handler-grace", c.UnknownHandlerGrace, UnknownHandlerGraceDefault),
	} {
		if err != nil {
			return err
		}
	}
	if err := CheckID(c.ID); err != nil {
		return fmt.Errorf("worker: --id (Config.ID): %w", err)
	}
	return nil
}

func (c *Config) validate() error {
	if c.Store == nil {
		return errors.New("worker: Store is required")
	}
	if c.Renewer == nil {
		r, ok := c.Store.(Renewer)
		if !ok {
			return errors.New("worker: Renewer is required")
		}
		c.Renewer = r
	}
	if c.Registry == nil {
		return errors.New("worker: Registry is required")
	}
	if len(c.Broker.URLs) == 0 {
		return errors.New("worker: at least one broker URL is required")
	}
	if err := c.Validate(); err != nil {
		return err
	}
	c.Concurrency = cmp.Or(c.Concurrency, ConcurrencyDefault)
	c.Lease = cmp.Or(c.Lease, LeaseDefault)
	c.SlotWait = cmp.Or(c.SlotWait, SlotWaitDefault)
	c.UnknownHandlerGrace = cmp.Or(c.UnknownHandlerGrace, UnknownHandlerGraceDefault)
	if c.ID == "" {
		c.ID = "worker-" + uuid.NewString()[:8]
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = metrics.New()
	}
	c.Clock = clock.OrSystem(c.Clock)
	if c.Broker.Cursor == nil {
		c.Broker.Cursor = &broker.Cursor{}
	}
	return nil
}

// Worker consumes dispatches and runs handlers.
type Worker struct {
	cfg   Config
	log   *slog.Logger
	slots chan struct{}
	// handBacksWG counts the goroutines of deliveries in handBack.
	handBacksWG sync.WaitGroup
	finishes    finishBatcher
	// attempts holds the attempts in flight by (task, token): at most one
	// delivery of a dispatch runs here (see runningAttempts).
	attempts runningAttempts
	// pending carries decoded deliveries from consume to claimLoop; Run
	// closes it when it stops.
	pending chan pendingDelivery
	// statementsInFlight bounds the claim statements in flight at once
	// (statementsInFlightDefault).
	statementsInFlight int

	abortCtx context.Context
	abort    context.CancelCauseFunc

	consuming atomic.Bool
	first     *broker.Consumer
	current   atomic.Pointer[broker.Consumer] // the consumer of Run, nil between connections
	handBacks handBackPacer

	// running holds the heartbeats of the attempts in flight, by run id, so
	// that a cancel notification can make them renew at once.
	runningMu sync.Mutex
	running   map[uuid.UUID]map[*heartbeatLoop]struct{}

	signals testSignals // nil channels outside this package's tests
}

// New validates cfg and returns a Worker.
func New(cfg Config) (*Worker, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Broker.Logger == nil {
		cfg.Broker.Logger = cfg.Logger
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	w := &Worker{
		cfg:                cfg,
		log:                cfg.Logger.With("worker_id", cfg.ID),
		slots:              make(chan struct{}, cfg.Concurrency),
		pending:            make(chan pendingDelivery, cfg.Concurrency),
		statementsInFlight: statementsInFlightDefault,
		abortCtx:           ctx,
		abort:              cancel,
	}
	cfg.Metrics.SetDeadLetterSource(w.deadLetterDepth)
	return w, nil
}

// deadLetterDepth reads the dead-letter queue's depth through the current
// consumer's connection, for flowforge_dead_letter_queue_messages.
func (w *Worker) deadLetterDepth(context.Context) (float64, error) {
	c := w.current.Load()
	if c == nil {
		return 0, errors.New("not connected")
	}
	n, err := c.DeadLetterDepth()
	return float64(n), err
}

// ID returns the worker's id (worker_id in leases and history).
func (w *Worker) ID() string { return w.cfg.ID }

// Start dials the broker once so that a dispatch queue declared with other
// arguments fails the process at start with a clear error. Transient
// failures are left to Run.
func (w *Worker) Start(ctx context.Context) error {
	c, err := broker.DialConsumer(ctx, w.cfg.Broker, w.cfg.Concurrency, w.cfg.ID)
	var mismatch *broker.TopologyMismatchError
	if errors.As(err, &mismatch) {
		return err
	}
	if err != nil {
		w.log.Warn("worker: broker not reachable at start; will retry", "error", err)
		return nil
	}
	w.first = c
	return nil
}

// BrokerReady is the readiness check of the broker dependency.
func (w *Worker) BrokerReady(ctx context.Context) error {
	if !w.consuming.Load() {
		return errors.New("not consuming")
	}
	return nil
}

// Abort cancels the contexts of in-flight handlers (a hard stop). Their
// attempts are recorded as failures if the database still answers.
func (w *Worker) Abort() { w.abort(ErrAborted) }

// Run consumes until ctx ends; then it stops consuming, hands back the
// deliveries it has not claimed, waits for in-flight handlers (see Abort)
// and returns nil. Broker and database faults never end it.
func (w *Worker) Run(ctx context.Context) error {
	w.log.Info("worker: started", "concurrency", w.cfg.Concurrency, "lease", w.cfg.Lease.String(), "handlers", w.cfg.Registry.Names())
	if w.cfg.Failpoints != nil {
		w.log.Warn("worker: failpoints armed (testing aid; unset FLOWFORGE_FAILPOINTS in production)", "failpoints", w.cfg.Failpoints.String())
	}
	cons := w.first
	w.first = nil
	// The cancel listener outlives ctx: in-flight handlers may still be
	// cancelled while a graceful stop waits for them.
	lctx, stopListening := context.WithCancel(context.WithoutCancel(ctx))
	var listening sync.WaitGroup
	if w.cfg.DatabaseURL != "" {
		listening.Add(1)
		go func() {
			defer listening.Done()
			w.listenForCancels(lctx)
		}()
	}
	defer func() {
		stopListening()
		listening.Wait()
	}()
	pending := w.pending
	work := make(chan claimedDelivery, w.cfg.Concurrency)
	var loops sync.WaitGroup
	loops.Add(1 + w.cfg.Concurrency)
	go func() {
		defer loops.Done()
		w.claimLoop(ctx, pending, work)
	}()
	for range w.cfg.Concurrency {
		go func() {
			defer loops.Done()
			for c := range work {
				w.runClaimed(ctx, c)
			}
		}()
	}
	cons = w.consumeUntilStopped(ctx, cons, pending)
	w.log.Info("worker: stopping; waiting for in-flight tasks")
	if cons != nil {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = cons.Cancel(cctx)
		cancel()
	}
	// Deliveries not yet claimed are requeued by the claim loop, which
	// ends once pending is drained; the runners end with their attempts.
	w.handBacksWG.Wait()
	close(pending)
	loops.Wait()
	if cons != nil {
		cons.Close()
	}
	w.abort(ErrAborted)
	w.log.Info("worker: stopped")
	return nil
}

// consumeUntilStopped consumes through cons (dialling one when nil, and
// again after each lost connection, with backoff) and hands deliveries to
// pending, until ctx ends. It returns the consumer it holds then (nil if
// none), for Run to cancel and close once the attempts in flight ended.
func (w *Worker) consumeUntilStopped(ctx context.Context, cons *broker.Consumer, pending chan<- pendingDelivery) *broker.Consumer {
	bo := daemon.Recovery{Component: "worker", Dependency: "rabbitmq", Log: w.log, Metrics: w.cfg.Metrics}
	for ctx.Err() == nil {
		if cons == nil {
			var err error
			cons, err = broker.DialConsumer(ctx, w.cfg.Broker, w.cfg.Concurrency, w.cfg.ID)
			if err != nil {
				if ctx.Err() != nil {
					break
				}
				d := bo.Fail()
				w.log.Error("worker: connect to broker", "error", err, "failures", bo.Failures(), "retry_in", d.String())
				_ = backoff.Sleep(ctx, d)
				continue
			}
		}
		bo.Succeeded()
		w.consuming.Store(true)
		w.current.Store(cons)
		w.consume(ctx, cons, pending)
		w.current.Store(nil)
		w.consuming.Store(false)
		if ctx.Err() != nil {
			break
		}
		err := cons.Err()
		cons.Close()
		cons = nil
		d := bo.Fail()
		if errors.Is(err, broker.ErrConsumerCancelled) {
			w.log.Warn("worker: the broker cancelled the consumer (queue deleted?); re-declaring and re-subscribing", "error", err, "retry_in", d.String())
		} else {
			w.log.Warn("worker: broker connection lost; reconnecting", "error", err, "retry_in", d.String())
		}
		_ = backoff.Sleep(ctx, d)
	}
	return cons
}

// handBack requeues, without claiming, a delivery for a handler this worker
// does not register, so that a worker that does can run it: workers with
// different handler sets may share a queue. It does so while the task has
// been READY for less than UnknownHandlerGrace on the database clock; after
// that it lets the claim go ahead and the attempt fail permanently, so a
// task no worker can run ends DEAD instead of circulating forever. Each
// hand-back of the same task waits longer first (handBackPacer: capped
// exponential with full jitter, HandBackMinDefault to HandBackMaxDefault),
// which bounds how fast an orphan circulates; the first hand-back of a
// task at a fencing token is noted in its history (WaitNoter) so that
// `run show` and the dashboard say what it waits for.
func (w *Worker) handBack(ctx context.Context, d broker.Delivery, disp core.Dispatch, log *slog.Logger) bool {
	if disp.Handler == "" || w.cfg.Registry.Has(disp.Handler) {
		return false
	}
	age, ready, err := w.cfg.Store.ReadyFor(ctx, disp.TaskRunID)
	switch {
	case err != nil:
		// The database did not say how long the task has waited: a claim
		// now would fail permanently a task that a worker registering its
		// handler may be about to run (a new user's trial found tasks DEAD
		// within 100 ms while such workers ran). Hand it back, paced.
		log.Warn("worker: could not read how long a task whose handler this worker lacks has been READY; handing it back", "handler", disp.Handler, "error", err)
	case !ready || age >= w.cfg.UnknownHandlerGrace:
		w.handBacks.forget(disp.TaskRunID)
		return false // the claim decides (and fails it permanently if it wins)
	}
	wait, first := w.handBacks.next(disp.TaskRunID, disp.FencingToken)
	if n, ok := w.cfg.Store.(WaitNoter); ok && first {
		if _, err := n.NoteWaitingForHandler(ctx, disp.TaskRunID, disp.FencingToken, w.cfg.ID, disp.Handler, strings.Join(w.cfg.Registry.Names(), ", ")); err != nil {
			log.Warn("worker: note that a task waits for a handler", "error", err)
		}
	}
	_ = backoff.Sleep(ctx, wait)
	w.cfg.Metrics.HandedBack.WithLabelValues("unknown_handler").Inc()
	log.Debug("worker: handing back a task whose handler this worker does not register",
		"handler", disp.Handler, "ready_for", age.String(), "waited", wait.String())
	if err := d.Requeue(); err != nil {
		log.Warn("worker: hand back", "error", err)
	}
	w.signals.deliveryHandedBack(disp.TaskRunID)
	return true
}

// claimCommitted reads back a claim that failed with claimErr: the claim
// committed if the task is RUNNING for this worker with the token the claim
// would have returned. It retries the read for up to one lease (past that,
// a committed claim's lease has lapsed anyway) and then renews the lease
// once, so the attempt starts with a whole lease. ok=false means run
// nothing and requeue the delivery (claimErr is logged here).
func (w *Worker) claimCommitted(disp core.Dispatch, claimErr error, log *slog.Logger) (store.ClaimedTask, bool) {
	deadline := w.cfg.Clock.Now().Add(w.cfg.Lease)
	bo := backoff.Backoff{Min: 50 * time.Millisecond, Max: max(w.cfg.Lease/10, 50*time.Millisecond)}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), max(w.cfg.Lease/3, time.Second))
		c, ok, err := w.cfg.Store.ClaimedBy(ctx, disp.TaskRunID, disp.FencingToken+1, w.cfg.ID)
		cancel()
		switch {
		case err == nil && !ok:
			w.cfg.Metrics.AmbiguousWrites.WithLabelValues("claim", "not_committed").Inc()
			log.Error("worker: claim failed; requeueing the delivery", "error", claimErr)
			return store.ClaimedTask{}, false
		case err == nil:
			w.cfg.Metrics.AmbiguousWrites.WithLabelValues("claim", "committed").Inc()
			log.Warn("worker: the claim committed although its reply was lost; running the task", "error", claimErr)
			rctx, cancel := context.WithTimeout(context.Background(), max(w.cfg.Lease/3, time.Second))
			res, rerr := w.cfg.Renewer.Renew(rctx, c.ID, c.FencingToken, w.cfg.Lease)
			cancel()
			if rerr == nil && !res.OK {
				log.Warn("worker: the recovered claim's lease was lost before it could be renewed; running nothing")
				return store.ClaimedTask{}, false
			}
			return c, true
		case w.cfg.Clock.Now().After(deadline):
			log.Error("worker: claim failed and could not be read back; requeueing the delivery", "error", claimErr, "read_error", err)
			return store.ClaimedTask{}, false
		}
		time.Sleep(bo.Fail())
	}
}

// WaitNoter is implemented by a Store that records that a task waits for a
// worker with its handler (*store.Store does); see
// store.Store.NoteWaitingForHandler.
type WaitNoter interface {
	NoteWaitingForHandler(ctx context.Context, id uuid.UUID, token int64, workerID, handler, registered string) (bool, error)
}

// Pacing of hand-backs of one task (see handBack).
const (
	HandBackMinDefault = 50 * time.Millisecond
	// HandBackMaxDefault caps one wait: a delivery held here occupies one
	// of the consumer's prefetch slots, so it stays short.
	HandBackMaxDefault = 2 * time.Second
	// handBackTasksMax bounds the tasks handBackPacer remembers; when it
	// is full it starts over (the next hand-backs wait the minimum again).
	handBackTasksMax = 4096
)

// handBackPacer remembers, per task, how often this worker has handed it
// back at its current fencing token. Safe for concurrent use.
type handBackPacer struct {
	mu    sync.Mutex
	tasks map[uuid.UUID]*handBackState
}

type handBackState struct {
	token int64
	bo    backoff.Backoff
}

// next records a hand-back of task id at token and returns how long to
// wait before requeueing it, and whether it is the first hand-back at that
// token that this worker remembers.
func (p *handBackPacer) next(id uuid.UUID, token int64) (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, ok := p.tasks[id]
	if !ok || st.token != token {
		if p.tasks == nil || len(p.tasks) >= handBackTasksMax {
			p.tasks = make(map[uuid.UUID]*handBackState)
		}
		st = &handBackState{token: token, bo: backoff.Backoff{Min: HandBackMinDefault, Max: HandBackMaxDefault}}
		p.tasks[id] = st
		ok = false
	}
	return st.bo.Fail(), !ok
}

// forget drops task id (it is no longer handed back).
func (p *handBackPacer) forget(id uuid.UUID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.tasks, id)
}

func (w *Worker) explainLostClaim(ctx context.Context, disp core.Dispatch) string {
	state, token, err := w.cfg.Store.TaskStateOf(ctx, disp.TaskRunID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return "unknown_task"
	case err != nil:
		return "unknown"
	case state == core.TaskReady && token != disp.FencingToken:
		return "stale"
	case state == core.TaskCancelled:
		return "cancelled"
	case state == core.TaskReady:
		// READY at the delivery's own token: the claim's fence refused it
		// because the workflow is paused (or, for an instant, because its
		// run's cancellation is being written). The ack hands it back: the
		// task stays READY, and the resume re-sends it.
		return "paused"
	default:
		return "duplicate"
	}
}

// execute runs one claimed attempt and records its outcome. The error is
// non-nil when the outcome's fate is unknown (finish gave up: see finish);
// nil when it was recorded or rejected by its fencing token.
func (w *Worker) execute(c store.ClaimedTask) error {
	w.cfg.Metrics.InFlight.Inc()
	defer w.cfg.Metrics.InFlight.Dec()
	log := w.log.With("task_run_id", c.ID, "run_id", c.RunID, "task", c.TaskName, "attempt", c.Attempt, "fencing_token", c.FencingToken)
	log.Debug("worker: running task", "handler", c.Handler)

	hctx, cancel := context.WithCancelCause(w.abortCtx)
	defer cancel(nil)
	runCtx := hctx
	if t := c.Timeout(); t > 0 {
		var cancelT context.CancelFunc
		runCtx, cancelT = context.WithTimeoutCause(hctx, t, fmt.Errorf("%w after %s", ErrTimeout, t))
		defer cancelT()
	}
	hb := w.heartbeat(c, cancel, log)
	w.track(c.RunID, hb)
	result, reusedFrom, runErr := w.invoke(runCtx, c, log)

	cause := context.Cause(runCtx)
	req := store.FinishRequest{ID: c.ID, Token: c.FencingToken, WorkerID: w.cfg.ID}
	switch {
	case runErr == nil:
		req.Outcome = store.OutcomeSucceeded
		req.Result = core.SanitizeResult(result)
		if c.IdempotencyKey.Valid {
			req.IdempotencyKey = c.IdempotencyKey.String
		}
		req.ReusedFrom = reusedFrom
	case errors.Is(cause, core.ErrRunCancelled):
		req.Outcome = store.OutcomeCancelled
		req.Error = "cancelled: " + core.SanitizeText(runErr.Error(), core.MaxErrorBytes)
	default:
		req.Outcome = store.OutcomeFailed
		msg := runErr.Error()
		if cause != nil && !errors.Is(runErr, cause) {
			msg = fmt.Sprintf("%s (%v)", msg, cause)
		}
		req.Error = core.SanitizeText(msg, core.MaxErrorBytes)
		req.Permanent = core.IsPermanent(runErr)
		req.RetryDelay = c.Policy().Backoff(c.Attempt, nil)
	}
	// The heartbeat keeps renewing while the outcome is recorded: a finish
	// slowed by the database (a lock, a failover) must not let the lease
	// lapse and have a completed attempt reaped and run again.
	hb.finishing.Store(true)
	state, ok, err := w.finish(req, log)
	w.untrack(c.RunID, hb)
	hb.stop()
	defer w.signals.attemptFinished(attemptFinished{Req: req, State: state, OK: ok, Err: err})
	switch {
	case errors.Is(err, errOutcomeUnknown):
		log.Error("worker: the outcome may have been recorded: a try got no answer and the attempt could not be read back; if it was not recorded, the reaper retries the task once its lease expires", "error", err)
	case err != nil:
		log.Error("worker: could not record the outcome; the lease will expire and the task will be retried", "error", err)
	case !ok:
		w.cfg.Metrics.StaleWrites.WithLabelValues("finish").Inc()
		log.Warn("worker: stale finish rejected by fencing token (lease lost); outcome discarded", "outcome", req.Outcome)
	default:
		w.cfg.Metrics.TasksFinished.WithLabelValues(string(state)).Inc()
		if req.Outcome == store.OutcomeSucceeded {
			log.Debug("worker: task finished", "state", state)
		} else {
			log.Debug("worker: task finished", "state", state, "error", req.Error, "retry_in", req.RetryDelay.String())
		}
	}
	return err
}

// heartbeatLoop is the lease renewal of one attempt.
type heartbeatLoop struct {
	// finishing is set once the handler returned and its outcome is being
	// recorded: a renewal that then matches nothing lost to that finish (or
	// to the reaper, which the finish will report), so it is not a fault
	// of its own and cancels nothing.
	finishing atomic.Bool
	stop      func()
	// check asks for a renewal now (a cancel notification): the renewal's
	// Stop flag, read from the database, decides whether to cancel.
	check chan struct{}
}

// listenForCancels LISTENs on store.CancelChannel at Config.DatabaseURL
// (reconnecting with backoff) and hands each notification to
// cancelNotified, until ctx ends.
func (w *Worker) listenForCancels(ctx context.Context) {
	daemon.Listen(ctx, w.cfg.DatabaseURL, store.CancelChannel, w.log, w.cancelNotified)
}

// track registers hb as an attempt of run in flight.
func (w *Worker) track(run uuid.UUID, hb *heartbeatLoop) {
	w.runningMu.Lock()
	defer w.runningMu.Unlock()
	if w.running == nil {
		w.running = make(map[uuid.UUID]map[*heartbeatLoop]struct{})
	}
	if w.running[run] == nil {
		w.running[run] = make(map[*heartbeatLoop]struct{})
	}
	w.running[run][hb] = struct{}{}
}

// untrack removes what track registered.
func (w *Worker) untrack(run uuid.UUID, hb *heartbeatLoop) {
	w.runningMu.Lock()
	defer w.runningMu.Unlock()
	delete(w.running[run], hb)
	if len(w.running[run]) == 0 {
		delete(w.running, run)
	}
}

// cancelNotified handles a CancelChannel notification: items are run ids
// (or store.CancelAllRuns; nil after a (re)connect, when notifications may
// have been missed). Every attempt in flight of those runs renews its lease
// at once, and the renewal's Stop flag cancels its handler with
// core.ErrRunCancelled. The notification is only a hint: the database
// decides, as at every heartbeat. Items that are not run ids are ignored.
func (w *Worker) cancelNotified(items []string) {
	all := items == nil
	runs := make(map[uuid.UUID]bool, len(items))
	for _, it := range items {
		if it == store.CancelAllRuns {
			all = true
			continue
		}
		if id, err := uuid.Parse(it); err == nil {
			runs[id] = true
		}
	}
	w.runningMu.Lock()
	defer w.runningMu.Unlock()
	for run, hbs := range w.running {
		if !all && !runs[run] {
			continue
		}
		if !all {
			w.log.Info("worker: cancel notification; checking the run's running tasks", "run_id", run, "tasks", len(hbs))
		}
		for hb := range hbs {
			select {
			case hb.check <- struct{}{}:
			default: // a check is already pending
			}
		}
	}
}

// heartbeat renews the lease every Lease/3 until stopped, through the
// Renewer's own pool, and at once when hb.check is signalled. While the handler runs it cancels the handler's
// context with core.ErrLeaseLost when the renewal matches nothing, and with
// core.ErrRunCancelled when the run was cancelled.
func (w *Worker) heartbeat(c store.ClaimedTask, cancel context.CancelCauseFunc, log *slog.Logger) *heartbeatLoop {
	hb := &heartbeatLoop{check: make(chan struct{}, 1)}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		interval := w.cfg.Lease / 3
		// A failed renewal is retried soon, not at the next interval: the
		// lease must be renewed as soon as the database answers again.
		retry := backoff.Backoff{Min: max(w.cfg.Lease/60, 10*time.Millisecond), Max: max(w.cfg.Lease/15, 20*time.Millisecond)}
		t := time.NewTimer(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			case <-hb.check:
			}
			ctx, cc := context.WithTimeout(context.Background(), interval)
			res, err := w.cfg.Renewer.Renew(ctx, c.ID, c.FencingToken, w.cfg.Lease)
			cc()
			if err != nil {
				d := retry.Fail()
				if retry.Failures() == 1 || retry.Failures()%20 == 0 {
					log.Warn("worker: heartbeat failed; retrying", "error", err, "failures", retry.Failures(), "retry_in", d.String())
				}
				t.Reset(d)
				continue
			}
			if retry.Reset() {
				log.Info("worker: heartbeat recovered", "dependency", "postgres")
			}
			t.Reset(interval)
			switch {
			case !res.OK && hb.finishing.Load():
				return
			case !res.OK:
				w.cfg.Metrics.StaleWrites.WithLabelValues("renew").Inc()
				log.Warn("worker: heartbeat rejected by fencing token: lease lost; cancelling the handler")
				cancel(core.ErrLeaseLost)
				return
			case res.Stop && !hb.finishing.Load():
				log.Info("worker: run cancelled; cancelling the handler")
				cancel(core.ErrRunCancelled)
			}
		}
	}()
	hb.stop = func() {
		close(done)
		wg.Wait()
	}
	return hb
}

// invoke resolves the idempotency key, then runs the handler, turning a
// panic into an error. A non-nil source means the result is the one that
// task run recorded for the key: the handler did not run.
func (w *Worker) invoke(ctx context.Context, c store.ClaimedTask, log *slog.Logger) (json.RawMessage, *store.KeySource, error) {
	if c.IdempotencyKey.Valid && c.IdempotencyKey.String != "" {
		res, from, err := w.awaitKey(ctx, c, log)
		if err != nil || from != nil {
			return res, from, err
		}
	}
	res, err := w.runHandler(ctx, c, log)
	return res, nil, err
}

// runHandler looks the handler up and calls it.
func (w *Worker) runHandler(ctx context.Context, c store.ClaimedTask, log *slog.Logger) (json.RawMessage, error) {
	h, ok := w.cfg.Registry.Lookup(c.Handler)
	if !ok {
		hint := "every worker on a queue should register the same handlers, or use a --queue of its own"
		if c.Handler == "shell" {
			hint = "start the worker with --allow-shell to enable it"
		}
		return nil, core.Permanent(fmt.Errorf("unknown handler %q: no worker that took it registers it (this one registers %v); %s", c.Handler, w.cfg.Registry.Names(), hint))
	}
	task := core.Task{
		RunID: c.RunID.String(), TaskRunID: c.ID.String(), Workflow: c.Workflow, TaskName: c.TaskName,
		Attempt: c.Attempt, MaxAttempts: c.MaxAttempts,
		RunParams: json.RawMessage(c.RunParams), Params: json.RawMessage(c.Params),
		Upstream: c.UpstreamResults(), IdempotencyKey: c.IdempotencyKey.String,
	}
	return w.call(ctx, h, task, log)
}

func (w *Worker) call(ctx context.Context, h core.Handler, task core.Task, log *slog.Logger) (res json.RawMessage, err error) {
	defer func() {
		if r := recover(); r != nil {
			w.cfg.Metrics.HandlerPanics.Inc()
			log.Error("worker: handler panicked", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			res, err = nil, fmt.Errorf("handler panicked: %v", r)
		}
	}()
	return h(ctx, task)
}

// awaitKey makes this attempt the key's owner, or waits for the owner's
// result. A non-nil source means the result is that task run's; the finish
// records it (reused_from and the history's reason).
func (w *Worker) awaitKey(ctx context.Context, c store.ClaimedTask, log *slog.Logger) (json.RawMessage, *store.KeySource, error) {
	bo := backoff.Backoff{Min: 20 * time.Millisecond, Max: time.Second}
	for {
		kc, err := w.cfg.Store.ClaimIdempotencyKey(ctx, c.IdempotencyKey.String, c.ID, c.FencingToken)
		switch {
		case err != nil:
			return nil, nil, fmt.Errorf("idempotency key %q: %w", c.IdempotencyKey.String, err)
		case kc.Owned:
			return nil, nil, nil
		case kc.Done:
			log.Info("worker: reusing the result recorded for the idempotency key", "idempotency_key", c.IdempotencyKey.String,
				"reused_from_task_run_id", kc.From.TaskRunID, "reused_from_run_id", kc.From.RunID)
			from := kc.From
			return json.RawMessage(kc.Result), &from, nil
		}
		if err := backoff.Sleep(ctx, bo.Fail()); err != nil {
			return nil, nil, fmt.Errorf("waiting for idempotency key %q: %w", c.IdempotencyKey.String, context.Cause(ctx))
		}
	}
}
