package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
)

// Dispatch is the body of a dispatch message, as written by the store into
// outbox.payload: {"task_run_id": uuid, "run_id": uuid, "fencing_token": n,
// "task": name, "handler": name}. The handler lets a worker that does not
// register it hand the delivery back before claiming.
type Dispatch struct {
	TaskRunID    uuid.UUID `json:"task_run_id"`
	RunID        uuid.UUID `json:"run_id"`
	FencingToken int64     `json:"fencing_token"`
	Task         string    `json:"task"`
	Handler      string    `json:"handler,omitempty"`
}

// ErrBadDispatch is matched by every decoding failure of DecodeDispatch.
var ErrBadDispatch = errors.New("not a valid dispatch message")

// DecodeDispatch parses a message body: one JSON object with a non-nil
// task_run_id and run_id, a positive fencing_token and a non-empty task;
// handler is optional. Fields it does not know are ignored, so a newer
// scheduler may add fields without poisoning an older worker's queue (the
// rolling-upgrade rule, sql/migrations/README.md); the required ones are
// strict. It returns an error wrapping ErrBadDispatch for anything else
// (not JSON, not an object, wrong types, trailing data, a required field
// missing or invalid).
func DecodeDispatch(body []byte) (Dispatch, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	var d Dispatch
	if err := dec.Decode(&d); err != nil {
		return Dispatch{}, fmt.Errorf("%w: %v", ErrBadDispatch, err)
	}
	if dec.More() {
		return Dispatch{}, fmt.Errorf("%w: trailing data", ErrBadDispatch)
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
