package store

// ListRunsQuery is qListRuns, for runlist_test.go's EXPLAIN of its plans.
func ListRunsQuery() string { return qListRuns }
