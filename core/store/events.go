package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/flowforge/flowforge/core"
)

// EventLookbackDefault is how long an event is kept for a wait that has
// not started yet when its sender gives no lookback (`ffctl event send
// --event-lookback`).
const EventLookbackDefault = 24 * time.Hour

// EventLookbackMax bounds an event's lookback.
const EventLookbackMax = 366 * 24 * time.Hour

// MaxEventIDLength bounds an event's id, in bytes.
const MaxEventIDLength = 256

// SendEventRequest is an event to deliver (SendEvent).
type SendEventRequest struct {
	// Name is the event's name (core.ValidateEventName), as a task's
	// wait_for.event gives it.
	Name string
	// Key is the key the waits' wait_for.key must give; "" for none
	// (core.ValidateEventKey).
	Key string
	// Payload is a JSON object, the result of each task it completes (nil
	// means {}); checked with core.ValidateParams.
	Payload json.RawMessage
	// ID identifies the event: the same id sent twice is delivered once
	// (the second send changes nothing and says so). "" makes one up (a
	// UUID). 1 to MaxEventIDLength bytes of UTF-8 without NUL.
	ID string
	// Lookback is how long the event is kept for a wait that starts after
	// it came (0 means EventLookbackDefault; at most EventLookbackMax).
	Lookback time.Duration
	// Actor is recorded as the event's sender and in the history of the
	// tasks it completes.
	Actor string
}

// Event is an event received (SendEvent, ListEvents).
type Event struct {
	ID         string          `db:"id" json:"id"`
	Name       string          `db:"name" json:"name"`
	Key        string          `db:"key" json:"key"`
	Payload    json.RawMessage `db:"payload" json:"payload"`
	SentBy     string          `db:"sent_by" json:"sent_by"`
	ReceivedAt time.Time       `db:"received_at" json:"received_at"`
	// KeepUntil is when its lookback ends: a wait that starts before then
	// is completed by it at once.
	KeepUntil time.Time `db:"keep_until" json:"keep_until"`
	// Deliveries are the task runs it completed, oldest first.
	Deliveries []EventDelivery `db:"-" json:"deliveries"`
}

// EventDelivery is one task run an event completed.
type EventDelivery struct {
	EventID     string    `db:"event_id" json:"-"`
	TaskRunID   uuid.UUID `db:"task_run_id" json:"task_run_id"`
	RunID       uuid.UUID `db:"run_id" json:"run_id"`
	Task        string    `db:"task_name" json:"task"`
	Workflow    string    `db:"workflow_name" json:"workflow"`
	DeliveredAt time.Time `db:"delivered_at" json:"delivered_at"`
}

// SendEventResult says what SendEvent did.
type SendEventResult struct {
	Event Event `json:"event"`
	// Duplicate is true when an event with this id had been received
	// already: nothing was delivered by this send, and Event is the one
	// received first (with its deliveries).
	Duplicate bool `json:"duplicate"`
	// Completed are the waits this send completed (none for a duplicate).
	Completed []EventDelivery `json:"completed"`
}

// qInsertEvent inserts the event unless its id is taken.
const qInsertEvent = `
INSERT INTO events (id, name, key, payload, sent_by, keep_until)
VALUES ($1, $2, $3, $4, $5, now() + $6 * interval '1 millisecond')
ON CONFLICT (id) DO NOTHING
RETURNING id, name, key, payload, sent_by, received_at, keep_until`

// qDeliverEvent completes, as actor $3, every RUNNING wait for the event
// $1 (name $2, key $4): SUCCEEDED with its payload, a delivery row and a
// history row each. It returns the deliveries.
const qDeliverEvent = `
WITH e AS (
    SELECT id, name, key, payload FROM events WHERE id = $1
), done AS (
    UPDATE task_runs t SET state = 'SUCCEEDED', finished_at = now(), result = e.payload, due_at = NULL, error = NULL
      FROM e
     WHERE t.wait_event = $2 AND t.wait_key = $4 AND t.state = 'RUNNING' AND t.kind = 'wait'
 RETURNING t.id, t.run_id, t.task_name, t.attempt, t.fencing_token
), del AS (
    INSERT INTO event_deliveries (event_id, task_run_id, run_id)
    SELECT $1, id, run_id FROM done
    RETURNING task_run_id, delivered_at
), ev AS (
    INSERT INTO task_events (task_run_id, run_id, from_state, to_state, attempt, fencing_token, actor, reason)
    SELECT id, run_id, 'RUNNING', 'SUCCEEDED', attempt, fencing_token, $3, 'wait_for: event ' || $1 || ' came' FROM done
)
SELECT $1::text AS event_id, done.id AS task_run_id, done.run_id, done.task_name, r.workflow_name, del.delivered_at
  FROM done JOIN del ON del.task_run_id = done.id JOIN workflow_runs r ON r.id = done.run_id
 ORDER BY done.run_id, done.task_name`

