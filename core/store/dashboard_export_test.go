package store

// Dashboard queries, exported for dashboard_test.go's EXPLAINs.
const (
	QRunStateCountsBounded = qRunStateCountsBounded
	QOldestPending         = qOldestPending
)
