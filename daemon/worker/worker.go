package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
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

// ErrAborted is the cause of handler contexts cancelled by Abort: the
// worker was told to stop without waiting (a second stop signal). The
// attempt is recorded as failed and retried after its backoff.
var ErrAborted = errors.New("worker aborted: a second stop signal cancelled the handler")

// ErrTimeout is the cause of a handler context whose task timeout elapsed.
var ErrTimeout = errors.New("task timeout")

// Store is what the worker needs from the database.
type Store interface {
	Claim(ctx context.Context, id uuid.UUID, token int64, workerID string, lease time.Duration) (store.ClaimedTask, bool, error)
	TaskStateOf(ctx context.Context, id uuid.UUID) (core.TaskState, int64, error)
	ClaimedBy(ctx context.Context, id uuid.UUID, token int64, workerID string) (store.ClaimedTask, bool, error)
	OwnershipOf(ctx context.Context, id uuid.UUID) (store.TaskOwnership, error)
	Finish(ctx context.Context, req store.FinishRequest) (core.TaskState, bool, error)
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
	// run every Lease/3 (default LeaseDefault).
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
	if c.Concurrency <= 0 {
		c.Concurrency = ConcurrencyDefault
	}
	if c.Lease <= 0 {
		c.Lease = LeaseDefault
	}
	if c.Lease < 30*time.Millisecond {
		return fmt.Errorf("worker: lease %s is too short", c.Lease)
	}
	if c.SlotWait <= 0 {
		c.SlotWait = SlotWaitDefault
	}
	if c.UnknownHandlerGrace <= 0 {
		c.UnknownHandlerGrace = UnknownHandlerGraceDefault
	}
	if c.ID == "" {
		c.ID = "worker-" + uuid.NewString()[:8]
	}
	if err := CheckID(c.ID); err != nil {
		return fmt.Errorf("worker: %w", err)
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
	wg    sync.WaitGroup

	abortCtx context.Context
	abort    context.CancelCauseFunc

	consuming atomic.Bool
	first     *broker.Consumer
	current   atomic.Pointer[broker.Consumer] // the consumer of Run, nil between connections
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
		cfg:      cfg,
		log:      cfg.Logger.With("component", "worker", "worker_id", cfg.ID),
		slots:    make(chan struct{}, cfg.Concurrency),
		abortCtx: ctx,
		abort:    cancel,
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
		w.log.Warn("worker: broker not reachable at start; will retry", "err", err)
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
	bo := daemon.Recovery{Component: "worker", Dependency: "rabbitmq", Log: w.log, Metrics: w.cfg.Metrics}
	w.log.Info("worker: started", "concurrency", w.cfg.Concurrency, "lease", w.cfg.Lease.String(), "handlers", w.cfg.Registry.Names())
	cons := w.first
	w.first = nil
	for ctx.Err() == nil {
		if cons == nil {
			var err error
			cons, err = broker.DialConsumer(ctx, w.cfg.Broker, w.cfg.Concurrency, w.cfg.ID)
			if err != nil {
				if ctx.Err() != nil {
					break
				}
				d := bo.Fail()
				w.log.Error("worker: connect to broker", "err", err, "failures", bo.Failures(), "retry_in", d.String())
				_ = backoff.Sleep(ctx, d)
				continue
			}
		}
		bo.Succeeded()
		w.consuming.Store(true)
		w.current.Store(cons)
		w.consume(ctx, cons)
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
			w.log.Warn("worker: the broker cancelled the consumer (queue deleted?); re-declaring and re-subscribing", "err", err, "retry_in", d.String())
		} else {
			w.log.Warn("worker: broker connection lost; reconnecting", "err", err, "retry_in", d.String())
		}
		_ = backoff.Sleep(ctx, d)
	}
	w.log.Info("worker: stopping; waiting for in-flight tasks")
	if cons != nil {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = cons.Cancel(cctx)
		cancel()
	}
	w.wg.Wait()
	if cons != nil {
		cons.Close()
	}
	w.abort(ErrAborted)
	w.log.Info("worker: stopped")
	return nil
}

