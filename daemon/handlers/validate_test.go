package handlers

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestValidateParamsChecksBuiltinsAsTheyDecode: a built-in handler's
// params are checked at apply as the handler reads them at run time; a
// name that is not a built-in is not checked.
func TestValidateParamsChecksBuiltinsAsTheyDecode(t *testing.T) {
	for _, c := range []struct {
		handler, params, wantErr string
	}{
		{"noop", ``, ""},
		{"noop", `null`, ""},
		{"noop", `{"x": 1}`, `unknown field "x"`},
		{"noop", `{"log_lines": 10}`, ""},
		{"noop", `{"log_lines": 1001}`, "handler noop: params.log_lines 1001: want 0 to 1000"},
		{"noop", `{"log_lines": -1}`, "handler noop: params.log_lines -1: want 0 to 1000"},
		{"sleep", `{"duration": "1s"}`, ""},
		{"sleep", `{"durration": "1s"}`, `unknown field "durration"`},
		{"sleep", `{"duration": 5}`, "params:"},
		{"fail", `{"times": 2, "permanent": true, "message": "m"}`, ""},
		{"fail", `{"times": "two"}`, "handler fail: params: times must be a whole number, got a string"},
		{"shell", `{"command": "echo hi"}`, "handler shell: params: command must be a list, got a string"},
		{"shell", `{"command": ["true"], "env": {"A": "b"}, "dir": "/tmp"}`, ""},
		{"shell", `{"cmd": ["true"]}`, `unknown field "cmd"`},
		{"shell", `{}`, "params.command is required"},
		{"shell", `{"command": [""]}`, "params.command[0] is empty"},
		{"shell", `{"command": ["cat"], "stdin": "params"}`, ""},
		{"shell", `{"command": ["cat"], "stdin": "bogus"}`, `params.stdin "bogus"`},
		{"shell", `{"command": ["true"], "env": {"BIG": "` + strings.Repeat("x", 140000) + `"}}`, "params.env BIG is 140004 bytes: too large for exec"},
		{"shell", `{"command": ["echo", "` + strings.Repeat("x", 140000) + `"]}`, "too large for exec"},
		{"http", `{"url": "https://example.com", "method": "GET", "headers": {"A": "b"}, "body": {"k": 1}}`, ""},
		{"http", `{"url": "example.com"}`, "not an http(s) URL"},
		{"http", `{"url": "https://x", "header": {}}`, `unknown field "header"`},
		{"sendmail", `{"anything": true}`, ""},
	} {
		err := ValidateParams(c.handler, json.RawMessage(c.params))
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s %s: %v, want nil", c.handler, c.params, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s %s: %v, want an error containing %q", c.handler, c.params, err, c.wantErr)
		}
	}
	for _, n := range BuiltinNames() {
		if !IsBuiltin(n) {
			t.Errorf("%s is listed but not a built-in", n)
		}
	}
	if IsBuiltin("sendmail") {
		t.Error("sendmail is a built-in")
	}
}
