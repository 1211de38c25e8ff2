package handlers

import (
	"encoding/json"
	"fmt"
	"strings"
)

// builtinNames lists the built-in handlers (shell among them, although a
// worker registers it only with --allow-shell).
func builtinNames() []string { return []string{"fail", "http", "noop", "shell", "sleep"} }

// paramsOf returns a new params struct of the built-in handler name (the
// one the handler decodes into at run time), or false.
func paramsOf(name string) (any, bool) {
	switch name {
	case "noop":
		return &NoopParams{}, true
	case "sleep":
		return &SleepParams{}, true
	case "fail":
		return &FailParams{}, true
	case "shell":
		return &ShellParams{}, true
	case "http":
		return &HTTPParams{}, true
	}
	return nil, false
}

// BuiltinNames returns the built-in handlers' names, sorted (shell among
// them, although a worker registers it only with --allow-shell).
func BuiltinNames() []string { return builtinNames() }

// IsBuiltin reports whether name is a built-in handler.
func IsBuiltin(name string) bool {
	_, ok := paramsOf(name)
	return ok
}

// ValidateParams checks a task's params for the built-in handler name as
// the handler itself will decode them: unknown fields and wrongly typed
// values are errors, as are a shell task without params.command (or with a
// params.stdin it does not know, or an argument or params.env variable too
// large for exec) and an
// http task whose params.url is not http(s) ("params: json: unknown field \"durration\""). It
// returns nil for a name that is not a built-in (no params schema is known
// for it) and for empty or null params of handlers whose fields are all
// optional.
func ValidateParams(name string, raw json.RawMessage) error {
	p, ok := paramsOf(name)
	if !ok {
		return nil
	}
	if err := decodeParams(raw, p); err != nil {
		return fmt.Errorf("handler %s: %w", name, err)
	}
	switch p := p.(type) {
	case *NoopParams:
		if err := p.check(); err != nil {
			return fmt.Errorf("handler %s: %w", name, err)
		}
	case *ShellParams:
		if len(p.Command) == 0 {
			return fmt.Errorf("handler shell: params.command is required (the argv to run)")
		}
		if p.Command[0] == "" {
			return fmt.Errorf("handler shell: params.command[0] is empty: it names the program to run")
		}
		switch p.Stdin {
		case "", shellStdinParams, shellStdinUpstream:
		default:
			return fmt.Errorf("handler shell: params.stdin %q: want %q or %q (or leave it out for no input)", p.Stdin, shellStdinParams, shellStdinUpstream)
		}
		for _, a := range p.Command {
			if len(a) > ShellExecStringMaxBytes {
				return fmt.Errorf("handler shell: an argument of params.command is %d bytes: too large for exec (%s)", len(a), execSizeAdvice)
			}
		}
		for k, v := range p.Env {
			if n := len(k) + 1 + len(v); n > ShellExecStringMaxBytes {
				return fmt.Errorf("handler shell: params.env %s is %d bytes: too large for exec (%s)", k, n, execSizeAdvice)
			}
		}
	case *HTTPParams:
		if !strings.HasPrefix(p.URL, "http://") && !strings.HasPrefix(p.URL, "https://") {
			return fmt.Errorf("handler http: params.url %q is not an http(s) URL", p.URL)
		}
	}
	return nil
}
