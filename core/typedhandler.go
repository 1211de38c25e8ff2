package core

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// TypedFunc is a handler written with the types of its params and its
// result: TypedHandler and TypedRunHandler decode Args for it and encode
// its Result.
type TypedFunc[Args, Result any] func(ctx context.Context, t Task, args Args) (Result, error)

// TypedHandler returns a Handler that decodes the task's own params
// (t.Params: the workflow file's `params:` of the task, its templates
// rendered from the run's params) into Args, calls fn, and returns its
// Result encoded as JSON; register it under a name as any handler:
//
//	reg.MustRegister("charge", core.TypedHandler(charge))
//
// Decoding is strict, as the built-in handlers' is: an unknown field is an
// error (a typo in the workflow file is caught, not ignored). A params
// document that does not decode into Args fails the task permanently (no
// retry can mend it) with a *ParamsError naming the field and what was
// wanted: `params of task charge: field "amount": want int, got string`.
// fn's error is returned as it is (wrap it with Permanent for an error no
// retry can fix); a Result that encoding/json cannot encode fails the task
// permanently too.
func TypedHandler[Args, Result any](fn TypedFunc[Args, Result]) Handler {
	return typed(fn, "params", func(t Task) json.RawMessage { return t.Params }, true)
}

// TypedRunHandler is TypedHandler decoding the run's params (t.RunParams:
// what the trigger gave) into Args. Unknown fields are ignored: a run's
// params are shared by all of its tasks, so one task's Args need not name
// the params meant for another.
func TypedRunHandler[Args, Result any](fn TypedFunc[Args, Result]) Handler {
	return typed(fn, "run params", func(t Task) json.RawMessage { return t.RunParams }, false)
}

func typed[Args, Result any](fn TypedFunc[Args, Result], source string, raw func(Task) json.RawMessage, strict bool) Handler {
	return func(ctx context.Context, t Task) (json.RawMessage, error) {
		var args Args
		if err := decodeArgs(raw(t), &args, strict); err != nil {
			return nil, Permanent(&ParamsError{Source: source, Task: t.TaskName, Err: err})
		}
		res, err := fn(ctx, t, args)
		if err != nil {
			return nil, err
		}
		out, err := json.Marshal(res)
		if err != nil {
			return nil, Permanent(fmt.Errorf("result of task %s: cannot encode %T as JSON: %w", t.TaskName, res, err))
		}
		return out, nil
	}
}

// ParamsError is a typed handler's refusal of a task's params (Source
// "params") or its run's (Source "run params") that do not decode into its
// Args. Err is encoding/json's error (a *json.UnmarshalTypeError, a
// *json.SyntaxError, or the unknown-field error).
type ParamsError struct {
	Source string
	Task   string
	Err    error
}

func (e *ParamsError) Error() string {
	return fmt.Sprintf("%s of task %s: %s", e.Source, e.Task, describeDecodeError(e.Err))
}

// Unwrap returns encoding/json's error.
func (e *ParamsError) Unwrap() error { return e.Err }

// decodeArgs decodes raw (empty or null: {}) into v, refusing unknown
// fields when strict.
func decodeArgs(raw json.RawMessage, v any, strict bool) error {
	if len(bytes.TrimSpace(raw)) == 0 || string(raw) == "null" {
		raw = json.RawMessage(`{}`)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if strict {
		dec.DisallowUnknownFields()
	}
	return dec.Decode(v)
}

// describeDecodeError says what encoding/json refused, naming the field.
func describeDecodeError(err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te) && te.Field != "":
		return fmt.Sprintf("field %q: want %s, got JSON %s", te.Field, typeName(te.Type), te.Value)
	case errors.As(err, &te):
		return fmt.Sprintf("want %s, got JSON %s", typeName(te.Type), te.Value)
	case errors.As(err, &se), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Sprintf("not JSON: %v", err)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return strings.TrimPrefix(err.Error(), "json: ") + " (the handler's params have no such field)"
	}
	return err.Error()
}

// typeName is t's name as a reader of the workflow file knows it.
func typeName(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	return t.String()
}
