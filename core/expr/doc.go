// Package expr compiles and evaluates the expressions of a workflow file
// (`when:`, `for_each:`, `sleep: {until:}`, `wait_for: {key:}` and
// `workflow: {params:}`) with CEL, github.com/google/cel-go: FlowForge has
// no evaluator of its own.
//
// An expression sees two variables:
//
//   - params: the run's params, dynamic (any field may be named; a field
//     the run lacks is an evaluation error);
//   - upstream: a map from task name to that task's result, holding only
//     the tasks the expression's task depends on, directly or
//     transitively (Compile is given their names). It is written
//     upstream.NAME, or upstream['NAME'] for a name that is not an
//     identifier (a name with '-' or '.'); a name that is not among them
//     is refused at compile with its position, and so is an index that is
//     not a name written out. A SKIPPED (or DEAD) task's result is null, a
//     for_each task's the list of its elements' results in element order.
//
// Compile checks an expression at `workflow apply` (syntax, names, types
// against what is known: params and upstream values are dynamic, so
// `upstream.merge.total > 1000` passes and is checked when it runs);
// Program.Bool, List, Time, Key and Object evaluate it when the scheduler
// decides the task. Their errors carry the expression, so that a task failed by
// one says which.
package expr
