package core

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxParamsBytes bounds a run's params document (1 MiB): larger payloads are
// refused at trigger, before anything is written.
const MaxParamsBytes = 1 << 20

// ErrBadParams is matched (errors.Is) by every params validation failure.
var ErrBadParams = errors.New("invalid params")

// ValidateParams checks that raw is a JSON object that PostgreSQL's jsonb
// will store unchanged: at most MaxParamsBytes, valid JSON, an object at the
// top level, free of the NUL character (a literal \u0000 escape anywhere,
// which jsonb refuses), and with no key twice in one object (jsonb keeps
// the last of them; the others would be dropped without a word). The error
// wraps ErrBadParams and says what is wrong.
func ValidateParams(raw []byte) error {
	if len(raw) > MaxParamsBytes {
		return fmt.Errorf("%w: %d bytes exceeds the limit of %d bytes", ErrBadParams, len(raw), MaxParamsBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("%w: not JSON: %v", ErrBadParams, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: trailing data after the JSON object", ErrBadParams)
	}
	if !utf8.Valid(raw) {
		return fmt.Errorf("%w: not valid UTF-8", ErrBadParams)
	}
	if err := checkSurrogates(raw); err != nil {
		return fmt.Errorf("%w: %v", ErrBadParams, err)
	}
	if _, ok := v.(map[string]any); !ok {
		return fmt.Errorf("%w: want a JSON object, got %s", ErrBadParams, jsonKind(v))
	}
	if path, ok := findNUL(v, "$"); ok {
		return fmt.Errorf("%w: %s contains a NUL character (\\u0000), which PostgreSQL cannot store", ErrBadParams, path)
	}
	if path, ok := findDuplicateKey(raw); ok {
		return fmt.Errorf("%w: key %s appears twice in one object (PostgreSQL would keep only the last)", ErrBadParams, path)
	}
	return nil
}

// findDuplicateKey reports the path ($.a.b) of the first key that repeats
// an earlier key of the same object in raw, keys compared as decoded (so
// "a" and "\u0061" are one key, as jsonb sees them). raw must be valid
// JSON.
func findDuplicateKey(raw []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	path, ok, _ := duplicateIn(dec, "$")
	return path, ok
}

// duplicateIn reads one value from dec and reports the first duplicate key
// within it; path names the value.
func duplicateIn(dec *json.Decoder, path string) (string, bool, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", false, err
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return "", false, err
			}
			k, _ := kt.(string)
			if seen[k] {
				return path + "." + k, true, nil
			}
			seen[k] = true
			if p, ok, err := duplicateIn(dec, path+"."+k); ok || err != nil {
				return p, ok, err
			}
		}
		_, err = dec.Token() // '}'
		return "", false, err
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if p, ok, err := duplicateIn(dec, fmt.Sprintf("%s[%d]", path, i)); ok || err != nil {
				return p, ok, err
			}
		}
		_, err = dec.Token() // ']'
		return "", false, err
	}
	return "", false, nil
}

// checkSurrogates refuses \uD800-\uDFFF escapes that are not a valid
// high-low pair: Go's decoder quietly replaces them, PostgreSQL's jsonb
// refuses them. raw must be syntactically valid JSON.
func checkSurrogates(raw []byte) error {
	inString := false
	pendingHigh := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if !inString {
			if c == '"' {
				inString = true
			}
			continue
		}
		switch c {
		case '"':
			if pendingHigh {
				return errors.New("an unpaired UTF-16 surrogate escape, which PostgreSQL cannot store")
			}
			inString = false
		case '\\':
			if i+1 < len(raw) && raw[i+1] == 'u' && i+5 < len(raw) {
				v, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 32)
				if err != nil {
					return errors.New("a malformed \\u escape")
				}
				switch {
				case v >= 0xD800 && v <= 0xDBFF:
					if pendingHigh {
						return errors.New("an unpaired UTF-16 surrogate escape, which PostgreSQL cannot store")
					}
					pendingHigh = true
				case v >= 0xDC00 && v <= 0xDFFF:
					if !pendingHigh {
						return errors.New("an unpaired UTF-16 surrogate escape, which PostgreSQL cannot store")
					}
					pendingHigh = false
				default:
					if pendingHigh {
						return errors.New("an unpaired UTF-16 surrogate escape, which PostgreSQL cannot store")
					}
				}
				i += 5
				continue
			}
			if pendingHigh {
				return errors.New("an unpaired UTF-16 surrogate escape, which PostgreSQL cannot store")
			}
			i++ // skip the escaped character
		default:
			if pendingHigh {
				return errors.New("an unpaired UTF-16 surrogate escape, which PostgreSQL cannot store")
			}
		}
	}
	return nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return "a value"
}

