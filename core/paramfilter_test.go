package core

import (
	"errors"
	"strings"
	"testing"
)

// TestParseParamFilterSplitsAtTheFirstEqualsAndRefusesWhatNoParamHolds.
func TestParseParamFilterSplitsAtTheFirstEqualsAndRefusesWhatNoParamHolds(t *testing.T) {
	t.Parallel()
	good := map[string]ParamFilter{
		"n=3":     {"n", "3"},
		"k=":      {"k", ""},
		"x=a=b":   {"x", "a=b"},
		"a.b= 1 ": {"a.b", " 1 "},
	}
	for kv, want := range good {
		if got, err := ParseParamFilter(kv); err != nil || got != want {
			t.Errorf("%q: %+v, %v; want %+v", kv, got, err, want)
		}
	}
	bad := map[string]string{
		"k":          `"k": want key=value`,
		"=v":         `"=v": the key is empty`,
		"k=\xff":     "not valid UTF-8",
		"k=a\x00b":   "contains a NUL character",
		"\x00=v":     "contains a NUL character",
		"":           `"": want key=value`,
		"no-equals ": "want key=value",
	}
	for kv, want := range bad {
		_, err := ParseParamFilter(kv)
		if !errors.Is(err, ErrBadParams) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want ErrBadParams saying %q", kv, err, want)
		}
	}
}

// TestParamFilterCandidatesAreTheStringAndTheJSONItSpells.
func TestParamFilterCandidatesAreTheStringAndTheJSONItSpells(t *testing.T) {
	t.Parallel()
	cases := map[string][]string{
		"3":           {`"3"`, `3`},
		"x":           {`"x"`},
		"":            {`""`},
		`"x"`:         {`"\"x\""`, `"x"`},
		"true":        {`"true"`, `true`},
		"null":        {`"null"`, `null`},
		`{"a": 1}`:    {`"{\"a\": 1}"`, `{"a": 1}`},
		" 3 ":         {`" 3 "`, `3`},
		`"\u0000"`:    {`"\"\\u0000\""`}, // JSON no param can hold: the string only
		"<&>":         {`"\u003c\u0026\u003e"`},
		"[1, 2] junk": {`"[1, 2] junk"`},
	}
	for v, want := range cases {
		got := ParamFilter{Key: "k", Value: v}.Candidates()
		var s []string
		for _, c := range got {
			s = append(s, string(c))
		}
		if strings.Join(s, " | ") != strings.Join(want, " | ") {
			t.Errorf("%q: %v, want %v", v, s, want)
		}
	}
}
