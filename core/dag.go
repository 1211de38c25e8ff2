package core

import (
	"fmt"
	"sort"
	"strings"
)

// DAGError reports a dependency graph that cannot run. Exactly one of its
// fields explains why.
type DAGError struct {
	// Task is the task whose dependency is wrong (unknown or self).
	Task string
	// Unknown is the dependency that names no task of the workflow.
	Unknown string
	// Self is true when Task depends on itself.
	Self bool
	// Cycle lists the tasks of a cycle, first one repeated at the end.
	Cycle []string
}

func (e *DAGError) Error() string {
	switch {
	case e.Self:
		return fmt.Sprintf("task %q depends on itself", e.Task)
	case e.Unknown != "":
		return fmt.Sprintf("task %q depends on unknown task %q", e.Task, e.Unknown)
	default:
		return "dependency cycle: " + strings.Join(e.Cycle, " -> ")
	}
}

// ValidateDAG checks that deps (task name -> names it depends on) names only
// known tasks, has no self-dependency and no cycle. It returns a *DAGError
// naming the first offender in task-name order, so the message is stable.
func ValidateDAG(deps map[string][]string) error {
	names := make([]string, 0, len(deps))
	for n := range deps {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for _, d := range deps[n] {
			if d == n {
				return &DAGError{Task: n, Self: true}
			}
			if _, ok := deps[d]; !ok {
				return &DAGError{Task: n, Unknown: d}
			}
		}
	}
	const (
		white = iota
		grey
		black
	)
	color := make(map[string]int, len(deps))
	var stack []string
	var visit func(n string) []string
	visit = func(n string) []string {
		color[n] = grey
		stack = append(stack, n)
		for _, d := range deps[n] {
			switch color[d] {
			case grey:
				i := len(stack) - 1
				for stack[i] != d {
					i--
				}
				cycle := append([]string(nil), stack[i:]...)
				return append(cycle, d)
			case white:
				if c := visit(d); c != nil {
					return c
				}
			}
		}
		stack = stack[:len(stack)-1]
		color[n] = black
		return nil
	}
	for _, n := range names {
		if color[n] == white {
			if c := visit(n); c != nil {
				return &DAGError{Cycle: c}
			}
		}
	}
	return nil
}

// Depths returns each task's depth in a valid DAG: 0 for a task with no
// dependencies, else one more than its deepest dependency. Callers validate
// first; on a cycle the result is unspecified but finite.
func Depths(deps map[string][]string) map[string]int {
	depth := make(map[string]int, len(deps))
	visiting := make(map[string]bool, len(deps))
	var walk func(n string) int
	walk = func(n string) int {
		if d, ok := depth[n]; ok {
			return d
		}
		if visiting[n] {
			return 0
		}
		visiting[n] = true
		best := 0
		for _, p := range deps[n] {
			if d := walk(p) + 1; d > best {
				best = d
			}
		}
		depth[n] = best
		return best
	}
	for n := range deps {
		walk(n)
	}
	return depth
}

// DAGNode is an item DAGOrder lays out: a task of a run, say. DAGName is
// its name, unique among the items laid out together; DAGDeps names the
// items it depends on.
type DAGNode interface {
	DAGName() string
	DAGDeps() []string
}

// Layered is an item with its depth in the DAG (see Depths): 0 for a root.
type Layered[T DAGNode] struct {
	Node  T
	Depth int
}

// DAGOrder lays nodes out by depth in their DAG (roots first), then by
// name: the order in which operators read a run (`ffctl run show`, the
// dashboard's Run screen). It returns a new slice of len(nodes); nodes is
// not modified. A dependency naming no node counts as a root.
func DAGOrder[T DAGNode](nodes []T) []Layered[T] {
	deps := make(map[string][]string, len(nodes))
	for _, n := range nodes {
		deps[n.DAGName()] = n.DAGDeps()
	}
	depth := Depths(deps)
	out := make([]Layered[T], len(nodes))
	for i, n := range nodes {
		out[i] = Layered[T]{Node: n, Depth: depth[n.DAGName()]}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Depth != out[j].Depth {
			return out[i].Depth < out[j].Depth
		}
		return out[i].Node.DAGName() < out[j].Node.DAGName()
	})
	return out
}

// Ancestors returns the tasks name depends on in deps, directly or
// transitively, sorted. deps must be a DAG (ValidateDAG).
func Ancestors(deps map[string][]string, name string) []string {
	seen := map[string]bool{}
	var walk func(n string)
	walk = func(n string) {
		for _, d := range deps[n] {
			if !seen[d] {
				seen[d] = true
				walk(d)
			}
		}
	}
	walk(name)
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