func findNUL(v any, path string) (string, bool) {
	switch t := v.(type) {
	case string:
		return path, strings.ContainsRune(t, 0)
	case []any:
		for i, e := range t {
			if p, ok := findNUL(e, fmt.Sprintf("%s[%d]", path, i)); ok {
				return p, true
			}
		}
	case map[string]any:
		for k, e := range t {
			if strings.ContainsRune(k, 0) {
				return path + " key", true
			}
			if p, ok := findNUL(e, path+"."+k); ok {
				return p, true
			}
		}
	}
	return "", false
}

// SanitizeText makes handler output safe for a PostgreSQL text or jsonb
// column and bounds it: NUL bytes become U+FFFD, invalid UTF-8 is replaced,
// and text longer than max bytes is cut (on a rune boundary) with a marker
// saying how much was dropped.
func SanitizeText(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	if max > 0 && len(s) > max {
		cut := max
		for cut > 0 && !isRuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + fmt.Sprintf(truncationMarker, len(s)-cut)
	}
	return s
}

// truncationMarker ends a text SanitizeText or SanitizeLogLine cut; %d is
// the bytes cut.
const truncationMarker = "… [%d bytes truncated]"

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// MaxResultBytes bounds a stored task result (256 KiB); MaxErrorBytes a
// stored error message (8 KiB).
const (
	MaxResultBytes = 256 << 10
	MaxErrorBytes  = 8 << 10
)

// SanitizeResult turns whatever a handler returned into a JSON document
// PostgreSQL's jsonb accepts, bounded by MaxResultBytes: empty becomes null;
// text that is not JSON becomes a JSON string; NUL characters and invalid
// UTF-8 inside strings are replaced with U+FFFD; a document still too large
// becomes {"truncated": true, "bytes": n, "head": "<first bytes>"}.
func SanitizeResult(raw json.RawMessage) json.RawMessage {
	out, _ := SanitizeResultNoted(raw)
	return out
}

// Result rewrites SanitizeResultNoted reports: the label values of the
// worker's flowforge_results_rewritten_total.
const (
	ResultNotJSON   = "not_json"  // not a JSON document: stored as a JSON string
	ResultReplaced  = "replaced"  // NUL or invalid UTF-8 in its strings: replaced with U+FFFD
	ResultTruncated = "truncated" // over MaxResultBytes: stored as a truncation marker
)

// ResultRewrite says how SanitizeResultNoted rewrote a result: Kinds are
// its Result* constants in the order applied, Note one sentence for the
// task's history ("" and nil when the result was stored as returned).
type ResultRewrite struct {
	Kinds []string
	Note  string
}

// SanitizeResultNoted is SanitizeResult, and says how the result was
// rewritten, so that the worker records it in the task's history and
// counts it (a rewrite is never silent; failure model mode 130).
func SanitizeResultNoted(raw json.RawMessage) (json.RawMessage, ResultRewrite) {
	var rw ResultRewrite
	var notes []string
	if len(bytes.TrimSpace(raw)) == 0 {
		return json.RawMessage("null"), rw
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		v = string(raw)
		rw.Kinds = append(rw.Kinds, ResultNotJSON)
		notes = append(notes, "it was not a JSON document, so it is stored as a JSON string")
	}
	// encoding/json decodes invalid UTF-8 as U+FFFD without a word: it is
	// noticed on the raw bytes.
	replaced := !utf8.Valid(raw)
	v = cleanStrings(v, &replaced)
	out, err := json.Marshal(v)
	if err != nil {
		out, _ = json.Marshal(SanitizeText(string(raw), MaxResultBytes))
		replaced = true
	}
	if replaced {
		rw.Kinds = append(rw.Kinds, ResultReplaced)
		notes = append(notes, "NUL characters or invalid UTF-8 in it were replaced with U+FFFD")
	}
	if len(out) > MaxResultBytes {
		head := SanitizeText(string(out), MaxResultBytes/2)
		rw.Kinds = append(rw.Kinds, ResultTruncated)
		notes = append(notes, fmt.Sprintf("it was %d bytes, over the %d-byte bound, so it is stored truncated", len(out), MaxResultBytes))
		out, _ = json.Marshal(map[string]any{"truncated": true, "bytes": len(out), "head": head})
	}
	if len(notes) > 0 {
		rw.Note = "result rewritten: " + strings.Join(notes, "; ")
	}
	return out, rw
}

// cleanStrings replaces NUL characters and invalid UTF-8 in v's strings
// and keys with U+FFFD (SanitizeText), setting *replaced when it changed
// one.
func cleanStrings(v any, replaced *bool) any {
	switch t := v.(type) {
	case string:
		c := SanitizeText(t, 0)
		*replaced = *replaced || c != t
		return c
	case []any:
		for i, e := range t {
			t[i] = cleanStrings(e, replaced)
		}
		return t
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, e := range t {
			ck := SanitizeText(k, 0)
			*replaced = *replaced || ck != k
			m[ck] = cleanStrings(e, replaced)
		}
		return m
	}
	return v
}
