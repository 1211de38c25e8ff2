package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/tracing"
	"github.com/flowforge/flowforge/daemon"
	"github.com/flowforge/flowforge/daemon/backoff"
	"github.com/flowforge/flowforge/daemon/clock"
)

// Store is what the scheduler needs from the database.
type Store interface {
	Now(ctx context.Context) (time.Time, error)
	Reap(ctx context.Context, req store.ReapRequest) (store.ReapResult, error)
	Advance(ctx context.Context, after *store.Cursor, limit int, actor string) (store.AdvanceResult, error)
	AdvanceRuns(ctx context.Context, ids []uuid.UUID, actor string) (store.AdvanceResult, error)
	SweepCandidates(ctx context.Context, limit int, from store.Cursor) ([]uuid.UUID, store.Cursor, error)
	Redispatch(ctx context.Context, after time.Duration, limit int, actor string) (int, error)
	Admit(ctx context.Context, after, actor string) (store.AdmitResult, error)
}

// Scheduler promotes, retries, reaps and derives run states.
type Scheduler struct {
	cfg      Config
	log      *slog.Logger
	lastPass atomic.Int64 // unix nanos of the last completed pass
	tracer   trace.Tracer // promote spans of traced runs (trace.go)
	healthy  atomic.Bool

	// Owned by the goroutine that calls RunOnce (Run's), on the database's
	// clock: the start of the last sweep that completed (an outage's
	// Since), when a sweep last reached the database (its first statement;
	// the outage gap's origin), whether a pass failed to reach it since,
	// and the latest outage seen.
	lastDB, lastReached time.Time
	failed              bool
	outage              *store.Outage
	// held are the runs targeted passes handed back, passed again later
	// (paced; the loop's too).
	held *heldRuns
	// Also the loop's: on the process clock, when the last sweep and the
	// last full pass began (zero: never), only to throttle them.
	lastSweep, lastFull time.Time
	// probeFrom is where the next sweep's probes of open runs start
	// (store.SweepCandidates). Owned by the loop.
	probeFrom store.Cursor

	// admitNext is where the next admission round starts (store.Admit's
	// Next); rateDue, when not zero, is when (process clock, only to wake)
	// a rate key that task runs wait for has room again. Owned by the loop.
	admitNext string
	rateDue   time.Time
	// admitAt is when the next admission round may run (Config.Clock,
	// AdmitSpacingPerCounted), admitPending that a turn before it skipped
	// one, for the loop to run it then. Owned by the loop.
	admitAt      time.Time
	admitPending bool

	// badSpecs names the schedules whose unparsable spec was logged.
	badSpecs map[string]bool

	signals testSignals // a nil channel outside this package's tests
}

// New validates cfg and returns a Scheduler.
func New(cfg Config) (*Scheduler, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Scheduler{cfg: cfg, log: cfg.Logger, badSpecs: map[string]bool{}, held: newHeldRuns(cfg.SweepInterval),
		tracer: tracing.Tracer(cfg.TracerProvider)}, nil
}