// SendEvent records an event and completes every wait RUNNING for its
// name and key (SUCCEEDED, the payload its result), in one transaction
// that wakes the schedulers for their runs; the event is kept for its
// lookback, and a wait that starts before it passes is completed by it
// when it starts (the newest such event). The same id sent twice is
// delivered once: the second send changes nothing and returns the first
// with Duplicate set. Errors: one wrapping core.ErrBadEvent for a bad
// name, key or id, core.ErrBadParams for a payload that is not a JSON
// object PostgreSQL stores unchanged, core.ErrBadEvent for a lookback out of
// range; the database's otherwise.
func (s *Store) SendEvent(ctx context.Context, req SendEventRequest) (SendEventResult, error) {
	if err := core.CheckTransition(core.TaskRunning, core.TaskSucceeded); err != nil {
		return SendEventResult{}, err
	}
	req, err := checkEvent(req)
	if err != nil {
		return SendEventResult{}, err
	}
	var out SendEventResult
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		out = SendEventResult{}
		if _, err := tx.ExecContext(ctx, qLockEventKey, req.Name, req.Key); err != nil {
			return fmt.Errorf("lock event %s: %w", req.Name, err)
		}
		err := tx.GetContext(ctx, &out.Event, qInsertEvent, req.ID, req.Name, req.Key, []byte(req.Payload), req.Actor, req.Lookback.Milliseconds())
		if errors.Is(err, sql.ErrNoRows) {
			out.Duplicate = true
			ev, err := eventByID(ctx, tx, req.ID)
			out.Event = ev
			return err
		}
		if err != nil {
			return fmt.Errorf("record event %s: %w", req.Name, err)
		}
		if err := tx.SelectContext(ctx, &out.Completed, qDeliverEvent, req.ID, req.Name, req.Actor, req.Key); err != nil {
			return fmt.Errorf("deliver event %s: %w", req.ID, err)
		}
		out.Event.Deliveries = out.Completed
		runs := make([]uuid.UUID, 0, len(out.Completed))
		for _, d := range out.Completed {
			runs = append(runs, d.RunID)
		}
		return notifyAll(ctx, tx, runsNotices(runs)...)
	})
	if err != nil {
		return SendEventResult{}, err
	}
	if out.Completed == nil {
		out.Completed = []EventDelivery{}
	}
	if out.Event.Deliveries == nil {
		out.Event.Deliveries = []EventDelivery{} // JSON [], as ListEvents gives
	}
	return out, nil
}

// checkEvent checks req and fills in its defaults: a made-up id, {} for
// no payload, EventLookbackDefault.
func checkEvent(req SendEventRequest) (SendEventRequest, error) {
	if err := core.ValidateEventName(req.Name); err != nil {
		return req, err
	}
	if err := core.ValidateEventKey(req.Key); err != nil {
		return req, err
	}
	if req.ID == "" {
		req.ID = uuid.NewString()
	}
	if err := ValidateEventID(req.ID); err != nil {
		return req, err
	}
	if len(req.Payload) == 0 {
		req.Payload = json.RawMessage(`{}`)
	}
	if err := core.ValidateParams(req.Payload); err != nil {
		return req, fmt.Errorf("event payload: %w", err)
	}
	if req.Lookback == 0 {
		req.Lookback = EventLookbackDefault
	}
	if err := ValidateEventLookback(req.Lookback); err != nil {
		return req, err
	}
	return req, nil
}

