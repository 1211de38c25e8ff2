package store

// Id look-up queries, exported for idprefix_test.go's EXPLAINs.
const (
	QMatchRunIDs  = qMatchRunIDs
	QMatchTaskIDs = qMatchTaskIDs
)
