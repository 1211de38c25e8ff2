package core

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
)

// DispatchVersion is the version of the dispatch message this binary
// writes, its "v" field. See Dispatch for what a reader does with another
// version.
const DispatchVersion = 2

// Dispatch is the body of a dispatch message, the one definition of it: the
// store writes it into outbox.payload (core/store's dispatchPayloadSQL
// builds it from the task row), the publisher sends it as is, and a worker
// reads it with DecodeDispatch. Version 1 is the JSON object
//
//	{"v": 1, "task_run_id": uuid, "run_id": uuid, "fencing_token": n,
//	 "task": name, "handler": name}
//
// The handler lets a worker that does not register it hand the delivery
// back before claiming. Version 2 adds
//
//	"installation": uuid
//
// the id of the installation (the database, see store.Store.Installation)
// whose outbox wrote the message, so that a worker of another installation
// sharing the queue sends it back to the queue instead of acking it as a
// lost claim (e2e/FAILURE_MODEL.md, mode 89). It is optional: a message
// without it (version 1, or a database whose installation row is missing)
// is run as before. Also optional, and not a new version (a reader that
// ignores it loses nothing but a span):
//
//	"traceparent": "00-<trace id>-<span id>-<flags>"
//
// the W3C trace context of a traced run (package tracing), written only
// for a run that has one.
//
// Versioning. A new version may only ADD fields: it never removes, renames
// or changes the type or meaning of one that an earlier version has. So a
// reader runs a message of any version whose required fields are valid:
//   - v missing (or null) reads as version 1: binaries before the field
//     existed wrote no v, and their messages are still queued during a
//     rolling deploy (sql/migrations/README.md, e2e/upgrade_test.go);
//   - v higher than DispatchVersion, from a newer binary, is run: the
//     fields it adds are ignored, as every unknown field is;
//   - v below 1, or not an integer, is not a dispatch (ErrBadDispatch).
//
// A change that cannot be expressed by adding fields is a new kind of
// message, on its own queue, not a new version of this one.
type Dispatch struct {
	// V is the message's version: DispatchVersion when written by this
	// binary; DecodeDispatch reports a missing v as 1.
	V            int       `json:"v"`
	TaskRunID    uuid.UUID `json:"task_run_id"`
	RunID        uuid.UUID `json:"run_id"`
	FencingToken int64     `json:"fencing_token"`
	Task         string    `json:"task"`
	Handler      string    `json:"handler,omitempty"`
	// Installation is the writer's installation id (version 2); uuid.Nil
	// when the message has none (an older writer), or null.
	Installation uuid.UUID `json:"installation,omitzero"`
	// Traceparent is the W3C trace context of the run's trace (its
	// traceparent header's value, "00-<trace id>-<span id>-<flags>"),
	// present only when the run was triggered with tracing on: the
	// publisher's and the worker's spans join that trace. Optional and
	// advisory: an older worker ignores it, and a malformed value is not
	// an error here (DecodeDispatch keeps it; the reader that parses it
	// ignores what it cannot parse), so it never makes a message poison.
	Traceparent string `json:"traceparent,omitempty"`
}

// Foreign reports whether d belongs to another installation than ours: it
// names an installation and that is not ours. A message naming none (an
// older binary's) is never foreign, and neither is any message while ours
// is unknown (uuid.Nil): see the worker's foreignVerdict for what it does
// then.
func (d Dispatch) Foreign(ours uuid.UUID) bool {
	return d.Installation != uuid.Nil && ours != uuid.Nil && d.Installation != ours
}

// ErrBadDispatch is matched by every decoding failure of DecodeDispatch.
var ErrBadDispatch = errors.New("not a valid dispatch message")

// dispatchWire is Dispatch as read: V is a pointer so that a missing v is
// told apart from an explicit 0. It shadows Dispatch.V (encoding/json picks
// the shallower of two fields with one name), so every other field is read
// through the one definition above.
//
// Traceparent is read raw for the same reason, so that a value of another
// type than a string is dropped instead of failing the decoding: the field
// is advisory and never makes a message poison.
type dispatchWire struct {
	V           *int            `json:"v"`
	Traceparent json.RawMessage `json:"traceparent"`
	Dispatch
}

// traceparentOf returns raw when it is a JSON string, else "".
func traceparentOf(raw json.RawMessage) string {
	var s string
	if len(raw) == 0 || json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// DecodeDispatch parses a message body: one JSON object with a non-nil
// task_run_id and run_id, a positive fencing_token and a non-empty task;
// handler is optional; v, when present, is an integer of at least 1 and
// when missing reads as 1 (see Dispatch for the versioning rule). Fields it
// does not know are ignored, so a newer scheduler may add fields without
// poisoning an older worker's queue (the rolling-upgrade rule,
// sql/migrations/README.md); the required ones are strict. It returns an
// error wrapping ErrBadDispatch for anything else (not JSON, not an
// object, wrong types, trailing data, a required field missing or
// invalid).
func DecodeDispatch(body []byte) (Dispatch, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	var w dispatchWire
	if err := dec.Decode(&w); err != nil {
		return Dispatch{}, fmt.Errorf("%w: %v", ErrBadDispatch, err)
	}
	if dec.More() {
		return Dispatch{}, fmt.Errorf("%w: trailing data", ErrBadDispatch)
	}
	d := w.Dispatch
	d.Traceparent = traceparentOf(w.Traceparent)
	switch {
	case w.V == nil:
		d.V = 1
	case *w.V < 1:
		return Dispatch{}, fmt.Errorf("%w: v must be at least 1, got %d", ErrBadDispatch, *w.V)
	default:
		d.V = *w.V
	}
	switch {
	case d.TaskRunID == uuid.Nil:
		return Dispatch{}, fmt.Errorf("%w: task_run_id is missing", ErrBadDispatch)
	case d.RunID == uuid.Nil:
		return Dispatch{}, fmt.Errorf("%w: run_id is missing", ErrBadDispatch)
	case d.FencingToken <= 0:
		return Dispatch{}, fmt.Errorf("%w: fencing_token must be positive", ErrBadDispatch)
	case d.Task == "":
		return Dispatch{}, fmt.Errorf("%w: task is missing", ErrBadDispatch)
	}
	return d, nil
}

// DispatchHandler returns the handler a dispatch message body names, for
// routing (see broker.RoutingKey): "" when the body names none or is not a
// JSON object. It reads only the handler field, so it is cheaper than
// DecodeDispatch and validates nothing else.
func DispatchHandler(body []byte) string {
	h, _ := DispatchRoute(body)
	return h
}

// DispatchRoute is DispatchHandler that also returns the body's
// traceparent ("" when it has none, or the body is not a JSON object),
// read in the same pass: the publisher learns whether a row is traced at
// no extra cost. Neither value is validated.
func DispatchRoute(body []byte) (handler, traceparent string) {
	var h struct {
		Handler     string          `json:"handler"`
		Traceparent json.RawMessage `json:"traceparent"`
	}
	if json.Unmarshal(body, &h) != nil {
		return "", ""
	}
	return h.Handler, traceparentOf(h.Traceparent)
}
