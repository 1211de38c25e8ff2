package client

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/schedule"
	"github.com/flowforge/flowforge/core/store"
)

// ApplyOptions are ApplyWorkflow's.
type ApplyOptions struct {
	// Source names the file in messages ("demo/wordcount.yaml", "-");
	// empty: "workflow file".
	Source string
	// Name, when not empty, is the workflow the file must name (the HTTP
	// API's path): another is ErrInvalidInput.
	Name string
	// CheckParams, when not nil, checks each task's params for its
	// handler before anything is stored (ffctl and the API pass the
	// built-in handlers' check, daemon/handlers.ValidateParams).
	CheckParams func(handler string, params json.RawMessage) error
	// Handlers is the handler check's policy (CheckHandlers).
	Handlers HandlerPolicy
	// Actor is recorded in the audit of the file's schedules (empty: the
	// Client's).
	Actor string
}

// ApplyResult is what ApplyWorkflow stored, the object `ffctl workflow
// apply -o json` prints: the workflow's name, its newest version, whether
// this apply created it (false: the definition was unchanged), its task
// count, the warnings (handlers no live worker registers, schedules whose
// params the new version refuses) and what happened to the file's
// schedules.
type ApplyResult struct {
	Name      string                 `json:"name"`
	Version   int                    `json:"version"`
	Created   bool                   `json:"created"`
	Tasks     int                    `json:"tasks"`
	Warnings  []string               `json:"warnings"`
	Schedules []store.ScheduleChange `json:"schedules"`
}

// ParseWorkflowFile reads a workflow file (YAML or JSON; a UTF-8
// byte-order mark ignored) and checks all of
// it that needs no database: the definition, its schedules and, with
// check, each task's params for its handler. source names the file in the
// errors. Errors (ErrInvalidInput): the first problem, "SOURCE: ...".
func ParseWorkflowFile(data []byte, source string, check func(handler string, params json.RawMessage) error) (*core.Definition, []schedule.Definition, error) {
	source = cmp.Or(source, "workflow file")
	file, err := core.ParseWorkflowFile(bytes.TrimPrefix(data, []byte("\uFEFF"))) // a UTF-8 byte-order mark is no part of the text
	if err != nil {
		return nil, nil, invalidIn(source, err)
	}
	def := file.Definition
	scheds := schedule.FromFile(def.Name, file.Schedules)
	if _, err := schedule.ValidateFile(def, scheds); err != nil {
		return nil, nil, invalidIn(source, err)
	}
	if check != nil {
		for _, t := range def.Tasks {
			if err := check(t.Handler, t.Params); err != nil {
				return nil, nil, invalidIn(source, fmt.Errorf("task %s: %w", t.Name, err))
			}
		}
	}
	return def, scheds, nil
}

// invalidIn is err, found in source, as ErrInvalidInput: "SOURCE: err".
func invalidIn(source string, err error) error {
	return &kindError{err: fmt.Errorf("%s: %w", source, err), kinds: []error{ErrInvalidInput}}
}

// ApplyWorkflow checks the workflow file data (YAML or JSON) as `ffctl
// workflow apply` does and stores it: an unchanged definition is a no-op,
// a changed one the next version, and the file's schedules are applied in
// the same transaction. Nothing is stored unless the whole file passes
// ParseWorkflowFile and CheckHandlers. Errors: those of ParseWorkflowFile
// and CheckHandlers; ErrConflict for a schedule name held by another
// owner; the store's. An error after the definition was stored says so.
func (c *Client) ApplyWorkflow(ctx context.Context, data []byte, opts ApplyOptions) (ApplyResult, error) {
	source := cmp.Or(opts.Source, "workflow file")
	def, scheds, err := ParseWorkflowFile(data, source, opts.CheckParams)
	if err != nil {
		return ApplyResult{}, err
	}
	if opts.Name != "" && def.Name != opts.Name {
		return ApplyResult{}, invalid("%s: it names workflow %q, not %q", source, def.Name, opts.Name)
	}
	warnings, err := c.CheckHandlers(ctx, def, source, opts.Handlers)
	if err != nil {
		return ApplyResult{}, err
	}
	wf, created, changes, err := c.s.ApplyWorkflowFile(ctx, def, scheds, c.actorOr(opts.Actor))
	if err != nil {
		return ApplyResult{}, mapError(err)
	}
	if created {
		broken, err := c.UnfitSchedules(ctx, wf)
		if err != nil {
			return ApplyResult{}, fmt.Errorf("workflow %s: stored version %d, but its schedules could not be checked: %w", wf.Name, wf.Version, err)
		}
		warnings = append(warnings, broken...)
	}
	if changes == nil {
		changes = []store.ScheduleChange{}
	}
	return ApplyResult{Name: wf.Name, Version: wf.Version, Created: created, Tasks: len(wf.Definition.Tasks),
		Warnings: warnings, Schedules: changes}, nil
}

// UnfitSchedules returns one warning per schedule created with `ffctl
// schedule create` whose params wf, a version just stored, refuses (a
// task's idempotency key needs a param the schedule does not pass): each
// of its ticks would record failed. A workflow file's own schedules were
// checked against the file before anything was stored. Errors: the
// database's.
func (c *Client) UnfitSchedules(ctx context.Context, wf store.Workflow) ([]string, error) {
	scheds, err := c.s.ListSchedules(ctx)
	if err != nil {
		return nil, err
	}
	out := []string{}
	for _, sc := range scheds {
		if sc.Workflow != wf.Name || sc.Owner == schedule.OwnerFile {
			continue
		}
		_, err := c.s.CheckRuns(ctx, wf.Name, wf.Version, []json.RawMessage{sc.Params})
		var bad *store.BadRunError
		switch {
		case errors.As(err, &bad):
			out = append(out, fmt.Sprintf("schedule %s: its params do not fit version %d: %v; every tick will record failed until the schedule's params (delete and create it again) or the workflow change",
				core.TerminalText(sc.Name), wf.Version, bad.Err))
		case err != nil:
			return nil, err
		}
	}
	return out, nil
}
