package core

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
)

// decodeErrorText is the text of err, encoding/json's refusal of a
// definition, and where (failingPart's "task \"a\": concurrency: ") it
// applies: a field of the wrong type is named as the file names it, and
// where then stops at its task (the message names the field).
func decodeErrorText(where string, err error) (string, string) {
	if m, ok := flowLimitTypeError(err); ok {
		return strings.TrimSuffix(strings.TrimSuffix(where, "concurrency: "), "rate_limit: "), m
	}
	if field, m, ok := fieldTypeError(err); ok {
		parent, _, _ := strings.Cut(field, ".")
		return strings.TrimSuffix(where, parent+": "), m
	}
	return where, strings.TrimPrefix(err.Error(), "json: ")
}

// JSONTypeError is fieldTypeError for any JSON object a file gives (a
// built-in handler's params): err's text when it is encoding/json's
// refusal of a value of the wrong type, in the file's words ("command
// must be a list, got a string", not "cannot unmarshal string into Go
// struct field ShellParams.command of type []string"); ok is false for
// any other error.
func JSONTypeError(err error) (msg string, ok bool) {
	_, msg, ok = fieldTypeError(err)
	return msg, ok
}

// fieldTypeError rewrites encoding/json's error for a workflow field of
// the wrong type ("cannot unmarshal number into Go struct field
// ConcurrencySpec.tasks.concurrency.key of type string") in the file's
// words: the field as the file names it ("concurrency.key", "priority"),
// and msg "concurrency.key must be a string, got a number". ok is false for
// any other error. A number where a string is wanted is told how to write
// it as one (YAML reads `key: 5` as a number).
func fieldTypeError(err error) (field, msg string, ok bool) {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || te.Field == "" || te.Type == nil {
		return "", "", false
	}
	field = te.Field
	for _, p := range []string{"tasks.", "defaults."} {
		field = strings.TrimPrefix(field, p)
	}
	msg = field + " must be " + jsonWant(te.Type) + ", got " + jsonGot(te.Value)
	if te.Type.Kind() == reflect.String && strings.HasPrefix(te.Value, "number") {
		msg += " (quote the number to use it as text)"
	}
	return field, msg, true
}

// jsonWant names what a Go type of the definition wants, in the file's
// words.
func jsonWant(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping"
	}
	return "a " + t.String()
}

// jsonGot names what the file held, from encoding/json's description of
// it ("number", "number 2.5", "string", "array", "object", "bool").
func jsonGot(v string) string {
	if n, ok := strings.CutPrefix(v, "number "); ok {
		return n
	}
	switch v {
	case "array":
		return "a list"
	case "object":
		return "a mapping"
	case "bool":
		return "a boolean"
	case "number", "string":
		return "a " + v
	}
	return v
}
