package store

// QTaskGauges is qTaskGauges, for taskgauges_plan_test.go's EXPLAIN.
const QTaskGauges = qTaskGauges
