// Package handlers holds FlowForge's built-in task handlers: noop, sleep,
// fail, shell (only when allowed) and http. Register adds them to a
// core.Registry without replacing handlers a program registered itself.
package handlers

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/flowforge/flowforge/core"
)

// Options selects and configures the built-ins.
type Options struct {
	// AllowShell enables the shell handler (off by default: it runs
	// arbitrary commands as the worker's user).
	AllowShell bool
	// ShellEnvPass names worker variables the shell handler passes to its
	// commands beyond its minimal environment (see ShellHandler); check it
	// with CheckShellEnvPass.
	ShellEnvPass []string
	// ShellSupervisor is the shell handler's ShellOptions.Supervisor.
	ShellSupervisor []string
	// ShellConcurrency is the shell handler's ShellOptions.Concurrency (0:
	// ShellConcurrencyDefault()).
	ShellConcurrency int
	// HTTPDenyPrivate makes the default http client refuse private and
	// loopback addresses (HTTPClientOptions.DenyPrivate). Ignored when
	// HTTPClient is set.
	HTTPDenyPrivate bool
	// HTTPClient is used by the http handler; nil means
	// NewHTTPClient(HTTPClientOptions{DenyPrivate: HTTPDenyPrivate}).
	HTTPClient *http.Client
}

// Register adds the built-in handlers to reg, skipping any name reg already
// has (a program's own handler wins).
func Register(reg *core.Registry, opt Options) {
	client := opt.HTTPClient
	if client == nil {
		client = NewHTTPClient(HTTPClientOptions{DenyPrivate: opt.HTTPDenyPrivate})
	}
	builtins := map[string]core.Handler{
		"noop":  Noop,
		"sleep": Sleep,
		"fail":  Fail,
		"http":  HTTP(client),
	}
	if opt.AllowShell {
		builtins["shell"] = ShellHandler(ShellOptions{EnvPass: opt.ShellEnvPass, Supervisor: opt.ShellSupervisor,
			Concurrency: cmp.Or(opt.ShellConcurrency, ShellConcurrencyDefault())})
	}
	for name, h := range builtins {
		if !reg.Has(name) {
			_ = reg.Register(name, h)
		}
	}
}

// decodeParams decodes a task's params strictly into v: unknown fields are
// a permanent error (no retry can fix a typo in the workflow file).
func decodeParams(raw json.RawMessage, v any) error {
	if len(raw) == 0 || string(raw) == "null" {
		raw = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if msg, ok := core.JSONTypeError(err); ok {
			return core.Permanent(fmt.Errorf("params: %s", msg))
		}
		return core.Permanent(fmt.Errorf("params: %w", err))
	}
	return nil
}

// NoopParams are the noop handler's params.
type NoopParams struct {
	// LogLines is how many lines it logs into the task's log (core.Logger,
	// level INFO: "noop: line I of N"), 0 to NoopLogLinesMax; the
	// benchmark's W1 with task logs sets 10.
	LogLines int `json:"log_lines"`
}

// NoopLogLinesMax bounds NoopParams.LogLines.
const NoopLogLinesMax = 1000

// Noop succeeds at once with {}, after logging params.log_lines lines
// (none by default) into the task's log.
func Noop(ctx context.Context, t core.Task) (json.RawMessage, error) {
	var p NoopParams
	if err := decodeParams(t.Params, &p); err != nil {
		return nil, err
	}
	if err := p.check(); err != nil {
		return nil, err
	}
	if p.LogLines > 0 {
		log := core.Logger(ctx)
		for i := 1; i <= p.LogLines; i++ {
			log.Info(fmt.Sprintf("noop: line %d of %d", i, p.LogLines))
		}
	}
	return json.RawMessage(`{}`), nil
}

// check refuses a log_lines outside 0 to NoopLogLinesMax (permanent).
func (p NoopParams) check() error {
	if p.LogLines < 0 || p.LogLines > NoopLogLinesMax {
		return core.Permanent(fmt.Errorf("params.log_lines %d: want 0 to %d", p.LogLines, NoopLogLinesMax))
	}
	return nil
}

// SleepParams are the sleep handler's params.
type SleepParams struct {
	// Duration is a Go duration string ("2s").
	Duration core.Duration `json:"duration"`
}

// Sleep waits params.duration (or until its context ends, returning the
// context's cause) and returns {"slept": "<duration>"}.
func Sleep(ctx context.Context, t core.Task) (json.RawMessage, error) {
	var p SleepParams
	if err := decodeParams(t.Params, &p); err != nil {
		return nil, err
	}
	d := time.Duration(p.Duration)
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return nil, fmt.Errorf("sleep interrupted: %w", context.Cause(ctx))
	case <-timer.C:
	}
	return json.Marshal(map[string]string{"slept": d.String()})
}

// FailParams are the fail handler's params.
type FailParams struct {
	// Times is how many first attempts fail; absent means every attempt.
	Times *int `json:"times"`
	// Permanent makes the failure permanent (no retry).
	Permanent bool `json:"permanent"`
	// Message is the error text (default "fail handler: planned failure").
	Message string `json:"message"`
}

// Fail fails its first params.times attempts (all when absent), then
// succeeds with {"attempt": n}. For demos and tests.
func Fail(ctx context.Context, t core.Task) (json.RawMessage, error) {
	var p FailParams
	if err := decodeParams(t.Params, &p); err != nil {
		return nil, err
	}
	if p.Times == nil || t.Attempt <= *p.Times {
		msg := p.Message
		if msg == "" {
			msg = fmt.Sprintf("fail handler: planned failure of attempt %d", t.Attempt)
		}
		err := errors.New(msg)
		if p.Permanent {
			return nil, core.Permanent(err)
		}
		return nil, err
	}
	return json.Marshal(map[string]int{"attempt": t.Attempt})
}
