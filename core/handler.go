package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Task is what a handler receives for one attempt of one task run.
type Task struct {
	// RunID and TaskRunID are UUIDs in canonical text form.
	RunID     string
	TaskRunID string
	Workflow  string
	TaskName  string
	// Attempt is 1-based and counted at claim.
	Attempt     int
	MaxAttempts int
	// RunParams is the run's params object; Params the task's own params
	// object from the workflow definition ({} when absent).
	RunParams json.RawMessage
	Params    json.RawMessage
	// Upstream maps each task this one depends on to its JSON result.
	Upstream map[string]json.RawMessage
	// IdempotencyKey is the rendered key, "" when the task has none.
	IdempotencyKey string
	// Item is the element this task run was made for, when it is one of a
	// for_each task's (JSON); nil otherwise.
	Item json.RawMessage
}

// Handler runs one attempt of a task. It returns a JSON result (nil means
// null) or an error. The context is cancelled when the task's timeout passes,
// the run is cancelled, the lease is lost, or the worker is told to stop
// hard; a handler should return promptly then. Wrap an error with Permanent
// to skip the remaining attempts.
type Handler func(ctx context.Context, task Task) (json.RawMessage, error)

// Registry maps handler names to handlers. It is safe for concurrent use.
type Registry struct {
	mu       sync.RWMutex
	handlers map[string]Handler
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{handlers: map[string]Handler{}}
}

// Register adds h under name. It returns an error for an empty name, a nil
// handler, or a name already registered.
func (r *Registry) Register(name string, h Handler) error {
	if name == "" || h == nil {
		return errors.New("register handler: empty name or nil handler")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.handlers[name]; dup {
		return fmt.Errorf("register handler %q: already registered", name)
	}
	r.handlers[name] = h
	return nil
}

// MustRegister is Register for program setup: it panics on error.
func (r *Registry) MustRegister(name string, h Handler) {
	if err := r.Register(name, h); err != nil {
		panic(err)
	}
}

// Has reports whether name is registered.
func (r *Registry) Has(name string) bool {
	_, ok := r.Lookup(name)
	return ok
}

// Lookup returns the handler registered under name.
func (r *Registry) Lookup(name string) (Handler, bool) {
	if r == nil {
		return nil, false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	h, ok := r.handlers[name]
	return h, ok
}

// Names returns the registered names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.handlers))
	for n := range r.handlers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Only returns a new registry holding only the handlers of r named in
// names (a worker limited to a handler set: ffctl daemon worker
// --handlers). Errors: names is empty, or a name is not registered in r
// (the error names it and what r registers).
func (r *Registry) Only(names []string) (*Registry, error) {
	if len(names) == 0 {
		return nil, errors.New("handler set: no handler named")
	}
	only := NewRegistry()
	for _, n := range names {
		h, ok := r.Lookup(n)
		if !ok {
			return nil, fmt.Errorf("handler set: %q is not a registered handler (registered: %s)", n, strings.Join(r.Names(), ", "))
		}
		if !only.Has(n) {
			_ = only.Register(n, h)
		}
	}
	return only, nil
}

// PermanentError marks an error that no retry can fix: the task goes DEAD at
// once, whatever attempts remain.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so that the task is not retried. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// IsPermanent reports whether err (or an error it wraps) is permanent.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// ErrRunCancelled is the cause of a handler context cancelled because its
// run was cancelled (by an operator or by fail_fast).
var ErrRunCancelled = errors.New("run cancelled")

// ErrLeaseLost is the cause of a handler context cancelled because the
// worker lost the task's lease (the reaper or another claim bumped the
// fencing token): the attempt's outcome will be discarded.
var ErrLeaseLost = errors.New("lease lost")
