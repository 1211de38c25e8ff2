package client

import (
	"errors"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/auth"
	"github.com/flowforge/flowforge/core/schedule"
	"github.com/flowforge/flowforge/core/store"
)

// The client's errors, for errors.Is. Every error a Client method returns
// that one of them describes matches it; the error's text is the store's,
// unchanged (ffctl prints the same), and the store's own sentinels
// (store.ErrNotFound, core.ErrBadParams, ...) still match too.
var (
	// ErrNotFound: the workflow (or the version asked for), run or task
	// named does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the request contradicts what is stored: an idempotency
	// key that names a run of other params or of another workflow; a
	// cancel of a run that has ended or was cancelled already; a requeue
	// of a task that is not DEAD (or whose run was cancelled).
	ErrConflict = errors.New("conflict")
	// ErrInvalidParams: a run's params (or an event's payload) were
	// refused before anything was written: not JSON, not an object, a NUL
	// character (\u0000), more than core.MaxParamsBytes, an unpaired
	// surrogate, a key twice in one object, an idempotency key that is
	// too long or not UTF-8, params from which a task's idempotency key
	// or params template cannot render (a missing param), or a batch too
	// large. It also matches ErrInvalidInput.
	ErrInvalidParams = errors.New("invalid params")
	// ErrInvalidInput: a request refused before anything was read or
	// written, for what it says rather than what is stored: a malformed
	// id, an id prefix that matches two or more ids, a run id given for a
	// task (or the reverse), a workflow name, version, reason, filter or
	// option out of its bounds, an event's name, key, id or lookback
	// (core.ErrBadEvent); and every ErrInvalidParams.
	ErrInvalidInput = errors.New("invalid input")
	// ErrPaused: the workflow is paused with mode drop, so the trigger
	// created no run (the pause counted it as dropped). A pause with mode
	// queue never refuses: its runs are created and wait.
	ErrPaused = errors.New("workflow is paused (mode drop)")
	// ErrOutcomeUnknown: a write that was its own transaction (Trigger,
	// TriggerMany, Cancel, RequeueDead, SendEvent) got no answer to its
	// commit: it may or may not have been made. Retry a trigger with the
	// same idempotency key (an event with the same id), or read the run. TriggerTx never returns it: the commit is the
	// caller's.
	ErrOutcomeUnknown = errors.New("the database did not answer the commit; the write may or may not have been made")
)

// kindsOf returns the client's errors that describe err, an error of the
// store or core.
func kindsOf(err error) []error {
	var amb *store.AmbiguousIDError
	var wrong *store.WrongKindError
	switch {
	case errors.Is(err, core.ErrBadParams):
		return []error{ErrInvalidParams, ErrInvalidInput}
	case errors.Is(err, store.ErrNotFound):
		return []error{ErrNotFound}
	case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrRunFinished), errors.Is(err, store.ErrNotDead):
		return []error{ErrConflict}
	case errors.Is(err, store.ErrWorkflowPaused):
		return []error{ErrPaused}
	case errors.Is(err, store.ErrCommitOutcomeUnknown):
		return []error{ErrOutcomeUnknown}
	case errors.As(err, &amb), errors.As(err, &wrong), errors.Is(err, core.ErrBadIDPrefix),
		errors.Is(err, core.ErrBadWorkflow), errors.Is(err, core.ErrBadReason), errors.Is(err, store.ErrBadRunFilter),
		errors.Is(err, auth.ErrBadToken), errors.Is(err, schedule.ErrBadSchedule), errors.Is(err, core.ErrBadEvent):
		return []error{ErrInvalidInput}
	}
	return nil
}

// kindError is an error of the store or core with the client's errors it
// matches besides its own: its text is err's.
type kindError struct {
	err   error
	kinds []error
}

func (e *kindError) Error() string { return e.err.Error() }

func (e *kindError) Unwrap() []error { return append([]error{e.err}, e.kinds...) }

// mapError adds to err the client's errors that describe it (kindsOf);
// nil stays nil, and an error none describes is returned as it is.
func mapError(err error) error {
	if err == nil {
		return nil
	}
	if k := kindsOf(err); k != nil {
		return &kindError{err: err, kinds: k}
	}
	return err
}
