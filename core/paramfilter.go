package core

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ParamFilter selects runs by one top-level run param, as `ffctl run list
// --param key=value` gives it: a run matches when its param Key equals
// Value as a JSON string, or, when Value is itself a JSON value (3, true,
// null, "x", [1,2], {"a":1}), equals that value (jsonb equality: 3 and 3.0
// are equal, object keys in any order). So `--param n=3` finds the runs
// triggered with `--param n=3` (which stores the string "3") and those
// whose params file held the number 3. Key names a top-level param only: a
// dot in it is part of the name, not a path.
type ParamFilter struct {
	Key, Value string
}

// ParseParamFilter parses "key=value", split at the first "=" (the value
// may be empty or hold more "="), and checks it (Validate). Errors wrap
// ErrBadParams: no "=", and those of Validate.
func ParseParamFilter(kv string) (ParamFilter, error) {
	k, v, ok := strings.Cut(kv, "=")
	if !ok {
		return ParamFilter{}, fmt.Errorf("%w: %q: want key=value", ErrBadParams, kv)
	}
	f := ParamFilter{Key: k, Value: v}
	if err := f.Validate(); err != nil {
		return ParamFilter{}, err
	}
	return f, nil
}

// Validate checks that f can match a stored param: a key that is not
// empty, and a key and value of valid UTF-8 without the NUL character
// (run params can hold neither). The error wraps ErrBadParams and names
// the filter.
func (f ParamFilter) Validate() error {
	kv := f.Key + "=" + f.Value
	switch {
	case f.Key == "":
		return fmt.Errorf("%w: %q: the key is empty (want key=value)", ErrBadParams, kv)
	case !utf8.ValidString(kv):
		return fmt.Errorf("%w: %q: not valid UTF-8", ErrBadParams, kv)
	case strings.ContainsRune(kv, 0):
		return fmt.Errorf("%w: %q: contains a NUL character, which no run param holds", ErrBadParams, kv)
	}
	return nil
}

// Candidates returns the JSON values a run's param Key may equal for f to
// match: Value as a JSON string first, then Value itself when it is a JSON
// value that a run's params could hold (ValidateParams accepts it as a
// param); one candidate otherwise.
func (f ParamFilter) Candidates() []json.RawMessage {
	s, _ := json.Marshal(f.Value) // a string always marshals
	out := []json.RawMessage{s}
	v := strings.TrimSpace(f.Value)
	if v == "" || !json.Valid([]byte(v)) {
		return out
	}
	if ValidateParams([]byte(`{"v":`+v+`}`)) != nil {
		return out
	}
	return append(out, json.RawMessage(v))
}
