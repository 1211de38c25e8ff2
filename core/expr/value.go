package expr

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// decode decodes raw JSON (empty: null) into the values CEL reads: maps,
// lists, strings, bools, null, and numbers as int64 when written as
// integers that fit, else float64 (so `size(x) == params.n` compares ints).
// what names the value in an error.
func decode(raw json.RawMessage, what string) (any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%s is not JSON: %w", what, err)
	}
	return numbers(v), nil
}

// numbers replaces each json.Number in v by an int64 or a float64.
func numbers(v any) any {
	switch t := v.(type) {
	case json.Number:
		if !strings.ContainsAny(t.String(), ".eE") {
			if i, err := t.Int64(); err == nil {
				return i
			}
		}
		f, _ := t.Float64()
		return f
	case map[string]any:
		for k, e := range t {
			t[k] = numbers(e)
		}
	case []any:
		for i, e := range t {
			t[i] = numbers(e)
		}
	}
	return v
}
