package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"testing"

	"github.com/flowforge/flowforge/core"
)

// FuzzDecodeRequest drives the one decoder of the API's JSON bodies
// (decodeStrict) with arbitrary bytes, as a trigger's, a reason's and an
// event's body. It must never panic; it either refuses with a 400
// invalid_input saying why, or accepts a body whose fields, encoded again
// and decoded, come back the same; accepted params and payloads are JSON
// that core.ValidateParams judges without panicking, and an accepted
// lookback is text core.ParseDuration judges without panicking. The seed corpus is testdata/fuzz/
// FuzzDecodeRequest (run by every `go test`); `make test` fuzzes it a few
// seconds more.
func FuzzDecodeRequest(f *testing.F) {
	for _, seed := range []string{``, `{}`, `{"params": {"day": "2026-11-30"}, "version": 2}`, `{"reason": "disk freed"}`,
		`{"parms": {}}`, `{"params": [1]}`, `{"params": "\u0000"}`, `{"version": 1e400}`, `{} {}`, `[`, `null`,
		`{"key": "42", "payload": {"by": "ana"}, "id": "approval-42", "lookback": "7d"}`, `{"lookback": 7}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var tr triggerRequest
		checkDecoded(t, data, &tr)
		if err := decodeStrict(data, &tr); err == nil && tr.Params != nil {
			if !json.Valid(tr.Params) {
				t.Fatalf("accepted params that are not JSON: %q", tr.Params)
			}
			_ = core.ValidateParams(tr.Params)
		}
		var rr reasonRequest
		checkDecoded(t, data, &rr)
		var er sendEventRequest
		checkDecoded(t, data, &er)
		if err := decodeStrict(data, &er); err == nil {
			if er.Payload != nil {
				if !json.Valid(er.Payload) {
					t.Fatalf("accepted a payload that is not JSON: %q", er.Payload)
				}
				_ = core.ValidateParams(er.Payload)
			}
			_, _ = core.ParseDuration(er.Lookback)
		}
	})
}

// checkDecoded decodes data into v (a pointer to a request struct) and
// checks decodeStrict's promise: a 400 invalid_input with a message, or
// a value that survives encoding and decoding again.
func checkDecoded[T any](t *testing.T, data []byte, v *T) {
	t.Helper()
	err := decodeStrict(data, v)
	if err != nil {
		var ae *apiError
		if !errors.As(err, &ae) || ae.status != http.StatusBadRequest || ae.code != CodeInvalidInput || ae.message == "" {
			t.Fatalf("decode %q: %v, want a 400 invalid_input", data, err)
		}
		return
	}
	again, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("accepted %q, which does not encode again: %v", data, err)
	}
	var back T
	if err := decodeStrict(again, &back); err != nil {
		t.Fatalf("accepted %q, then refused its own encoding %s: %v", data, again, err)
	}
	if !reflect.DeepEqual(normal(t, back), normal(t, *v)) {
		t.Fatalf("%q decoded as %+v, its encoding %s as %+v", data, *v, again, back)
	}
}

// normal is v encoded as JSON text and decoded into a generic value, so
// that two raw messages of equal JSON but other spacing compare equal.
func normal(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