// Run loops until ctx ends, then returns nil. Each turn it advances the
// runs the TasksChannel notifications named since the last turn, and the
// runs handed back earlier whose retry is due (store.AdvanceRuns,
// BatchSize runs a transaction; see heldRuns), then sweeps when one is
// due: at the first turn, every SweepInterval, on a store.AnyRun
// notification (at most ten times a SweepInterval), and after a turn that
// could not reach the database; the sweep includes the full pass every
// FullSweepInterval and after the listener (re)connected. A database fault
// never ends it. When the database could not be reached
// (store.IsUnreachable) the turn is retried with capped, jittered backoff
// (the runs it failed to advance kept for the next), the loss is counted as
// an outage, and "scheduler: recovered" is logged when a turn succeeds
// again. A failure the database answered (a lock or statement timeout) is
// logged and is no outage: the runs of a refused targeted pass are passed
// again later and the turn sweeps as it would have; a refused sweep is
// tried again at the next tick.
func (s *Scheduler) Run(ctx context.Context) error {
	var runs *daemon.RunSet
	var wake <-chan struct{}
	if s.cfg.DatabaseURL != "" {
		var wait func()
		runs, wait = daemon.WatchRuns(ctx, s.cfg.DatabaseURL, s.log)
		defer wait()
		wake = runs.Wake()
	}
	tick := time.NewTicker(s.cfg.SweepInterval)
	defer tick.Stop()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	bo := daemon.Recovery{Component: "scheduler", Dependency: "postgres", Log: s.log, Metrics: s.cfg.Metrics}
	s.log.Info("scheduler: started", "sweep_interval", s.cfg.SweepInterval.String(), "full_sweep_interval", s.cfg.FullSweepInterval.String())
	sweepDue := true
	for {
		err := s.turn(ctx, runs, sweepDue)
		s.signals.passDone(err)
		sweepDue = false
		switch {
		case ctx.Err() != nil:
			s.log.Info("scheduler: stopped")
			return nil
		case err != nil && s.lost(err):
			sweepDue = true
			s.healthy.Store(false)
			d := bo.Fail()
			s.log.Error("scheduler: pass failed", "error", err, "failures", bo.Failures(), "retry_in", d.String())
			if backoff.Sleep(ctx, d) != nil {
				s.log.Info("scheduler: stopped")
				return nil
			}
			continue
		case err != nil:
			s.healthy.Store(false)
			s.log.Error("scheduler: pass refused by the database; the sweep is retried at the next tick", "error", err)
		default:
			s.healthy.Store(true)
			bo.Succeeded()
		}
		var retryDue <-chan time.Time
		d, ok := s.held.wait(s.cfg.Clock.Now())
		if !s.rateDue.IsZero() {
			rd := max(s.rateDue.Sub(s.cfg.Clock.Now()), 0)
			if !ok || rd < d {
				d, ok = rd, true
			}
		}
		if s.admitPending {
			ad := max(s.admitAt.Sub(s.cfg.Clock.Now()), 0)
			if !ok || ad < d {
				d, ok = ad, true
			}
		}
		if ok {
			retry.Reset(d)
			retryDue = retry.C
		}
		select {
		case <-ctx.Done():
			s.log.Info("scheduler: stopped")
			return nil
		case <-wake:
		case <-retryDue:
		case <-tick.C:
			sweepDue = true
		}
		retry.Stop()
	}
}

// turn advances the runs notified (runs nil: none, no listener) and the
// held runs due, keeping those it could not advance (advanceNamed), then
// sweeps when sweepDue or when a notification asked for it: store.AnyRun,
// throttled to one sweep per tenth of SweepInterval (a request it does not
// serve yet is kept for a later turn); a (re)connect of the listener, at
// once and with the full pass (kept too when the sweep fails). Only a
// targeted pass that could not reach the database ends the turn before its
// sweep (which would fail as well); the requests are kept then.
func (s *Scheduler) turn(ctx context.Context, runs *daemon.RunSet, sweepDue bool) error {
	if err := s.advanceTurn(ctx, runs, sweepDue); err != nil {
		return err
	}
	return s.admit(ctx)
}

// AdmitSpacingPerCounted spaces the admission rounds by their cost: after
// rounds that counted n slot holders of concurrency keys
// (store.AdmitResult.Counted), the next waits n × 50 µs (Config.Clock).
// A round counts a key's holders whole, whatever it admits, and is planned
// again each time: a key at its limit of 1,000 under W1's drain, which
// frees a few slots between two finishes, was admitted 46 times a second,
// 4 to 5 ms a round (3.6 ms counting, 2.7 ms planning) for 48 admissions
// on average (issue 27's W1 with a key: the admission, 0.11 ms of database
// time a task, was its whole gap to the unlimited drain). Spaced, a round
// admits every slot freed since the last: a key of 1,000 is served 20
// times a second and still up to 20,000 slots a second (about n slots free
// up in n × 50 µs only at that rate); a key of 5 waits 250 µs. Rate limits
// count no holders: their rounds are not spaced.
const AdmitSpacingPerCounted = 50 * time.Microsecond

