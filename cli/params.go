package cli

// This file holds the run params of --param and --params-file, which run
// trigger and schedule create take.

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
)

// buildParams merges --params-file and --param into one JSON object.
func buildParams(c *cli.Context, env *Env) (json.RawMessage, error) {
	params := map[string]any{}
	if f := c.String("params-file"); f != "" {
		data, err := readInput(env, f)
		if err != nil {
			return nil, err
		}
		if err := core.ValidateParams(data); err != nil {
			return nil, usageError("--params-file %s: %v", f, err)
		}
		dec := json.NewDecoder(strings.NewReader(string(data)))
		dec.UseNumber()
		if err := dec.Decode(&params); err != nil {
			return nil, usageError("--params-file %s: %v", f, err)
		}
	}
	for _, kv := range c.StringSlice("param") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageError("--param %q: want key=value", kv)
		}
		if !utf8.ValidString(kv) {
			return nil, usageError("--param %q: not valid UTF-8", kv)
		}
		params[k] = v
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // the size limit applies to what the user sent, not to \u003c escapes
	if err := enc.Encode(params); err != nil {
		return nil, usageError("params: %v", err)
	}
	raw := bytes.TrimSpace(buf.Bytes())
	if err := core.ValidateParams(raw); err != nil {
		return nil, usageError("%v", err)
	}
	return raw, nil
}
