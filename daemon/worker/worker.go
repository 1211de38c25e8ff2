package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/tracing"
)

// ErrAborted is the cause of handler contexts cancelled by Abort: the
// worker was told to stop without waiting (a second stop signal, or
// --stop-timeout passed after the first). The
// attempt is recorded as failed and retried after its backoff.
var ErrAborted = errors.New("worker aborted: a second stop signal, or --stop-timeout passed, cancelled the handler")

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
	// Installation is this database's installation (see foreign.go).
	Installation(ctx context.Context) (store.Installation, error)
	// MarkAlone records that a crash suspect's attempt runs alone (see
	// suspect.go).
	MarkAlone(ctx context.Context, id uuid.UUID, token int64) (bool, error)
}

// Renewer renews leases. The worker renews through its own small pool so
// that handlers or claims that exhaust the main pool cannot starve
// heartbeats.
type Renewer interface {
	Renew(ctx context.Context, id uuid.UUID, token int64, lease time.Duration) (store.RenewResult, error)
}

// Worker consumes dispatches and runs handlers.
type Worker struct {
	cfg    Config
	tracer trace.Tracer // spans of traced deliveries (trace.go)
	log    *slog.Logger
	slots  chan struct{}
	// gate runs a crash suspect's handler alone (suspect.go).
	gate crashGate
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

	// ours is this worker's installation id once read; foreignPacer,
	// foreignLog and forwarder send other installations' dispatches back
	// to the queue (foreign.go).
	ours         atomic.Pointer[uuid.UUID]
	foreignPacer handBackPacer
	foreignLog   foreignLogLimiter
	forwarder    *forwarder

	// running holds the heartbeats of the attempts in flight, by run id, so
	// that a cancel notification can make them renew at once.
	runningMu sync.Mutex
	running   map[uuid.UUID]map[*heartbeatLoop]struct{}

	// logs writes the attempts' task logs; nil with task logs off.
	logs *taskLogWriter

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
		gate:               newCrashGate(cfg.Concurrency),
		pending:            make(chan pendingDelivery, cfg.Concurrency),
		statementsInFlight: statementsInFlightDefault,
		abortCtx:           ctx,
		abort:              cancel,
		tracer:             tracing.Tracer(cfg.TracerProvider),
	}
	fwd := cfg.Broker
	fwd.Cursor = &broker.Cursor{} // the forwarder's connection fails over on its own
	w.forwarder = &forwarder{cfg: fwd}
	if !cfg.TaskLogsOff && cfg.TaskLogs != nil {
		w.logs = newTaskLogWriter(cfg.TaskLogs, cfg.Metrics, w.log)
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
	if w.logs != nil {
		// The writer outlives ctx too: the attempts a graceful stop waits
		// for still log; it stops (with a last write) once they ended.
		logCtx, stopLogs := context.WithCancel(context.WithoutCancel(ctx))
		listening.Add(1)
		go func() {
			defer listening.Done()
			w.logs.run(logCtx)
		}()
		defer stopLogs()
	}
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
	w.forwarder.close()
	close(pending)
	loops.Wait()
	if cons != nil {
		cons.Close()
	}
	w.abort(ErrAborted)
	w.log.Info("worker: stopped")
	return nil
}
