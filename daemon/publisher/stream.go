package publisher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon"
	"github.com/flowforge/flowforge/daemon/backoff"
	"github.com/flowforge/flowforge/daemon/failpoint"
)

// The transition stream (Config.EventsExchange): one more loop beside the
// lanes, on a broker connection of its own. It turns the stream on in the
// database (store.EnableStream), then each cycle takes the stream's
// publishing lock (store.LockStream: one publisher at a time, the others'
// cycles find an empty batch), reads a batch of unpublished rows, oldest
// first, numbered in that transaction (up to the stream mark it passes
// from cycle to cycle: store.StreamMark), publishes each to the exchange
// with its routing key and waits for the confirms, deletes the confirmed
// ones and commits, recording the numbers given.
//
// A crash between the confirm and the commit leaves the rows unpublished
// and unnumbered: the next cycle (of this or another publisher) numbers
// them the same way and publishes them again with the same seq and event
// id, which consumers de-duplicate by.

// StreamPollIntervalDefault is the period of the stream loop's cycle when
// no outbox NOTIFY wakes it: a transition that dispatches nothing (a run
// settling, a task ending) is published within it.
const StreamPollIntervalDefault = 100 * time.Millisecond

// streamGather is the least time between two stream cycles when the
// first did not fill its batch: transitions come with nearly every outbox
// NOTIFY, so without it each cycle would number, lock, publish and delete
// a handful of rows, paying its nine statements for each handful. Waiting
// lets a busy system's rows gather into batches (issue 28's overhead
// budget); a transition is published within about streamGather plus
// StreamPollIntervalDefault, or two cycles while other transactions write
// transitions (the stream mark settles in the cycle after it is taken:
// store.StreamMark).
const streamGather = 50 * time.Millisecond

// streamBatchFactor is the stream cycle's batch in publisher batches
// (Config.BatchSize; 1,000 rows by default): a cycle's nine statements and
// its wait for confirms cost about the same for a handful of rows or a
// thousand, and a run makes about five transitions per dispatch. With
// the dispatches' batch the stream's cycles could not keep up with W2's
// transitions (about 3,000 a second): its backlog grew for as long as the
// load lasted (issue 28's overhead).
const streamBatchFactor = 5

// streamVacuumEvery is how often the stream loop vacuums the stream table
// while it publishes (store.VacuumStream says why).
const streamVacuumEvery = 2 * time.Second

// streamSettingEvery is how often the stream loop reads the database's
// setting (store.StreamSetting): a change of exchange, or the stream
// turned on or off by another process, is followed within it.
const streamSettingEvery = time.Second

// streamIdle: with the stream off (`ffctl events off`, or another
// process), every publisher still publishes the rows written before, to
// the exchange the stream went to (store.StreamDrain; a publisher given
// --events-exchange sends them to its own when none is recorded, as
// before migration 29). Once a cycle finds none left and
// its stream mark waits for no writer (store.StreamMark.Pending: a
// transaction that read the setting before it went off may still commit
// rows), the loop runs no cycle until its next read of the setting
// (streamSettingEvery), where it either finds the stream on again or
// looks once more: a row committed later than that last cycle (its
// transaction read the setting before it went off) is published after
// the next read, at most about a second later. It ran a cycle (nine
// statements) every wake-up and every StreamPollIntervalDefault
// instead, with nothing to publish.

// streamLoop is the state of the stream loop between cycles.
type streamLoop struct {
	brokerBO, dbBO daemon.Recovery
	enabled        bool
	pub            *broker.Publisher
	wake           chan struct{}
	lastStatus     time.Time
	// exchange is where the stream goes: the database's setting, or with
	// the stream off where the rows written before go (store.StreamDrain,
	// else this publisher's own --events-exchange); "" idles the loop.
	exchange  string
	settingAt time.Time // when the setting was last read (zero: read it at the next step)
	// settingRead says the setting has been read once (off then is a
	// turn off, which streamExchange logs).
	settingRead bool
	// off says the setting was off at the last read; idle says that, off,
	// a cycle found nothing left to publish: no cycle runs until the next
	// read of the setting (streamIdle).
	off, idle bool
	// deleted counts the rows published (hence deleted) since the last
	// vacuum, vacuumAt is when that was (streamVacuumEvery).
	deleted  int
	vacuumAt time.Time
	// mark is the stream mark the last batch took (store.StreamMark).
	mark store.StreamMark
}

// runStream runs the stream loop until ctx ends, then closes its
// connection.
func (p *Publisher) runStream(ctx context.Context, s *streamLoop) {
	tick := time.NewTicker(p.cfg.StreamPollInterval)
	defer tick.Stop()
	defer func() {
		if s.pub != nil {
			s.pub.Close()
		}
	}()
	for ctx.Err() == nil {
		full, err := p.streamStep(ctx, s)
		switch {
		case ctx.Err() != nil:
		case err != nil:
			_ = backoff.Sleep(ctx, p.streamFailed(s, err))
		case !full:
			var done <-chan struct{}
			if s.pub != nil {
				done = s.pub.Done()
			}
			select { // gather a batch: see streamGather
			case <-ctx.Done():
			case <-time.After(streamGather):
			case <-done:
			}
			select {
			case <-ctx.Done():
			case <-s.wake:
			case <-tick.C:
			case <-done:
			}
		}
	}
}