func (w *Worker) consume(ctx context.Context, cons *broker.Consumer) {
	for {
		select {
		case <-ctx.Done():
			return
		case d, ok := <-cons.Deliveries():
			if !ok {
				return
			}
			w.wg.Add(1)
			go w.handle(ctx, d)
		}
	}
}

// handle settles one delivery exactly once.
func (w *Worker) handle(ctx context.Context, d broker.Delivery) {
	defer w.wg.Done()
	disp, err := DecodeDispatch(d.Body)
	if err != nil {
		w.cfg.Metrics.PoisonMessages.Inc()
		w.log.Error("worker: rejected a message that is not a dispatch (sent to the dead-letter queue)",
			"message_id", d.MessageID, "err", err, "body_prefix", core.SanitizeText(string(d.Body), 200))
		if err := d.Reject(); err != nil {
			w.log.Warn("worker: reject poison message", "err", err)
		}
		return
	}
	log := w.log.With("task_run_id", disp.TaskRunID, "run_id", disp.RunID, "fencing_token", disp.FencingToken)
	if w.handBack(ctx, d, disp, log) {
		return
	}
	timer := time.NewTimer(w.cfg.SlotWait)
	defer timer.Stop()
	select {
	case w.slots <- struct{}{}:
	case <-timer.C:
		w.cfg.Metrics.HandedBack.WithLabelValues("no_slot").Inc()
		log.Info("worker: no free slot; handing the delivery back", "slot_wait", w.cfg.SlotWait.String())
		_ = d.Requeue()
		return
	case <-ctx.Done():
		_ = d.Requeue()
		return
	}
	defer func() { <-w.slots }()
	if ctx.Err() != nil {
		_ = d.Requeue()
		return
	}
	// The claim must not be cut short by shutdown: a statement cancelled
	// after the server committed it would leave a RUNNING task that this
	// worker never runs (until its lease expires and costs an attempt).
	// Shutdown was checked just above; the claim itself is bounded.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.Lease)
	claimed, ok, err := w.cfg.Store.Claim(cctx, disp.TaskRunID, disp.FencingToken, w.cfg.ID, w.cfg.Lease)
	cancel()
	if err != nil {
		// The error may have come after the claim committed (its reply was
		// lost): read the row back and act on what it says. A lock
		// timeout is certain to have written nothing.
		if errors.Is(err, store.ErrLockTimeout) {
			log.Warn("worker: claim gave up waiting for a lock; requeueing the delivery", "err", err)
		} else {
			claimed, ok = w.claimCommitted(disp, err, log)
		}
		if !ok {
			_ = backoff.Sleep(ctx, time.Second)
			_ = d.Requeue()
			return
		}
	}
	if !ok {
		reason := w.explainLostClaim(ctx, disp)
		w.cfg.Metrics.ClaimsLost.WithLabelValues(reason).Inc()
		log.Info("worker: claim lost; acking without running", "reason", reason, "redelivered", d.Redelivered)
		if err := d.Ack(); err != nil {
			log.Warn("worker: ack", "err", err)
		}
		return
	}
	w.cfg.Metrics.TasksClaimed.Inc()
	if err := d.Ack(); err != nil {
		// The claim committed: the lease, not the broker, now governs this
		// task. A redelivery will lose its claim.
		log.Warn("worker: ack after claim failed; the lease governs the task", "err", err)
	}
	w.execute(claimed)
}

// handBack requeues, without claiming, a delivery for a handler this worker
// does not register, so that a worker that does can run it: workers with
// different handler sets may share a queue. It does so while the task has
// been READY for less than UnknownHandlerGrace on the database clock; after
// that it lets the claim go ahead and the attempt fail permanently, so a
// task no worker can run ends DEAD instead of circulating forever. Each
// hand-back waits 50 ms first, which bounds how fast an orphan circulates.
func (w *Worker) handBack(ctx context.Context, d broker.Delivery, disp Dispatch, log *slog.Logger) bool {
	if disp.Handler == "" || w.cfg.Registry.Has(disp.Handler) {
		return false
	}
	age, ready, err := w.cfg.Store.ReadyFor(ctx, disp.TaskRunID)
	if err != nil || !ready || age >= w.cfg.UnknownHandlerGrace {
		return false // the claim decides (and fails it permanently if it wins)
	}
	_ = backoff.Sleep(ctx, 50*time.Millisecond)
	w.cfg.Metrics.HandedBack.WithLabelValues("unknown_handler").Inc()
	log.Debug("worker: handing back a task whose handler this worker does not register",
		"handler", disp.Handler, "ready_for", age.String())
	if err := d.Requeue(); err != nil {
		log.Warn("worker: hand back", "err", err)
	}
	return true
}

