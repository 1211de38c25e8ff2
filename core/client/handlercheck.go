package client

// This file holds the handler check of a workflow apply and rollback: the
// handlers a definition names that no live worker registers.

import (
	"cmp"
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/flowforge/flowforge/core"
)

// LiveWorkersWithin is how recently a worker must have been seen for the
// handler check (CheckHandlers) to count its handlers.
const LiveWorkersWithin = 10 * time.Minute

// HandlerPolicy says what CheckHandlers does with a handler no live worker
// registers.
type HandlerPolicy struct {
	// AllowUnknown stores it with a warning even when live workers exist
	// that do not register it (else that is refused).
	AllowUnknown bool
	// Strict refuses it also when no worker has been seen at all (else
	// that is a warning).
	Strict bool
	// AllowHint says in a refusal how the caller lets such a handler
	// through: ffctl's "pass --allow-unknown-handler"; empty: "allow
	// unknown handlers".
	AllowHint string
}

// unservedHandler is one handler of a definition that no live worker
// registers, with the tasks that name it (definition order).
type unservedHandler struct {
	handler string
	tasks   []string
}

// handlerCheck is what the live workers say about a definition's handlers.
type handlerCheck struct {
	// workers counts the worker processes seen within LiveWorkersWithin;
	// live are the handlers they register, sorted.
	workers int
	live    []string
	// unserved are def's handlers none of them registers, in the order
	// the definition first names them.
	unserved []unservedHandler
}

// CheckHandlers compares def's handlers with those of the workers seen
// within LiveWorkersWithin, before def is stored (what names it in the
// messages: "demo/wordcount.yaml", "workflow bill version 1"). It returns
// one warning per handler no live worker registers. Errors, and then
// nothing should be stored: ErrInvalidInput when live workers exist and
// none registers one of def's handlers, unless p.AllowUnknown (the message
// names the tasks, the handler and what the workers register); with
// p.Strict, ErrConflict for any such handler, also when no worker was
// seen; the database's.
func (c *Client) CheckHandlers(ctx context.Context, def *core.Definition, what string, p HandlerPolicy) ([]string, error) {
	hc, err := c.checkHandlers(ctx, def)
	if err != nil {
		return nil, err
	}
	if !p.AllowUnknown {
		if err := hc.refusal(what, p.AllowHint); err != nil {
			return nil, err
		}
	}
	warnings := hc.warnings()
	if p.Strict && len(warnings) > 0 {
		return nil, &kindError{err: fmt.Errorf("%s: %s (strict: nothing stored)", what, warnings[0]), kinds: []error{ErrConflict}}
	}
	return warnings, nil
}

func (c *Client) checkHandlers(ctx context.Context, def *core.Definition) (handlerCheck, error) {
	live, workers, err := c.s.LiveHandlers(ctx, LiveWorkersWithin)
	if err != nil {
		return handlerCheck{}, mapError(err)
	}
	hc := handlerCheck{workers: workers, live: make([]string, 0, len(live))}
	for h := range live {
		hc.live = append(hc.live, h)
	}
	sort.Strings(hc.live)
	at := map[string]int{}
	for _, t := range def.Tasks {
		if k := t.Kind(); k.Held() && k != core.KindForEach {
			continue // a sleep, a wait or a child run: no handler runs it
		}
		if _, ok := live[t.Handler]; ok {
			continue
		}
		i, seen := at[t.Handler]
		if !seen {
			i = len(hc.unserved)
			at[t.Handler] = i
			hc.unserved = append(hc.unserved, unservedHandler{handler: t.Handler})
		}
		hc.unserved[i].tasks = append(hc.unserved[i].tasks, t.Name)
	}
	return hc, nil
}

// liveWithin is LiveWorkersWithin as the messages say it.
func liveWithin() string {
	return fmt.Sprintf("%d min", int(LiveWorkersWithin.Minutes()))
}

// warnings returns one warning per unserved handler.
func (hc handlerCheck) warnings() []string {
	out := make([]string, 0, len(hc.unserved))
	for _, u := range hc.unserved {
		var w string
		if hc.workers == 0 {
			w = fmt.Sprintf("handler %s (%s): no worker has been seen in the last %s (a worker that stopped gracefully is forgotten at once), so none is known to register it", core.TerminalText(u.handler), taskList(u.tasks), liveWithin())
		} else {
			w = fmt.Sprintf("handler %s (%s): none of the %d workers seen in the last %s registers it; they register: %s", core.TerminalText(u.handler), taskList(u.tasks), hc.workers, liveWithin(), hc.registered())
		}
		if u.handler == "shell" {
			w += " (workers register shell only with --allow-shell)"
		}
		out = append(out, w+"; its tasks will wait for such a worker, then fail")
	}
	return out
}

// refusal returns the error (ErrInvalidInput) of a definition whose
// unserved handlers live workers exist to contradict, nil when every
// handler is served or no worker was seen (then it is a warning).
func (hc handlerCheck) refusal(what, hint string) error {
	if hc.workers == 0 || len(hc.unserved) == 0 {
		return nil
	}
	parts := make([]string, 0, len(hc.unserved))
	for _, u := range hc.unserved {
		p := fmt.Sprintf("%s: handler %s", taskList(u.tasks), core.TerminalText(u.handler))
		if u.handler == "shell" {
			p += " (workers register shell only with --allow-shell)"
		}
		parts = append(parts, p)
	}
	verb := "is"
	if len(parts) > 1 {
		verb = "are"
	}
	return invalid("%s: %s %s registered by none of the %d workers seen in the last %s (they register: %s); nothing stored: fix the handler name, start a worker that registers it, or %s to store it anyway",
		what, strings.Join(parts, "; "), verb, hc.workers, liveWithin(), hc.registered(), cmp.Or(hint, "allow unknown handlers"))
}

// registered is the live workers' handlers as the messages list them.
func (hc handlerCheck) registered() string {
	if len(hc.live) == 0 {
		return "no handler"
	}
	return strings.Join(hc.live, ", ")
}

// taskList names tasks: "task a" or "tasks a, b".
func taskList(tasks []string) string {
	if len(tasks) == 1 {
		return "task " + tasks[0]
	}
	return "tasks " + strings.Join(tasks, ", ")
}
