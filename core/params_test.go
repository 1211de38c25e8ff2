package core_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/flowforge/flowforge/core"
)

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

func TestValidateParams(t *testing.T) {
	big := `{"x":"` + strings.Repeat("a", core.MaxParamsBytes) + `"}`
	for _, tc := range []struct {
		name string
		raw  string
		want string // "" means valid; else a substring of the error
	}{
		{"empty object", `{}`, ""},
		{"nested object", `{"a":{"b":[1,2,{"c":"d"}],"e":null,"f":true,"g":1.5e300}}`, ""},
		{"escaped backslash u0000 is text, not NUL", `{"a":"\\u0000"}`, ""},
		{"surrounding whitespace", " \n{\"a\":1}\n ", ""},
		{"invalid JSON", `{"a":`, "not JSON"},
		{"not JSON at all", `date=2024-01-01`, "not JSON"},
		{"empty", ``, "not JSON"},
		{"array", `[1,2]`, "an array"},
		{"string", `"x"`, "a string"},
		{"number", `42`, "a number"},
		{"boolean", `true`, "a boolean"},
		{"null", `null`, "null"},
		{"NUL at the top", `{"a":"x\u0000y"}`, "$.a"},
		{"NUL in a nested value", `{"a":{"b":["ok","x\u0000"]}}`, "$.a.b[1]"},
		{"NUL in a key", `{"a":{"k\u0000":1}}`, "key"},
		{"over MaxParamsBytes", big, "exceeds"},
		{"trailing object", `{"a":1} {"b":2}`, "trailing"},
		{"trailing garbage", `{"a":1} x`, "trailing"},
		{"duplicate top-level key", `{"a":1,"b":2,"a":3}`, "key $.a appears twice"},
		{"duplicate key spelled with an escape", `{"a":1,"\u0061":2}`, "key $.a appears twice"},
		{"duplicate nested key", `{"a":{"b":1,"b":2}}`, "key $.a.b appears twice"},
		{"duplicate key inside an array", `{"a":[{"x":1},{"y":1,"y":2}]}`, "key $.a[1].y appears twice"},
		{"one key in sibling objects is fine", `{"a":{"x":1},"b":{"x":2},"c":[{"x":1},{"x":2}]}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := core.ValidateParams([]byte(tc.raw))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("ValidateParams = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, core.ErrBadParams) {
				t.Fatalf("ValidateParams = %v, want an error wrapping ErrBadParams", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

// TestValidateParamsRejectsTrailingCloseBracket: json.Decoder.More reports
// false when the next byte is '}' or ']', so these trailing bytes slip past
// the "trailing data" check.
func TestValidateParamsRejectsTrailingCloseBracket(t *testing.T) {
	for _, raw := range []string{`{"a":1}}`, `{"a":1}]`} {
		if err := core.ValidateParams([]byte(raw)); !errors.Is(err, core.ErrBadParams) {
			t.Errorf("ValidateParams(%s) = %v, want ErrBadParams", raw, err)
		}
	}
}

// TestValidateParamsRejectsWhatJSONBRefuses: ValidateParams promises a
// document jsonb stores unchanged, but Go's decoder silently replaces
// invalid UTF-8 and lone surrogate escapes with U+FFFD, which PostgreSQL
// then refuses (see store's TestTriggerRefusesParamsJSONBCannotStore).
func TestValidateParamsRejectsWhatJSONBRefuses(t *testing.T) {
	for _, raw := range []string{"{\"a\":\"\xff\"}", `{"a":"\ud800"}`, `{"a":"\udc00x"}`} {
		if err := core.ValidateParams([]byte(raw)); !errors.Is(err, core.ErrBadParams) {
			t.Errorf("ValidateParams(%q) = %v, want ErrBadParams", raw, err)
		}
	}
}

func TestSanitizeText(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		max      int
		want     string
	}{
		{"plain", "hello", 0, "hello"},
		{"NUL replaced", "a\x00b", 0, "a\uFFFDb"},
		{"invalid UTF-8 replaced", "a\xff\xfeb", 0, "a\uFFFDb"},
		{"under the bound", "héllo", 100, "héllo"},
		{"cut on a rune boundary", "aé", 2, "a… [2 bytes truncated]"},
		{"cut at an exact boundary", "abcdef", 3, "abc… [3 bytes truncated]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := core.SanitizeText(tc.in, tc.max); got != tc.want {
				t.Fatalf("SanitizeText(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
			}
		})
	}
}

func TestSanitizeTextOutputIsValidAndBounded(t *testing.T) {
	const marker = len("… [9999999 bytes truncated]")
	inputs := []string{
		strings.Repeat("é", 500),
		strings.Repeat("日本語", 300),
		strings.Repeat("🙂\x00\xff", 200),
		strings.Repeat("a", 1000) + "\xc3",
		string([]byte{0xf0, 0x9f, 0x99}) + strings.Repeat("x", 50),
	}
	for _, in := range inputs {
		for max := 1; max <= 64; max++ {
			got := core.SanitizeText(in, max)
			if !utf8.ValidString(got) {
				t.Fatalf("SanitizeText(%q, %d) = %q: invalid UTF-8", in, max, got)
			}
			if strings.ContainsRune(got, 0) {
				t.Fatalf("SanitizeText(%q, %d) kept a NUL", in, max)
			}
			if len(got) > max+marker {
				t.Fatalf("SanitizeText(.., %d) is %d bytes, more than max plus the marker", max, len(got))
			}
			if clean := core.SanitizeText(in, 0); len(clean) <= max {
				if got != clean {
					t.Fatalf("SanitizeText(.., %d) = %q, want the whole %q", max, got, clean)
				}
			} else if !strings.Contains(got, "bytes truncated]") {
				t.Fatalf("SanitizeText(.., %d) = %q: no truncation marker", max, got)
			}
		}
	}
}

// TestSanitizeResultNotedSaysHowItRewrote: every rewrite of a result is
// reported, with its kinds (the metric's labels) and the history's note;
// a result stored as returned reports none.
func TestSanitizeResultNotedSaysHowItRewrote(t *testing.T) {
	t.Parallel()
	big := `{"data": "` + strings.Repeat("x", core.MaxResultBytes) + `"}`
	for _, c := range []struct {
		name, in string
		kinds    []string
		note     string
	}{
		{"kept", `{"a":1}`, nil, ""},
		{"empty", "", nil, ""},
		{"not JSON", "plain text", []string{core.ResultNotJSON}, "result rewritten: it was not a JSON document, so it is stored as a JSON string"},
		{"NUL", `{"k":"v\u0000"}`, []string{core.ResultReplaced}, "result rewritten: NUL characters or invalid UTF-8 in it were replaced with U+FFFD"},
		{"NUL in a key", `{"k\u0000":1}`, []string{core.ResultReplaced}, "result rewritten: NUL characters or invalid UTF-8 in it were replaced with U+FFFD"},
		{"invalid UTF-8", "{\"k\":\"\xff\"}", []string{core.ResultReplaced}, "result rewritten: NUL characters or invalid UTF-8 in it were replaced with U+FFFD"},
		{"text with invalid UTF-8", "a\xffb", []string{core.ResultNotJSON, core.ResultReplaced}, "result rewritten: it was not a JSON document, so it is stored as a JSON string; NUL characters or invalid UTF-8 in it were replaced with U+FFFD"},
		{"too big", big, []string{core.ResultTruncated}, fmt.Sprintf("result rewritten: it was %d bytes, over the %d-byte bound, so it is stored truncated", len(`{"data":"`)+core.MaxResultBytes+len(`"}`), core.MaxResultBytes)},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, rw := core.SanitizeResultNoted(json.RawMessage(c.in))
			if !slices.Equal(rw.Kinds, c.kinds) || rw.Note != c.note {
				t.Fatalf("SanitizeResultNoted(%.40q) = %.60s, %+v; want kinds %v, note %q", c.in, out, rw, c.kinds, c.note)
			}
			if !bytes.Equal(out, core.SanitizeResult(json.RawMessage(c.in))) {
				t.Fatal("SanitizeResultNoted and SanitizeResult store different documents")
			}
		})
	}
}

func TestSanitizeResultAlwaysYieldsBoundedValidJSON(t *testing.T) {
	big := `{"data": "` + strings.Repeat("x", core.MaxResultBytes) + `"}`
	cases := []struct {
		name string
		in   string
		want string // exact output, or "" to check only the invariants
	}{
		{"empty is null", "", "null"},
		{"valid JSON is kept", `{"a":[1,2.5,"s"]}`, `{"a":[1,2.5,"s"]}`},
		{"big numbers stay exact", `{"n":12345678901234567890}`, `{"n":12345678901234567890}`},
		{"text that is not JSON becomes a string", "plain text", `"plain text"`},
		{"NUL escapes in values and keys are replaced", `{"k\u0000":"v\u0000"}`, "{\"k\uFFFD\":\"v\uFFFD\"}"},
		{"invalid UTF-8 is replaced", "{\"k\":\"\xff\xfe\"}", "{\"k\":\"\uFFFD\uFFFD\"}"},
		{"trailing data makes it text", `{"a":1} {"b":2}`, `"{\"a\":1} {\"b\":2}"`},
		{"oversized becomes a truncation marker", big, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := core.SanitizeResult(json.RawMessage(c.in))
			if !json.Valid(out) || !utf8.Valid(out) || bytes.Contains(out, []byte(`\u0000`)) || len(out) > core.MaxResultBytes {
				t.Fatalf("output not bounded valid JSON without NUL: %d bytes: %.200s", len(out), out)
			}
			if c.want != "" && string(out) != c.want {
				t.Fatalf("SanitizeResult(%.80q) = %.200s, want %s", c.in, out, c.want)
			}
			if c.want == "" {
				var m map[string]any
				if err := json.Unmarshal(out, &m); err != nil || m["truncated"] != true {
					t.Fatalf("oversized result: %.200s, want a truncation marker", out)
				}
			}
		})
	}
}

// TestSanitizeLogLineIsBoundedAndIdempotent: a log line comes out valid,
// at most MaxTaskLogLineBytes with its note, the note counting every byte
// cut from the line as written (on a rune boundary), and a second pass
// changes nothing.
func TestSanitizeLogLineIsBoundedAndIdempotent(t *testing.T) {
	for _, in := range []string{
		"short",
		strings.Repeat("a", core.MaxTaskLogLineBytes),
		strings.Repeat("a", core.MaxTaskLogLineBytes+1),
		strings.Repeat("é", 20000),
		strings.Repeat("🙂\x00", 9000),
		strings.Repeat("x", 1<<20),
	} {
		clean := core.SanitizeText(in, 0)
		got := core.SanitizeLogLine(in)
		if !utf8.ValidString(got) || len(got) > core.MaxTaskLogLineBytes {
			t.Fatalf("SanitizeLogLine(%d bytes) = %d bytes (valid %v), want valid and at most %d", len(in), len(got), utf8.ValidString(got), core.MaxTaskLogLineBytes)
		}
		if again := core.SanitizeLogLine(got); again != got {
			t.Fatalf("a second pass over %d bytes changed the line (%d bytes to %d)", len(in), len(got), len(again))
		}
		if len(clean) <= core.MaxTaskLogLineBytes {
			if got != clean {
				t.Fatalf("a line of %d bytes was cut", len(clean))
			}
			continue
		}
		i := strings.LastIndex(got, "… [")
		kept := got[:i]
		if !strings.HasPrefix(clean, kept) || got[i:] != fmt.Sprintf("… [%d bytes truncated]", len(clean)-len(kept)) {
			t.Fatalf("line of %d bytes: note %q after %d bytes kept, want the %d bytes cut", len(clean), got[i:], len(kept), len(clean)-len(kept))
		}
	}
}