// errStreamBroker marks a stream cycle's failure as the broker's.
var errStreamBroker = errors.New("broker")

// streamFailed logs a failed stream cycle and returns how long to back
// off: a broker failure drops the connection.
func (p *Publisher) streamFailed(s *streamLoop, err error) time.Duration {
	if errors.Is(err, errStreamBroker) {
		if s.pub != nil {
			s.pub.Close()
			s.pub = nil
		}
		d := s.brokerBO.Fail()
		p.log.Warn("publisher: transition stream: broker failed; rows stay unpublished", "error", err, "retry_in", d.String())
		return d
	}
	d := s.dbBO.Fail()
	p.log.Error("publisher: transition stream: cycle failed", "error", err, "retry_in", d.String())
	return d
}

// streamStep turns the stream on (once, with --events-exchange), follows
// the database's setting (streamExchange), dials when it has no open
// connection, then runs one cycle; full says that the batch was full (more
// may wait). Every publisher runs it, given the flag or not, and publishes
// to the exchange the database names: two publishers given different
// exchanges do not split the stream between them (the last one started
// sets it; the others follow it and say so).
func (p *Publisher) streamStep(ctx context.Context, s *streamLoop) (full bool, err error) {
	if !s.enabled && p.cfg.EventsExchange != "" {
		by := p.cfg.ID
		if by == "" {
			by = "publisher"
		}
		if err := p.cfg.Store.EnableStream(ctx, p.cfg.EventsExchange, by); err != nil {
			return false, err
		}
		s.enabled = true
		p.log.Info("publisher: transition stream on", "exchange", p.cfg.EventsExchange)
	}
	if err := p.streamExchange(ctx, s); err != nil {
		return false, err
	}
	if time.Since(s.lastStatus) > 5*time.Second {
		s.lastStatus = time.Now()
		if st, err := p.cfg.Store.StreamStatus(ctx); err == nil {
			p.cfg.Metrics.StreamPending.Set(float64(st.Pending))
			p.cfg.Metrics.StreamOldestSeconds.Set(st.OldestPendingSeconds)
		}
	}
	if s.exchange == "" || s.idle {
		return false, nil
	}
	if s.pub != nil {
		select {
		case <-s.pub.Done():
			s.pub.Close()
			s.pub = nil
		default:
		}
	}
	if s.pub == nil {
		cfg := p.cfg.Broker
		cfg.EventsExchange = s.exchange
		pub, err := broker.DialPublisher(ctx, cfg)
		if err != nil {
			return false, fmt.Errorf("%w: %w", errStreamBroker, err)
		}
		s.pub = pub
		s.brokerBO.Succeeded()
	}
	n, err := p.streamCycle(ctx, s)
	if err == nil {
		s.dbBO.Succeeded()
		s.deleted += n
		s.idle = s.off && n == 0 && !s.mark.Pending()
	}
	if s.deleted > 0 && time.Since(s.vacuumAt) >= streamVacuumEvery {
		s.vacuumAt, s.deleted = time.Now(), 0
		if verr := p.cfg.Store.VacuumStream(ctx); verr != nil && ctx.Err() == nil {
			p.log.Warn("publisher: transition stream: vacuum failed; autovacuum alone keeps the table", "error", verr)
		}
	}
	return n == p.streamBatch(), err
}

// streamBatch is the most rows one stream cycle numbers and publishes
// (streamBatchFactor).
func (p *Publisher) streamBatch() int { return streamBatchFactor * p.cfg.BatchSize }

// streamExchange reads the database's setting (every streamSettingEvery)
// and sets s.exchange from it: the setting's exchange, or with the stream
// off the drain's (store.StreamDrain: where the stream went when it was
// turned off), else this publisher's --events-exchange ("" without one);
// a turn off is logged (logStreamOff). A change drops
// the connection, whose re-dial declares the new exchange; one that is
// not this publisher's own flag is logged (another publisher set it).
func (p *Publisher) streamExchange(ctx context.Context, s *streamLoop) error {
	if !s.settingAt.IsZero() && time.Since(s.settingAt) < streamSettingEvery {
		return nil
	}
	st, err := p.cfg.Store.StreamSetting(ctx)
	off, drained := errors.Is(err, store.ErrStreamOff), false
	switch {
	case off:
		st.Exchange = p.cfg.EventsExchange
		d, err := p.cfg.Store.StreamDrain(ctx)
		switch {
		case err == nil:
			st.Exchange, drained = d.Exchange, true
		case !errors.Is(err, store.ErrNotFound):
			return err
		}
	case err != nil:
		return err
	}
	turnedOff := off && !s.off && s.settingRead
	if !off && s.off && s.exchange != "" && st.Exchange != s.exchange {
		// A stream turned on again elsewhere takes the rows left with it,
		// as any move of the stream does (docs/operating.md).
		p.log.Warn("publisher: transition stream: the stream is on again, to another exchange than the rows left from before it was turned off went to; those not yet published go to the new one",
			"exchange", st.Exchange, "rows_left_went_to", s.exchange)
	}
	s.settingAt, s.settingRead, s.off, s.idle = time.Now(), true, off, false
	if st.Exchange == s.exchange {
		if turnedOff {
			p.logStreamOff(st.Exchange, drained)
		}
		return nil
	}
	if off && st.Exchange != "" || turnedOff {
		p.logStreamOff(st.Exchange, drained)
	} else if p.cfg.EventsExchange != "" && st.Exchange != p.cfg.EventsExchange {
		p.log.Warn("publisher: transition stream: the database's stream goes to another exchange than this publisher's --events-exchange (another publisher set it); following the database",
			"exchange", st.Exchange, "events_exchange", p.cfg.EventsExchange)
	} else if st.Exchange != "" {
		p.log.Info("publisher: transition stream: publishing", "exchange", st.Exchange)
	}
	s.exchange = st.Exchange
	if s.pub != nil {
		s.pub.Close()
		s.pub = nil
	}
	return nil
}

