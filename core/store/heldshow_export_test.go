package store

// ShowQueries are the statements GetRun and GetTask send, by name, with
// their parameter count, for heldshow_plan_test.go's EXPLAINs.
func ShowQueries() map[string]string {
	return map[string]string{"run": qRun, "run tasks": qRunTasks, "children": qChildrenOf, "task": qTask, "child run": qChildRun}
}