// ValidateEventID checks an event's id as SendEvent takes it (id, not ""):
// 1 to MaxEventIDLength bytes of UTF-8 without NUL. Errors wrap
// core.ErrBadEvent and say what is wrong.
func ValidateEventID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: the id is empty (leave it out for a made-up one)", core.ErrBadEvent)
	case len(id) > MaxEventIDLength:
		return fmt.Errorf("%w: the id is %d bytes, longer than the limit of %d", core.ErrBadEvent, len(id), MaxEventIDLength)
	case core.ValidateEventKey(id) != nil:
		return fmt.Errorf("%w: the id must be UTF-8 without NUL", core.ErrBadEvent)
	}
	return nil
}

// ValidateEventLookback checks an event's lookback as SendEvent keeps it
// (after 0 became EventLookbackDefault): positive and at most
// EventLookbackMax. Errors wrap core.ErrBadEvent.
func ValidateEventLookback(d time.Duration) error {
	if d <= 0 || d > EventLookbackMax {
		return fmt.Errorf("%w: the lookback must be positive and at most %s, got %s", core.ErrBadEvent, EventLookbackMax, d)
	}
	return nil
}

// qEventDeliveries reads the deliveries of the events $1, oldest first.
const qEventDeliveries = `
SELECT d.event_id, d.task_run_id, d.run_id, t.task_name, r.workflow_name, d.delivered_at
  FROM event_deliveries d JOIN task_runs t ON t.id = d.task_run_id JOIN workflow_runs r ON r.id = d.run_id
 WHERE d.event_id = ANY ($1::text[])
 ORDER BY d.delivered_at, d.task_run_id`

// eventByID reads the event id with its deliveries.
func eventByID(ctx context.Context, q sqlx.QueryerContext, id string) (Event, error) {
	var ev Event
	if err := sqlx.GetContext(ctx, q, &ev, `SELECT id, name, key, payload, sent_by, received_at, keep_until FROM events WHERE id = $1`, id); err != nil {
		return Event{}, fmt.Errorf("read event %s: %w", id, err)
	}
	evs := []Event{ev}
	if err := withDeliveries(ctx, q, evs); err != nil {
		return Event{}, err
	}
	return evs[0], nil
}

// withDeliveries fills in the deliveries of evs.
func withDeliveries(ctx context.Context, q sqlx.QueryerContext, evs []Event) error {
	ids := make([]string, len(evs))
	at := make(map[string]int, len(evs))
	for i, e := range evs {
		ids[i], at[e.ID] = e.ID, i
		evs[i].Deliveries = []EventDelivery{}
	}
	var ds []EventDelivery
	if err := sqlx.SelectContext(ctx, q, &ds, qEventDeliveries, ids); err != nil {
		return fmt.Errorf("read event deliveries: %w", err)
	}
	for _, d := range ds {
		i := at[d.EventID]
		evs[i].Deliveries = append(evs[i].Deliveries, d)
	}
	return nil
}

// EventFilter selects events for ListEvents.
type EventFilter struct {
	// Name keeps only events of that name ("": every name).
	Name string
	// Key keeps only events with that key (nil: any key).
	Key *string
	// Limit bounds the events returned, newest first (0 means
	// ListEventsDefault; at most ListEventsMax).
	Limit int
}

// The bounds of EventFilter.Limit.
const (
	ListEventsDefault = 50
	ListEventsMax     = 1000
)

// ListEvents returns the events kept (those whose lookback has not been
// pruned), newest first, each with the task runs it completed. Errors:
// one for a limit out of range; the database's otherwise.
func (s *Store) ListEvents(ctx context.Context, f EventFilter) ([]Event, error) {
	switch {
	case f.Limit == 0:
		f.Limit = ListEventsDefault
	case f.Limit < 0 || f.Limit > ListEventsMax:
		return nil, fmt.Errorf("limit must be between 1 and %d, got %d", ListEventsMax, f.Limit)
	}
	evs := []Event{}
	err := s.db.SelectContext(ctx, &evs, `
SELECT id, name, key, payload, sent_by, received_at, keep_until FROM events
 WHERE ($1 = '' OR name = $1) AND ($2::text IS NULL OR key = $2)
 ORDER BY received_at DESC, id LIMIT $3`, f.Name, f.Key, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	if len(evs) == 0 {
		return evs, nil
	}
	if err := withDeliveries(ctx, s.db, evs); err != nil {
		return nil, err
	}
	return evs, nil
}
