package cli

// This file holds the handler check of `workflow apply` and `workflow
// rollback`: the handlers a definition names that no live worker
// registers.

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// LiveWorkersWithinDefault is how recently a worker must have been seen for
// `workflow apply` and `workflow rollback` to count its handlers.
const LiveWorkersWithinDefault = 10 * time.Minute

// allowUnknownHandlerFlag is --allow-unknown-handler: store a definition
// naming a handler no live worker registers (with a warning).
func allowUnknownHandlerFlag() cli.Flag {
	return &cli.BoolFlag{Name: "allow-unknown-handler", Usage: "store the definition even if live workers exist and none registers one of its handlers (a warning instead of exit 2)"}
}

// unservedHandler is one handler of a definition that no live worker
// registers, with the tasks that name it (definition order).
type unservedHandler struct {
	handler string
	tasks   []string
}

// handlerCheck is what the live workers say about a definition's handlers.
type handlerCheck struct {
	// workers counts the worker processes seen within
	// LiveWorkersWithinDefault; live are the handlers they register,
	// sorted.
	workers int
	live    []string
	// unserved are def's handlers none of them registers, in the order
	// the definition first names them.
	unserved []unservedHandler
}

// checkHandlers compares def's handlers with those of the workers seen
// within LiveWorkersWithinDefault. Errors: the store's.
func checkHandlers(ctx context.Context, s *store.Store, def *core.Definition) (handlerCheck, error) {
	live, workers, err := s.LiveHandlers(ctx, LiveWorkersWithinDefault)
	if err != nil {
		return handlerCheck{}, err
	}
	hc := handlerCheck{workers: workers, live: make([]string, 0, len(live))}
	for h := range live {
		hc.live = append(hc.live, h)
	}
	sort.Strings(hc.live)
	at := map[string]int{}
	for _, t := range def.Tasks {
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

// liveWithin is LiveWorkersWithinDefault as the messages say it.
func liveWithin() string {
	return fmt.Sprintf("%d min", int(LiveWorkersWithinDefault.Minutes()))
}

// warnings returns one warning per unserved handler (apply's and
// rollback's text on standard error).
func (hc handlerCheck) warnings() []string {
	out := make([]string, 0, len(hc.unserved))
	for _, u := range hc.unserved {
		var w string
		if hc.workers == 0 {
			w = fmt.Sprintf("handler %s (%s): no worker has been seen in the last %s, so none is known to register it", core.TerminalText(u.handler), taskList(u.tasks), liveWithin())
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

// refusal returns the error of a definition whose unserved handlers live
// workers exist to contradict (exit 2, nothing stored), nil when every
// handler is served or no worker was seen (then it is a warning).
func (hc handlerCheck) refusal(what string) error {
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
	return usageError("%s: %s %s registered by none of the %d workers seen in the last %s (they register: %s); nothing stored: fix the handler name, start a worker that registers it, or pass --allow-unknown-handler to store it anyway",
		what, strings.Join(parts, "; "), verb, hc.workers, liveWithin(), hc.registered())
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

// handlerGate runs the handler check of a definition about to be stored
// (what names it in messages): a refusal when live workers contradict it,
// unless --allow-unknown-handler; else, with --strict, any unserved handler
// (no worker seen) is a failure (exit 1). It returns the warnings to print and keep. Errors: the
// refusal (exit 2), --strict's failure (exit 1), the store's.
func handlerGate(c *cli.Context, s *store.Store, def *core.Definition, what string) ([]string, error) {
	hc, err := checkHandlers(c.Context, s, def)
	if err != nil {
		return nil, failure(err)
	}
	if !c.Bool("allow-unknown-handler") {
		if err := hc.refusal(what); err != nil {
			return nil, err
		}
	}
	warnings := hc.warnings()
	if c.Bool("strict") && len(warnings) > 0 {
		return nil, failure(fmt.Errorf("%s: %s (--strict; nothing stored)", what, warnings[0]))
	}
	return warnings, nil
}
