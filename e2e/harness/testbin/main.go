// Command testbin is ffctl built the way a program with handlers of its
// own builds it (cli.Main with a registry), for the end-to-end tests that
// need a handler the built-ins do not have. It registers, beside the
// built-ins:
//
//   - "boom": panics (assignment to entry in nil map) on attempt 1 and
//     returns {"survived": true} on later attempts (mode 33);
//   - "special": returns {"ran": "testbin"}, so a test can tell which
//     worker ran a task (mode 32: workers with different handler sets on
//     one queue);
//   - "stubborn": on attempt 1 blocks for params.seconds (default 120)
//     ignoring its context, as a handler stuck in a call that takes no
//     context does; later attempts return {"attempt": N} at once (mode
//     127: the abort grace).
//
// The e2e harness builds it with harness.BuildTestBin (under make mutate,
// with the mutant's overlay, like ffctl).
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/flowforge/flowforge/cli"
	"github.com/flowforge/flowforge/core"
)

func main() {
	reg := core.NewRegistry()
	reg.MustRegister("boom", boom)
	reg.MustRegister("special", func(context.Context, core.Task) (json.RawMessage, error) {
		return json.RawMessage(`{"ran": "testbin"}`), nil
	})
	reg.MustRegister("stubborn", stubborn)
	cli.Main(reg)
}

// stubborn ignores its context on a task's first attempt: it blocks for
// params.seconds (default 120) whatever happens to ctx.
func stubborn(_ context.Context, task core.Task) (json.RawMessage, error) {
	if task.Attempt == 1 {
		var p struct {
			Seconds int `json:"seconds"`
		}
		if err := json.Unmarshal(task.Params, &p); err != nil {
			return nil, fmt.Errorf("stubborn: params: %w", err)
		}
		time.Sleep(time.Duration(cmp.Or(p.Seconds, 120)) * time.Second)
	}
	return json.RawMessage(fmt.Sprintf(`{"attempt": %d}`, task.Attempt)), nil
}

// boom panics on a task's first attempt and succeeds on the others.
func boom(_ context.Context, task core.Task) (json.RawMessage, error) {
	if task.Attempt == 1 {
		var m map[string]int
		m["nil map"] = 1 // panics: assignment to entry in nil map
	}
	return json.RawMessage(`{"survived": true}`), nil
}
