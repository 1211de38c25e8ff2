package cli

import (
	"strings"
	"testing"
)

// node is a DAG node for the layout tests: "d:b,c" is d depending on b and
// c.
type node string

func (n node) DAGName() string { name, _, _ := strings.Cut(string(n), ":"); return name }

func (n node) DAGDeps() []string {
	_, deps, ok := strings.Cut(string(n), ":")
	if !ok {
		return nil
	}
	return strings.Split(deps, ",")
}

// TestDAGLayoutDrawsEachTaskOnceAndNamesAJoinsUpstreams: run show drew a
// DAG by depth, so a join sat under whichever task happened to be above it
// and a child could sit under another task's subtree (issue 23). Now each
// task is one line, a child right under its parent, a join after the last
// of its upstreams naming all of them; a chain and a tree read as before.
func TestDAGLayoutDrawsEachTaskOnceAndNamesAJoinsUpstreams(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		nodes []node
		want  []string // the TASK cells, in order
	}{
		{"chain unchanged", []node{"c:b", "a", "b:a"}, []string{"a", "  b", "    c"}},
		{"diamond", []node{"d:b,c", "c:a", "b:a", "a"}, []string{"a", "  b", "  c", "    d ← b, c"}},
		{"three-way join", []node{"a", "b", "c", "j:c,a,b", "k:j"}, []string{"a", "b", "c", "  j ← a, b, c", "    k"}},
		{"a child stays under its own parent", []node{"a", "b:a", "c:a", "e:b"}, []string{"a", "  b", "    e", "  c"}},
		{"a join of a root and a deep task", []node{"a", "b:a", "c:b", "d:a,c"}, []string{"a", "  b", "    c", "      d ← a, c"}},
		{"two roots", []node{"y", "x", "z:x,y"}, []string{"x", "y", "  z ← x, y"}},
		{"an unknown dependency counts as none", []node{"a:gone", "b:a,gone"}, []string{"a", "  b"}},
		{"a wide join names five", []node{"a", "b", "c", "d", "e", "f", "g", "j:a,b,c,d,e,f,g"},
			[]string{"a", "b", "c", "d", "e", "f", "g", "  j ← a, b, c, d, e +2 more"}},
		{"a cycle is still listed", []node{"a", "x:y", "y:x"}, []string{"a", "x", "y"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, l := range dagLayout(tc.nodes) {
				got = append(got, taskCell(l))
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("laid out:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}
