package core_test

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core"
)

func TestValidateDAG(t *testing.T) {
	for _, tc := range []struct {
		name string
		deps map[string][]string
		want *core.DAGError // nil: valid
		msg  string
	}{
		{"empty", map[string][]string{}, nil, ""},
		{"single", map[string][]string{"a": nil}, nil, ""},
		{"diamond", map[string][]string{"a": nil, "b": {"a"}, "c": {"a"}, "d": {"b", "c"}}, nil, ""},
		{"two roots and a join", map[string][]string{"x": nil, "y": {}, "z": {"x", "y"}}, nil, ""},
		{"three-cycle", map[string][]string{"a": {"b"}, "b": {"c"}, "c": {"a"}},
			&core.DAGError{Cycle: []string{"a", "b", "c", "a"}}, "dependency cycle: a -> b -> c -> a"},
		{"two-cycle behind a valid root", map[string][]string{"r": nil, "m": {"n", "r"}, "n": {"m"}},
			&core.DAGError{Cycle: []string{"m", "n", "m"}}, "dependency cycle: m -> n -> m"},
		{"cycle reached through a tail", map[string][]string{"a": {"b"}, "b": {"c"}, "c": {"d"}, "d": {"b"}},
			&core.DAGError{Cycle: []string{"b", "c", "d", "b"}}, "dependency cycle: b -> c -> d -> b"},
		{"self dependency", map[string][]string{"a": nil, "b": {"a", "b"}},
			&core.DAGError{Task: "b", Self: true}, `task "b" depends on itself`},
		{"unknown dependency", map[string][]string{"a": nil, "b": {"ghost"}},
			&core.DAGError{Task: "b", Unknown: "ghost"}, `task "b" depends on unknown task "ghost"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Map order is random: the answer must not depend on it.
			for range 20 {
				err := core.ValidateDAG(tc.deps)
				if tc.want == nil {
					if err != nil {
						t.Fatalf("ValidateDAG = %v, want nil", err)
					}
					continue
				}
				var de *core.DAGError
				if !errors.As(err, &de) {
					t.Fatalf("ValidateDAG = %v (%T), want *core.DAGError", err, err)
				}
				if !reflect.DeepEqual(de, tc.want) {
					t.Fatalf("ValidateDAG = %#v, want %#v", de, tc.want)
				}
				if err.Error() != tc.msg {
					t.Fatalf("message %q, want %q", err.Error(), tc.msg)
				}
			}
		})
	}
}

func TestDepths(t *testing.T) {
	deps := map[string][]string{"a": nil, "b": {"a"}, "c": {"a"}, "d": {"b", "c"}, "e": {"d", "a"}, "lone": nil}
	want := map[string]int{"a": 0, "b": 1, "c": 1, "d": 2, "e": 3, "lone": 0}
	if got := core.Depths(deps); !reflect.DeepEqual(got, want) {
		t.Fatalf("Depths = %v, want %v", got, want)
	}
	// On a cycle the result is unspecified but must come back.
	got := core.Depths(map[string][]string{"a": {"b"}, "b": {"a"}})
	if len(got) != 2 {
		t.Fatalf("Depths on a cycle = %v", got)
	}
}

func TestLongChainCycleIsNamedWhole(t *testing.T) {
	names := strings.Split("t00 t01 t02 t03 t04 t05 t06 t07 t08 t09", " ")
	deps := map[string][]string{}
	for i, n := range names {
		deps[n] = []string{names[(i+1)%len(names)]}
	}
	err := core.ValidateDAG(deps)
	want := "dependency cycle: " + strings.Join(append(names, names[0]), " -> ")
	if err == nil || err.Error() != want {
		t.Fatalf("ValidateDAG = %v, want %q", err, want)
	}
}

// node is a DAGNode for TestDAGOrder.
type node struct {
	name string
	deps []string
}

func (n node) DAGName() string   { return n.name }
func (n node) DAGDeps() []string { return n.deps }

func TestDAGOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		nodes []node
		want  []string // name:depth
	}{
		{"empty", nil, []string{}},
		{"creation order is not DAG order", []node{{"load", []string{"transform"}}, {"transform", []string{"extract"}}, {"extract", nil}},
			[]string{"extract:0", "transform:1", "load:2"}},
		{"diamond, siblings by name", []node{{"d", []string{"c", "b"}}, {"c", []string{"a"}}, {"b", []string{"a"}}, {"a", nil}, {"z", nil}},
			[]string{"a:0", "z:0", "b:1", "c:1", "d:2"}},
		{"depth is the longest path", []node{{"a", nil}, {"b", []string{"a"}}, {"c", []string{"b"}}, {"d", []string{"a", "c"}}},
			[]string{"a:0", "b:1", "c:2", "d:3"}},
		{"an unknown dependency counts as a root", []node{{"b", []string{"gone"}}, {"a", nil}},
			[]string{"a:0", "b:1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := slices.Clone(tc.nodes)
			got := []string{}
			for _, l := range core.DAGOrder(in) {
				got = append(got, fmt.Sprintf("%s:%d", l.Node.name, l.Depth))
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("DAGOrder = %v, want %v", got, tc.want)
			}
			if !reflect.DeepEqual(in, tc.nodes) {
				t.Fatalf("DAGOrder changed its input: %v", in)
			}
		})
	}
}
