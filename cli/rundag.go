package cli

import (
	"fmt"
	"slices"
	"strings"

	"github.com/flowforge/flowforge/core"
)

// dagLine is one line of run show's task table: a node, how deep it is
// indented, and, for a join (a node with more than one upstream), the
// names of its upstreams.
type dagLine[T core.DAGNode] struct {
	Node   T
	Indent int
	Joins  []string // sorted; nil unless the node has two or more upstreams
}

// joinNamesShown bounds how many upstreams a join's line names; the rest
// are counted ("+3 more").
const joinNamesShown = 5

// dagLayout lays nodes out for reading as a tree, each node on exactly one
// line: depth first from the roots (by name), a node's children (by name)
// right under it, indented one step deeper, so that a line's parent is the
// nearest line above it indented one step less. A join cannot sit under
// all of its upstreams: it comes right after the last of them to be laid
// out (so every line comes after all of its upstreams: a topological
// order), one step deeper than that one, and names all of them (Joins). A
// dependency naming no node is ignored (a node with no other upstream is a
// root), as core.DAGOrder does; nodes a cycle leaves unreached, which a
// valid workflow never has, come last at indent 0.
func dagLayout[T core.DAGNode](nodes []T) []dagLine[T] {
	byName := make(map[string]int, len(nodes))
	for i, n := range nodes {
		byName[n.DAGName()] = i
	}
	ups := make([][]string, len(nodes))
	children := make(map[string][]string, len(nodes))
	var roots []string
	for i, n := range nodes {
		for _, d := range n.DAGDeps() {
			if _, ok := byName[d]; ok && !slices.Contains(ups[i], d) {
				ups[i] = append(ups[i], d)
				children[d] = append(children[d], n.DAGName())
			}
		}
		if len(ups[i]) == 0 {
			roots = append(roots, n.DAGName())
		}
	}
	placed := make(map[string]bool, len(nodes))
	out := make([]dagLine[T], 0, len(nodes))
	var place func(name string, indent int)
	place = func(name string, indent int) {
		i := byName[name]
		placed[name] = true
		line := dagLine[T]{Node: nodes[i], Indent: indent}
		if len(ups[i]) > 1 {
			line.Joins = slices.Sorted(slices.Values(ups[i]))
		}
		out = append(out, line)
		kids := slices.Sorted(slices.Values(children[name]))
		for _, k := range slices.Compact(kids) {
			if !placed[k] && !slices.ContainsFunc(ups[byName[k]], func(u string) bool { return !placed[u] }) {
				place(k, indent+1)
			}
		}
	}
	slices.Sort(roots)
	for _, r := range roots {
		if !placed[r] {
			place(r, 0)
		}
	}
	for _, n := range nodes {
		if !placed[n.DAGName()] {
			out = append(out, dagLine[T]{Node: n})
			placed[n.DAGName()] = true
		}
	}
	return out
}

// taskCell is the TASK cell of a line: the name indented two spaces per
// step, and for a join "← " and its upstreams, at most joinNamesShown of
// them named.
func taskCell[T core.DAGNode](l dagLine[T]) string {
	cell := strings.Repeat("  ", l.Indent) + l.Node.DAGName()
	if len(l.Joins) == 0 {
		return cell
	}
	names := l.Joins
	more := ""
	if len(names) > joinNamesShown {
		more = fmt.Sprintf(" +%d more", len(names)-joinNamesShown)
		names = names[:joinNamesShown]
	}
	return cell + " ← " + strings.Join(names, ", ") + more
}
