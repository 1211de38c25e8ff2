package expr

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestCompileRefusesWhatCannotRunWithItsPosition(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, src string
		want      Want
		upstream  []string
		err       string
	}{
		{"syntax", "params.a >", Bool, nil, "1:11: Syntax error"},
		{"undeclared", "x == 1", Bool, nil, "1:1: undeclared reference to 'x'"},
		{"not upstream", "upstream.merge.total > 1", Bool, []string{"split"}, `1:9: upstream "merge" is not a task this one depends on (it may read: split)`},
		{"not upstream by index", "upstream['big-review'] == null", Bool, []string{"split"}, `upstream "big-review" is not a task`},
		{"dynamic index", "upstream[params.k] == null", Bool, []string{"split"}, "upstream is indexed by a task name written out"},
		{"int when", "1 + 2", Bool, nil, "1:1: gives int, want bool"},
		{"string for_each", "'abc'", List, nil, "gives string, want list"},
		{"bool for_each", "params.a == 1", List, nil, "gives bool, want list"},
		{"empty", "  ", Bool, nil, "the expression is empty"},
		{"bad operand", "'a' - 1", Bool, nil, "found no matching overload for '_-_'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Compile(tc.src, tc.want, tc.upstream)
			if !errors.Is(err, ErrCompile) || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("Compile(%q) = %v, want an ErrCompile containing %q", tc.src, err, tc.err)
			}
		})
	}
}

func TestExpressionsEvaluateOverParamsAndUpstream(t *testing.T) {
	t.Parallel()
	in := Input{
		Params: json.RawMessage(`{"region": "eu", "items": [1, 2.5, "x"], "n": 2}`),
		Upstream: map[string]json.RawMessage{
			"merge":      json.RawMessage(`{"total": 1200}`),
			"split":      json.RawMessage(`{"chunks": ["a", "b", {"k": 1}]}`),
			"big-review": json.RawMessage(`null`),
		},
	}
	up := []string{"merge", "split", "big-review"}
	for _, tc := range []struct {
		src  string
		want bool
	}{
		{"upstream.merge.total > 1000 && params.region == 'eu'", true},
		{"upstream.merge.total > 5000", false},
		{"size(upstream.split.chunks) == 3", true},
		{"upstream['big-review'] == null", true},
		{"size(params.items) == params.n + 1", true},
		{"true", true},
	} {
		p, err := Compile(tc.src, Bool, up)
		if err != nil {
			t.Fatalf("Compile(%q): %v", tc.src, err)
		}
		got, err := p.Bool(t.Context(), in)
		if err != nil || got != tc.want {
			t.Errorf("Bool(%q) = %v, %v; want %v", tc.src, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ src, want string }{
		{"upstream.split.chunks", `["a","b",{"k":1}]`},
		{"params.items", `[1,2.5,"x"]`},
		{"[]", `[]`},
		{"params.items.map(x, string(x))", `["1","2.5","x"]`},
	} {
		p, err := Compile(tc.src, List, up)
		if err != nil {
			t.Fatalf("Compile(%q): %v", tc.src, err)
		}
		items, err := p.List(t.Context(), in)
		if err != nil {
			t.Fatalf("List(%q): %v", tc.src, err)
		}
		js, _ := json.Marshal(items)
		if string(js) != tc.want {
			t.Errorf("List(%q) = %s, want %s", tc.src, js, tc.want)
		}
	}
}

func TestAnEvaluationErrorNamesTheExpression(t *testing.T) {
	t.Parallel()
	in := Input{Params: json.RawMessage(`{"a": "x"}`), Upstream: map[string]json.RawMessage{"split": json.RawMessage(`{"chunks": 3}`)}}
	for _, tc := range []struct {
		src  string
		want Want
		err  string
	}{
		{"params.missing == 1", Bool, "no such key: missing"},
		{"params.a", Bool, "gives string, want bool"},
		{"upstream.split.chunks", List, "gives int, want list"},
		{"upstream.split.chunks > 'a'", Bool, "no such overload"},
	} {
		p, err := Compile(tc.src, tc.want, []string{"split"})
		if err != nil {
			t.Fatalf("Compile(%q): %v", tc.src, err)
		}
		if tc.want == Bool {
			_, err = p.Bool(t.Context(), in)
		} else {
			_, err = p.List(t.Context(), in)
		}
		if !errors.Is(err, ErrEval) || !strings.Contains(err.Error(), tc.src) || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("eval %q: %v, want an ErrEval naming the expression and %q", tc.src, err, tc.err)
		}
	}
}