// claimCommitted reads back a claim that failed with claimErr: the claim
// committed if the task is RUNNING for this worker with the token the claim
// would have returned. It retries the read for up to one lease (past that,
// a committed claim's lease has lapsed anyway) and then renews the lease
// once, so the attempt starts with a whole lease. ok=false means run
// nothing and requeue the delivery (claimErr is logged here).
func (w *Worker) claimCommitted(disp Dispatch, claimErr error, log *slog.Logger) (store.ClaimedTask, bool) {
	deadline := w.cfg.Clock.Now().Add(w.cfg.Lease)
	bo := backoff.Backoff{Min: 50 * time.Millisecond, Max: max(w.cfg.Lease/10, 50*time.Millisecond)}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), max(w.cfg.Lease/3, time.Second))
		c, ok, err := w.cfg.Store.ClaimedBy(ctx, disp.TaskRunID, disp.FencingToken+1, w.cfg.ID)
		cancel()
		switch {
		case err == nil && !ok:
			w.cfg.Metrics.AmbiguousWrites.WithLabelValues("claim", "not_committed").Inc()
			log.Error("worker: claim failed; requeueing the delivery", "err", claimErr)
			return store.ClaimedTask{}, false
		case err == nil:
			w.cfg.Metrics.AmbiguousWrites.WithLabelValues("claim", "committed").Inc()
			log.Warn("worker: the claim committed although its reply was lost; running the task", "err", claimErr)
			rctx, cancel := context.WithTimeout(context.Background(), max(w.cfg.Lease/3, time.Second))
			res, rerr := w.cfg.Renewer.Renew(rctx, c.ID, c.FencingToken, w.cfg.Lease)
			cancel()
			if rerr == nil && !res.OK {
				log.Warn("worker: the recovered claim's lease was lost before it could be renewed; running nothing")
				return store.ClaimedTask{}, false
			}
			return c, true
		case w.cfg.Clock.Now().After(deadline):
			log.Error("worker: claim failed and could not be read back; requeueing the delivery", "err", claimErr, "read_err", err)
			return store.ClaimedTask{}, false
		}
		time.Sleep(bo.Fail())
	}
}

func (w *Worker) explainLostClaim(ctx context.Context, disp Dispatch) string {
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
	default:
		return "duplicate"
	}
}

// execute runs one claimed attempt and records its outcome.
func (w *Worker) execute(c store.ClaimedTask) {
	w.cfg.Metrics.InFlight.Inc()
	defer w.cfg.Metrics.InFlight.Dec()
	log := w.log.With("task_run_id", c.ID, "run_id", c.RunID, "task", c.TaskName, "attempt", c.Attempt, "fencing_token", c.FencingToken)
	log.Info("worker: running task", "handler", c.Handler)

	hctx, cancel := context.WithCancelCause(w.abortCtx)
	defer cancel(nil)
	runCtx := hctx
	if t := c.Timeout(); t > 0 {
		var cancelT context.CancelFunc
		runCtx, cancelT = context.WithTimeoutCause(hctx, t, fmt.Errorf("%w after %s", ErrTimeout, t))
		defer cancelT()
	}
	hb := w.heartbeat(c, cancel, log)
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
	hb.stop()
	switch {
	case err != nil:
		log.Error("worker: could not record the outcome; the lease will expire and the task will be retried", "err", err)
	case !ok:
		w.cfg.Metrics.StaleWrites.WithLabelValues("finish").Inc()
		log.Warn("worker: stale finish rejected by fencing token (lease lost); outcome discarded", "outcome", req.Outcome)
	default:
		w.cfg.Metrics.TasksFinished.WithLabelValues(string(state)).Inc()
		if req.Outcome == store.OutcomeSucceeded {
			log.Info("worker: task finished", "state", state)
		} else {
			log.Warn("worker: task finished", "state", state, "err", req.Error, "retry_in", req.RetryDelay.String())
		}
	}
}