// admit runs the admission rounds of flow control (store.Admit) after a
// turn: a round per turn, another at once when task runs given their
// concurrency slot went on to wait for their rate limit, when more keys
// wait than a round serves, or when a concurrency key admitted a whole
// batch and had slots left (store.AdmitResult.More) (up to four rounds).
// It keeps when a rate key has room next, for the loop to wake then. A
// turn before admitAt (AdmitSpacingPerCounted) runs no round but leaves
// it pending, for the loop to wake at admitAt; after a round with more to
// admit, admitAt is now (no spacing) and the round is pending.
func (s *Scheduler) admit(ctx context.Context) error {
	if now := s.cfg.Clock.Now(); now.Before(s.admitAt) {
		s.admitPending = true
		return nil
	}
	s.admitPending = false
	s.rateDue = time.Time{}
	counted, more := 0, false
	defer func() {
		s.admitAt = s.cfg.Clock.Now().Add(time.Duration(counted) * AdmitSpacingPerCounted)
		if more { // the next batch is due now: the loop wakes for it
			s.admitAt, s.admitPending = s.cfg.Clock.Now(), true
		}
	}()
	for range 4 {
		res, err := s.cfg.Store.Admit(ctx, s.admitNext, s.cfg.ID)
		if err != nil {
			return err
		}
		s.admitNext = res.Next
		counted += res.Counted
		s.cfg.Metrics.TasksAdmitted.WithLabelValues("concurrency").Add(float64(res.Slots))
		s.cfg.Metrics.TasksAdmitted.WithLabelValues("rate").Add(float64(res.Starts))
		if res.RateDueOK {
			due := s.cfg.Clock.Now().Add(res.RateDue)
			if s.rateDue.IsZero() || due.Before(s.rateDue) {
				s.rateDue = due
			}
		}
		more = res.More
		if res.ToRate == 0 && res.Next == "" && !res.More {
			return nil
		}
	}
	return nil
}

// advanceTurn is a turn's passes: see turn.
func (s *Scheduler) advanceTurn(ctx context.Context, runs *daemon.RunSet, sweepDue bool) error {
	ids := s.held.take(s.cfg.Clock.Now())
	var t daemon.Taken
	if runs != nil {
		t = runs.Take()
		ids = union(ids, t.IDs)
	}
	if err := s.advanceNamed(ctx, ids); err != nil {
		if t.AnyRun || t.Reconnected {
			runs.AskSweep(t.Reconnected)
		}
		return err
	}
	if runs != nil {
		throttled := clock.Since(s.cfg.Clock, s.lastSweep) < s.cfg.SweepInterval/10
		if t.AnyRun && throttled && !sweepDue && !t.Reconnected {
			runs.AskSweep(false)
		}
		sweepDue = sweepDue || t.Reconnected || (t.AnyRun && !throttled)
	}
	if !sweepDue {
		return nil
	}
	full := t.Reconnected || s.lastFull.IsZero() || clock.Since(s.cfg.Clock, s.lastFull) >= s.cfg.FullSweepInterval
	if err := s.sweep(ctx, full); err != nil {
		if t.Reconnected {
			runs.AskSweep(true)
		}
		return err
	}
	if t.Reconnected {
		s.signals.reconnectDone()
	}
	return nil
}

// lost reports whether err, a failed turn's, says that the database could
// not be reached (store.IsUnreachable), and records it then (s.failed): the
// next sweep that reaches the database counts an outage. A refusal (a lock
// or statement timeout, an error the database answered) is none: the
// database was there, and so could the workers' renewals have been.
func (s *Scheduler) lost(err error) bool {
	if !store.IsUnreachable(err) {
		return false
	}
	s.failed = true
	return true
}

// RunOnce sweeps with the full pass (see sweep). Calls must not overlap,
// nor overlap Run.
func (s *Scheduler) RunOnce(ctx context.Context) error {
	return s.sweep(ctx, true)
}

