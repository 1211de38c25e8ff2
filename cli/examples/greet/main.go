// Command greet is ffctl with one extra handler, "greet": the whole of what
// a program needs to add its own task handlers to FlowForge.
package main

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/flowforge/flowforge/cli"
	"github.com/flowforge/flowforge/core"
)

func main() {
	reg := core.NewRegistry()
	reg.MustRegister("greet", func(ctx context.Context, t core.Task) (json.RawMessage, error) {
		var p struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(t.RunParams, &p); err != nil || p.Name == "" {
			return nil, core.Permanent(errors.New("run param 'name' is required"))
		}
		return json.Marshal(map[string]string{"greeting": "hello, " + p.Name})
	})
	cli.Main(reg)
}
