package client

import (
	"context"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// Event is an event received, with the task runs it completed
// (store.Event: id, name, key, payload, sent_by, received_at, keep_until,
// deliveries), the object `ffctl event list -o json` prints.
type Event = store.Event

// EventDelivery is one task run an event completed (store.EventDelivery:
// task_run_id, run_id, task, workflow, delivered_at).
type EventDelivery = store.EventDelivery

// SendEventResult says what a send did (store.SendEventResult): the event
// (for a duplicate, the one received first, with its deliveries), whether
// the id had been received before, and the waits this send completed
// (none for a duplicate), the object `ffctl event send -o json` prints.
type SendEventResult = store.SendEventResult

// SendEventOptions are what `ffctl event send NAME` takes besides the
// name and the payload. The zero value sends an event without a key,
// under a made-up id, kept for store.EventLookbackDefault.
type SendEventOptions struct {
	// Key is the key a wait's wait_for.key must give for the event to
	// complete it ("" for none): at most core.MaxEventKeyLength bytes of
	// UTF-8 without NUL.
	Key string
	// ID identifies the event: the same id sent twice is delivered once
	// (the second send returns the first with Duplicate set), which makes
	// a retry safe. "" makes one up (a UUID); otherwise 1 to
	// store.MaxEventIDLength bytes of UTF-8 without NUL.
	ID string
	// Lookback is how long the event is kept for a wait that starts after
	// it came, and is then completed by it at once (0:
	// store.EventLookbackDefault, 24 hours; at most
	// store.EventLookbackMax, 366 days).
	Lookback time.Duration
	// Actor is recorded as the sender and in the history of the tasks it
	// completes (empty: the Client's).
	Actor string
}

// SendEvent records the event name with payload and completes every task
// waiting for it (`wait_for: {event: name, key: ...}`, RUNNING, whose key
// is opts.Key): each SUCCEEDED with the payload as its result, in one
// transaction of its own that wakes the schedulers for their runs. The
// event is kept for opts.Lookback: a wait for it that starts meanwhile is
// completed by it when it starts. payload is the event's JSON object as
// Trigger takes params (a json.RawMessage or []byte as JSON text, nil as
// {}, anything else encoded with encoding/json). An id sent before is not
// delivered again: the result has Duplicate set, the first event and its
// deliveries, and no error. Errors: ErrInvalidInput (nothing written) for
// a bad name (core.ValidateEventName), key, id or lookback;
// ErrInvalidParams (which matches ErrInvalidInput too) for a payload that
// is not a JSON object core.ValidateParams takes; ErrOutcomeUnknown when
// the commit got no answer (send again with the same opts.ID: it is
// delivered at most once); the database's.
func (c *Client) SendEvent(ctx context.Context, name string, payload any, opts SendEventOptions) (SendEventResult, error) {
	raw, err := encodeParams(payload)
	if err != nil {
		return SendEventResult{}, mapError(err)
	}
	res, err := c.s.SendEvent(ctx, store.SendEventRequest{Name: name, Key: opts.Key, Payload: raw, ID: opts.ID,
		Lookback: opts.Lookback, Actor: c.actorOr(opts.Actor)})
	return res, mapError(err)
}

// EventFilter selects the events ListEvents returns, as `ffctl event
// list`'s flags do.
type EventFilter struct {
	// Name keeps the events of this name ("": every name).
	Name string
	// Key, when not nil, keeps the events sent with this key (a pointer
	// to "": those sent without one).
	Key *string
	// Limit is at most store.ListEventsMax (1000); 0 means
	// store.ListEventsDefault (50).
	Limit int
}

// ListEvents returns the events received, newest first (those past their
// lookback too: they stay to keep their ids delivered once), each with the
// task runs it completed, oldest delivery first.
// Errors: ErrInvalidInput for a bad name or key, or a Limit out of
// 0..store.ListEventsMax; the database's.
func (c *Client) ListEvents(ctx context.Context, f EventFilter) ([]Event, error) {
	if f.Limit < 0 || f.Limit > store.ListEventsMax {
		return nil, invalid("event list limit %d: want 1 to %d (0: %d)", f.Limit, store.ListEventsMax, store.ListEventsDefault)
	}
	if f.Name != "" {
		if err := core.ValidateEventName(f.Name); err != nil {
			return nil, mapError(err)
		}
	}
	if f.Key != nil {
		if err := core.ValidateEventKey(*f.Key); err != nil {
			return nil, mapError(err)
		}
	}
	evs, err := c.s.ListEvents(ctx, store.EventFilter{Name: f.Name, Key: f.Key, Limit: f.Limit})
	return evs, mapError(err)
}