// sweep reaps expired leases, redispatches lost dispatches, advances the
// runs store.SweepCandidates finds (those it cannot lock kept for a later
// turn) and, when full, every open run (in pages of BatchSize runs, one
// transaction each), then fires the schedule ticks due (fireTicks). It
// dates the sweep on the database's clock first: after a pass that failed
// to reach the database, or a gap longer than SweepInterval+OutageGap since
// a sweep last reached it, it records an outage, and the reaper then grants
// one lease of grace from this sweep and refunds the attempt of a lease
// that lapsed during the outage (noteReached).
func (s *Scheduler) sweep(ctx context.Context, full bool) error {
	s.lastSweep = s.cfg.Clock.Now()
	start, err := s.cfg.Store.Now(ctx)
	if err != nil {
		return fmt.Errorf("read the database clock: %w", err)
	}
	s.noteReached(start)
	if err := s.reapAndRedispatch(ctx, start); err != nil {
		return err
	}
	cands, next, err := s.cfg.Store.SweepCandidates(ctx, s.cfg.BatchSize, s.probeFrom)
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	s.probeFrom = next
	if err := s.advanceNamed(ctx, cands); err != nil {
		return err
	}
	if full {
		if err := s.advanceAll(ctx); err != nil {
			return err
		}
		s.lastFull = s.lastSweep
	}
	if err := s.fireTicks(ctx); err != nil {
		return err
	}
	s.lastDB, s.failed = start, false
	s.lastPass.Store(s.cfg.Clock.Now().UnixNano())
	return nil
}

// noteReached dates a sweep that reached the database at start (its
// clock): after a pass that failed to reach it (s.failed), or when start
// is more than SweepInterval+OutageGap after the previous sweep reached it
// (whatever failed after: a refusal is no outage, so a run of refused
// sweeps adds up to no gap), it records an outage from the start of the
// last sweep that completed (s.lastDB) to start, counts and logs it.
func (s *Scheduler) noteReached(start time.Time) {
	if gap := start.Sub(s.lastReached); s.failed || (!s.lastReached.IsZero() && gap > s.cfg.SweepInterval+s.cfg.OutageGap) {
		s.outage = &store.Outage{Since: s.lastDB, Until: start}
		s.cfg.Metrics.SchedulerOutages.Inc()
		attrs := []any{"failed_pass", s.failed}
		if !s.lastReached.IsZero() {
			attrs = append(attrs, "since_last_pass", gap.Round(time.Millisecond).String())
		}
		msg := "scheduler: reached the database after an outage; lapsed leases get one lease of grace, and those that lapsed during it keep their attempt"
		if !s.failed {
			// Only late: no pass failed, but the sweep came later than
			// --sweep-interval plus the outage gap allows (a slow or busy
			// database, a paused process). It is treated as an outage of
			// the scheduler's own, which is the safe reading.
			msg = "scheduler: a sweep came late (no pass failed, but the database or this process was slow); treated as an outage: lapsed leases get one lease of grace, and those that lapsed meanwhile keep their attempt"
		}
		s.log.Warn(msg, attrs...)
	}
	s.lastReached = start
}