// finish records the outcome, retrying database errors for up to one lease
// (the heartbeat keeps renewing meanwhile); past that the worker gives up,
// its heartbeat stops and the lapsed lease hands the task to the reaper.
func (w *Worker) finish(req store.FinishRequest, log *slog.Logger) (core.TaskState, bool, error) {
	deadline := w.cfg.Clock.Now().Add(w.cfg.Lease)
	var bo backoff.Backoff
	bo.Min, bo.Max = 50*time.Millisecond, 2*time.Second
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		state, ok, err := w.cfg.Store.Finish(ctx, req)
		cancel()
		if err == nil {
			ambiguous := bo.Reset()
			if ambiguous {
				log.Info("worker: recovered", "dependency", "postgres")
			}
			if !ok && ambiguous {
				// An earlier try may have committed and lost its reply:
				// then this one matched nothing because the task already
				// left RUNNING with our token, which no fencing rejection
				// does (the reaper and a newer claim bump the token).
				if st, committed := w.finishCommitted(req, log); committed {
					return st, true, nil
				}
			}
			return state, ok, nil
		}
		if w.cfg.Clock.Now().After(deadline) {
			return "", false, err
		}
		d := bo.Fail()
		log.Warn("worker: finish failed; retrying", "err", err, "retry_in", d.String())
		time.Sleep(d)
	}
}

// finishCommitted reads back a finish that matched nothing after an
// earlier try failed: it committed if the task left RUNNING (to a state a
// finish writes) with this attempt's token and worker.
func (w *Worker) finishCommitted(req store.FinishRequest, log *slog.Logger) (core.TaskState, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	own, err := w.cfg.Store.OwnershipOf(ctx, req.ID)
	cancel()
	if err != nil {
		log.Warn("worker: could not read back a finish whose reply was lost", "err", err)
		return "", false
	}
	switch own.State {
	case core.TaskSucceeded, core.TaskRetrying, core.TaskDead, core.TaskCancelled:
		if own.Token == req.Token && own.WorkerID == req.WorkerID {
			w.cfg.Metrics.AmbiguousWrites.WithLabelValues("finish", "committed").Inc()
			log.Info("worker: the finish committed although its reply was lost", "state", own.State)
			return own.State, true
		}
	}
	w.cfg.Metrics.AmbiguousWrites.WithLabelValues("finish", "not_committed").Inc()
	return "", false
}

// heartbeatLoop is the lease renewal of one attempt.
type heartbeatLoop struct {
	// finishing is set once the handler returned and its outcome is being
	// recorded: a renewal that then matches nothing lost to that finish (or
	// to the reaper, which the finish will report), so it is not a fault
	// of its own and cancels nothing.
	finishing atomic.Bool
	stop      func()
}

// heartbeat renews the lease every Lease/3 until stopped, through the
// Renewer's own pool. While the handler runs it cancels the handler's
// context with core.ErrLeaseLost when the renewal matches nothing, and with
// core.ErrRunCancelled when the run was cancelled.
func (w *Worker) heartbeat(c store.ClaimedTask, cancel context.CancelCauseFunc, log *slog.Logger) *heartbeatLoop {
	hb := &heartbeatLoop{}
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
			}
			ctx, cc := context.WithTimeout(context.Background(), interval)
			res, err := w.cfg.Renewer.Renew(ctx, c.ID, c.FencingToken, w.cfg.Lease)
			cc()
			if err != nil {
				d := retry.Fail()
				if retry.Failures() == 1 || retry.Failures()%20 == 0 {
					log.Warn("worker: heartbeat failed; retrying", "err", err, "failures", retry.Failures(), "retry_in", d.String())
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
