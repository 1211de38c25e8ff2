package core

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/template"
)

// Task params templates. Every string value in a task's params, at any
// depth (in arrays and objects; never an object's keys), is a Go
// text/template, rendered at trigger by the engine and over the data an
// idempotency_key has (KeyData: .Params, the run's params with numbers
// verbatim; .Workflow; .Task; a missing param is an error). A string
// without "{{" renders as itself; a rendered value is always a string
// (`"{{ .Params.n }}"` with n = 5 is "5"); numbers, booleans and null are
// never touched. A literal "{{" is written {{"{{"}}. A template that does
// not parse is refused at apply; one that cannot render from a run's params
// is refused at that run's trigger.

// parseTemplate parses s, the template called name, with the options every
// FlowForge template has (missingkey=error).
func parseTemplate(name, s string) (*template.Template, error) {
	return template.New(name).Option("missingkey=error").Parse(s)
}

// hasParamTemplate reports whether raw, a task's params as JSON, may hold a
// template: a "{{" written as such, or a "{" written as a \u escape (then
// rendering decodes it and finds out).
func hasParamTemplate(raw json.RawMessage) bool {
	return bytes.Contains(raw, []byte("{{")) || bytes.Contains(raw, []byte(`\u007b`)) || bytes.Contains(raw, []byte(`\u007B`))
}

// decodeTaskParams decodes a task's params (numbers kept verbatim); empty
// or null is nil.
func decodeTaskParams(raw json.RawMessage) (any, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// checkParamTemplates checks, at apply, that every template in the params
// of t parses and names no field KeyData lacks (a missing param is fine
// here: it is checked at trigger). The error names the value's path:
// `params.command[1]: template: ...`.
func checkParamTemplates(t TaskDef) error {
	if !hasParamTemplate(t.Params) {
		return nil
	}
	v, err := decodeTaskParams(t.Params)
	if err != nil {
		return fmt.Errorf("params: %v", err)
	}
	_, err = mapStrings(v, "params", func(path, s string) (string, error) {
		tmpl, err := parseTemplate(path, s)
		if err != nil {
			return "", fmt.Errorf("%s: %v (a literal {{ is written {{\"{{\"}})", path, err)
		}
		err = tmpl.Option("missingkey=zero").Execute(io.Discard, KeyData{Params: map[string]any{}, Workflow: "w", Task: t.Name})
		if err != nil && strings.Contains(err.Error(), "KeyData") {
			return "", fmt.Errorf("%s: %v (the template sees .Params.<name>, .Workflow and .Task)", path, err)
		}
		if err := t.checkItemUse(path, tmpl); err != nil {
			return "", err
		}
		return s, nil
	})
	return err
}

// renderTaskParams renders every template in the params of t over data and
// returns the params as the task run stores them, or nil when they hold no
// template (the run stores them as they are). The result passes
// ValidateParams. Errors wrap ErrBadParams and name the task and the
// value's path: `task "greet": params.command[1]: template: ...: map has no
// entry for key "date"`.
func renderTaskParams(t TaskDef, data KeyData) (json.RawMessage, error) {
	if !hasParamTemplate(t.Params) {
		return nil, nil
	}
	v, err := decodeTaskParams(t.Params)
	if err != nil {
		return nil, fmt.Errorf("%w: task %q: params: %v", ErrBadParams, t.Name, err)
	}
	changed := false
	out, err := mapStrings(v, "params", func(path, s string) (string, error) {
		tmpl, err := parseTemplate(path, s)
		if err != nil {
			// Only a version applied before params were templates gets
			// here: apply refuses such a template.
			return "", fmt.Errorf("%w (a literal {{ is written {{\"{{\"}}: apply the workflow again with it)", err)
		}
		var buf strings.Builder
		if err := tmpl.Execute(&buf, data); err != nil {
			return "", err
		}
		changed = changed || buf.String() != s
		return buf.String(), nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: task %q: %v", ErrBadParams, t.Name, err)
	}
	if !changed {
		return nil, nil
	}
	js, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("%w: task %q: params: %v", ErrBadParams, t.Name, err)
	}
	if err := ValidateParams(js); err != nil {
		return nil, fmt.Errorf("task %q: rendered params: %w", t.Name, err)
	}
	return js, nil
}

// mapStrings returns v (decoded JSON) with f applied to each string value
// holding "{{" at any depth, path naming where v sits ("params",
// "params.env.DATE", "params.command[1]"). Other values, and object keys,
// are kept. The first error of f is returned, prefixed with the path when
// f did not name it.
func mapStrings(v any, path string, f func(path, s string) (string, error)) (any, error) {
	switch t := v.(type) {
	case string:
		if !strings.Contains(t, "{{") {
			return t, nil
		}
		s, err := f(path, t)
		if err != nil && !strings.Contains(err.Error(), path) {
			err = fmt.Errorf("%s: %w", path, err)
		}
		return s, err
	case map[string]any:
		out := make(map[string]any, len(t))
		// Sorted, so that the first error is the same on every trigger.
		for _, k := range slices.Sorted(maps.Keys(t)) {
			m, err := mapStrings(t[k], path+"."+k, f)
			if err != nil {
				return nil, err
			}
			out[k] = m
		}
		return out, nil
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			m, err := mapStrings(e, path+"["+strconv.Itoa(i)+"]", f)
			if err != nil {
				return nil, err
			}
			out[i] = m
		}
		return out, nil
	}
	return v, nil
}