// reapAndRedispatch reaps the expired leases (an outage's grace applied;
// nothing when the reap runs later than start+OutageGap) and redispatches
// READY tasks whose confirmed dispatch led to no claim.
func (s *Scheduler) reapAndRedispatch(ctx context.Context, start time.Time) error {
	res, err := s.cfg.Store.Reap(ctx, store.ReapRequest{
		Limit: s.cfg.ReapLimit,
		Backoff: func(p core.RetryPolicy, attempt int) time.Duration {
			return p.Backoff(attempt, nil)
		},
		Actor:    s.cfg.ID,
		Outage:   s.outage,
		NotAfter: start.Add(s.cfg.OutageGap),
	})
	if err != nil {
		return fmt.Errorf("reap: %w", err)
	}
	if res.Reaped > 0 {
		s.cfg.Metrics.LeasesReaped.Add(float64(res.Reaped))
		s.cfg.Metrics.LeasesReapedAfterOutage.Add(float64(res.Refunded))
		s.cfg.Metrics.LeasesReapedGivenBack.Add(float64(res.GivenBack))
		s.cfg.Metrics.TasksFinished.WithLabelValues(string(core.TaskDead)).Add(float64(res.Dead))
		s.log.Warn("scheduler: reaped expired leases", "count", res.Reaped, "refunded_after_outage", res.Refunded, "given_back_crash_suspects", res.GivenBack)
	}
	redispatched, err := s.cfg.Store.Redispatch(ctx, s.cfg.RedispatchAfter, s.cfg.ReapLimit, s.cfg.ID)
	if err != nil {
		return fmt.Errorf("redispatch: %w", err)
	}
	if redispatched > 0 {
		s.cfg.Metrics.TasksRedispatched.Add(float64(redispatched))
		s.log.Warn("scheduler: redispatched READY tasks whose confirmed dispatch led to no claim", "count", redispatched, "after", s.cfg.RedispatchAfter.String())
	}
	return nil
}

// advanceAll is the full pass: store.Advance over every open run, in pages
// of BatchSize (runs another pass holds are skipped: theirs).
func (s *Scheduler) advanceAll(ctx context.Context) error {
	var cur *store.Cursor
	for {
		start := s.cfg.Clock.Now()
		res, err := s.cfg.Store.Advance(ctx, cur, s.cfg.BatchSize, s.cfg.ID)
		if err != nil {
			return fmt.Errorf("advance: %w", err)
		}
		s.record(res)
		s.tracePromotions(res.Traced, start)
		if res.Next == nil {
			return nil
		}
		cur = res.Next
	}
}

// record counts what one pass did and logs it at Debug when it did
// anything.
func (s *Scheduler) record(res store.AdvanceResult) {
	s.cfg.Metrics.TasksPromoted.Add(float64(res.Promoted + res.RetriesDue))
	s.cfg.Metrics.TasksSkipped.Add(float64(res.Skipped))
	s.cfg.Metrics.TasksExpanded.Add(float64(res.Expanded))
	s.cfg.Metrics.HeldTasksEnded.Add(float64(res.HeldEnded + res.EventsMatched))
	s.cfg.Metrics.TasksFinished.WithLabelValues(string(core.TaskDead)).Add(float64(res.HeldDead))
	for _, r := range res.Settled {
		s.cfg.Metrics.Latency.ObserveRun(context.Background(), r.Workflow, string(r.State), r.Duration())
	}
	if res.Promoted+res.RetriesDue+res.FailFastCancelled+res.FailFastRevived+res.UpstreamFailed+res.UpstreamRevived+res.RunsChanged+
		res.Skipped+res.Expanded+res.ForEachEnded+res.HeldEnded+res.EventsMatched > 0 {
		s.log.Debug("scheduler: pass", "runs", res.Runs, "promoted", res.Promoted, "retries_due", res.RetriesDue,
			"fail_fast_cancelled", res.FailFastCancelled, "fail_fast_revived", res.FailFastRevived,
			"upstream_failed", res.UpstreamFailed, "upstream_revived", res.UpstreamRevived,
			"skipped", res.Skipped, "expanded", res.Expanded, "for_each_ended", res.ForEachEnded,
			"held_ended", res.HeldEnded, "events_matched", res.EventsMatched,
			"runs_changed", res.RunsChanged, "runs_settled", res.RunsSettled)
	}
}

// Live reports an error when no pass completed for a long time while the
// scheduler believes it is healthy (a stuck loop).
func (s *Scheduler) Live() error {
	last := s.lastPass.Load()
	if last == 0 || !s.healthy.Load() {
		return nil
	}
	if age := clock.Since(s.cfg.Clock, time.Unix(0, last)); age > 10*s.cfg.SweepInterval+time.Minute {
		return fmt.Errorf("no scheduler pass for %s", age.Round(time.Second))
	}
	return nil
}
