package store

// SweepPart is a sweep candidate kind and its query, for sweep_plan_test.go;
// Cursor says it takes SweepCandidates' cursor and probe bound ($2..$4)
// beside its limit ($1).
type SweepPart struct {
	Kind, Query string
	Cursor      bool
}

// SweepParts returns each part of qSweepCandidates (sweepParts), and the
// whole as "all", for sweep_plan_test.go's EXPLAIN of every one.
func SweepParts() []SweepPart {
	var out []SweepPart
	for _, p := range sweepParts() {
		out = append(out, SweepPart{p.kind, p.query, p.query == qSweepNothingActive})
	}
	return append(out, SweepPart{"all", qSweepCandidates, true}, SweepPart{"probe end", qSweepProbeEnd, true})
}