// logStreamOff says, once the stream is off, what becomes of the rows
// written before: exchange is where this publisher sends them, the
// exchange the stream went to when it was turned off (drained, recorded
// by store.DisableStream), else its own --events-exchange, else "" (it
// publishes none).
func (p *Publisher) logStreamOff(exchange string, drained bool) {
	switch {
	case drained:
		p.log.Info("publisher: transition stream: the stream is off; events written before it was turned off still go to the exchange it went to", "exchange", exchange)
	case exchange != "":
		p.log.Info("publisher: transition stream: the stream is off; events written before it was turned off still go to this publisher's --events-exchange", "exchange", exchange)
	default:
		p.log.Warn("publisher: transition stream: the stream is off and no exchange is recorded for the events written before it (it was turned off by an older release); this publisher has no --events-exchange and publishes none of them (`ffctl events status` counts them; a publisher with --events-exchange publishes them)")
	}
}

// streamCycle publishes one batch of stream rows through s.pub to
// s.exchange and returns how many rows it held.
func (p *Publisher) streamCycle(ctx context.Context, s *streamLoop) (int, error) {
	pub, exchange := s.pub, s.exchange
	batch, err := p.cfg.Store.LockStream(ctx, p.streamBatch(), s.mark)
	if err != nil {
		return 0, err
	}
	defer batch.Rollback()
	s.mark = batch.Mark
	if len(batch.Rows) == 0 {
		return 0, nil
	}
	if batch.Exchange != "" && batch.Exchange != exchange {
		// The setting moved since this loop last read it: publish
		// nothing, read it again and re-dial (streamExchange).
		s.settingAt = time.Time{}
		return 0, nil
	}
	msgs := make([]broker.Message, len(batch.Rows))
	for i, r := range batch.Rows {
		body, err := json.Marshal(r.Event)
		if err != nil {
			return 0, fmt.Errorf("encode stream row %d: %w", r.ID, err)
		}
		msgs[i] = broker.Message{ID: r.Event.EventID, Body: body, Exchange: exchange, Key: r.Event.RoutingKey()}
	}
	outcomes, pubErr := pub.PublishBatch(ctx, msgs)
	var confirmed, failed []int64
	for i, r := range batch.Rows {
		if i < len(outcomes) && outcomes[i] == broker.Confirmed {
			confirmed = append(confirmed, r.ID)
		} else {
			failed = append(failed, r.ID)
		}
	}
	if len(confirmed) > 0 {
		p.cfg.Failpoints.ExitIf(failpoint.PublisherStreamExitAfterConfirm)
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := batch.DeletePublished(wctx, confirmed); err != nil {
		return 0, err
	}
	reason := "unconfirmed"
	if pubErr != nil {
		reason = pubErr.Error()
	}
	if err := batch.MarkFailed(wctx, failed, reason); err != nil {
		return 0, err
	}
	if err := batch.Commit(wctx); err != nil {
		return 0, err
	}
	if pubErr != nil {
		return len(batch.Rows), fmt.Errorf("%w: publish stream batch: %w", errStreamBroker, pubErr)
	}
	if len(failed) > 0 {
		return len(batch.Rows), fmt.Errorf("%w: %s of %d stream rows unconfirmed", errStreamBroker, strconv.Itoa(len(failed)), len(batch.Rows))
	}
	return len(batch.Rows), nil
}

// streamStore is what the stream loop needs from the database (part of
// Store).
type streamStore interface {
	EnableStream(ctx context.Context, exchange, actor string) error
	StreamSetting(ctx context.Context) (store.StreamSetting, error)
	StreamDrain(ctx context.Context) (store.StreamDrain, error)
	LockStream(ctx context.Context, limit int, mark store.StreamMark) (*store.StreamBatch, error)
	StreamStatus(ctx context.Context) (store.StreamStatus, error)
	VacuumStream(ctx context.Context) error
}
