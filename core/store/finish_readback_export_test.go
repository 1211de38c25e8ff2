package store

// QFinishRecorded is the finish read-back's query, exported for
// finish_readback_test.go's EXPLAIN.
const QFinishRecorded = qFinishRecorded
