package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
)

// readBody reads r's body whole, at most max bytes. Errors (*apiError):
// 413 by the request's Content-Length before a byte is read, or once
// more than max bytes have come (a chunked body: http.MaxBytesReader,
// which also closes the connection); 400 for a body cut off.
func readBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, error) {
	tooLarge := &apiError{status: http.StatusRequestEntityTooLarge, code: CodeTooLarge,
		message: fmt.Sprintf("request body: larger than %d bytes", max)}
	if r.ContentLength > max {
		return nil, tooLarge
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, tooLarge
	case err != nil:
		return nil, badInput(fmt.Sprintf("request body: cannot be read: %v", err))
	}
	return data, nil
}

// decodeJSON reads r's body (readBody, at most max bytes) into v, a
// pointer to a request struct: an empty body leaves v as it is (every
// field's zero value); otherwise it must be one JSON object whose every
// field v has. Errors (*apiError): readBody's; 415 for a Content-Type
// other than JSON; 400 naming what is wrong: not JSON, not an object, an
// unknown field (named), a field of the wrong type (named), anything
// after the object.
func decodeJSON(w http.ResponseWriter, r *http.Request, max int64, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return &apiError{status: http.StatusUnsupportedMediaType, code: CodeUnsupportedMedia,
				message: fmt.Sprintf("request body: Content-Type %q: want application/json", ct)}
		}
	}
	data, err := readBody(w, r, max)
	if err != nil {
		return err
	}
	return decodeStrict(data, v)
}

// decodeCommand is decodeJSON for a route that takes its input in its
// body only: a query parameter is refused (400, named), as a route with a
// query refuses one it does not take, so that a caller's typo (?force=1)
// is never silently ignored.
func decodeCommand(w http.ResponseWriter, r *http.Request, max int64, v any) error {
	if _, err := query(r); err != nil {
		return err
	}
	return decodeJSON(w, r, max, v)
}

// decodeStrict decodes data, a request body, into v as decodeJSON
// describes (without the size and media type checks): the one decoder of
// every JSON body the API reads, which its fuzz test drives.
func decodeStrict(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badInput("request body: " + describeJSONError(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badInput("request body: more than one JSON value: want one object")
	}
	return nil
}

// describeJSONError says what encoding/json's err found wrong in a body.
func describeJSONError(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("not JSON: %v (at byte %d)", syn, syn.Offset)
	case errors.As(err, &typ) && typ.Field == "":
		return fmt.Sprintf("want a JSON object, got %s", typ.Value)
	case errors.As(err, &typ):
		return fmt.Sprintf("field %q: want %s, got JSON %s", typ.Field, jsonKind(typ.Type.Kind().String()), typ.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "not JSON: it ends before the object does"
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return "unknown field " + name
	}
	return err.Error()
}

// jsonKind names a Go kind as the JSON value it decodes from.
func jsonKind(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "int", "int64", "int32", "uint", "uint64":
		return "a whole number"
	case "bool":
		return "true or false"
	}
	return kind
}
