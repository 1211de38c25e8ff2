package store

// SweepPart is a sweep candidate kind and its query, for sweep_plan_test.go.
type SweepPart struct{ Kind, Query string }

// SweepParts returns each part of qSweepCandidates (sweepParts), and the
// whole as "all", for sweep_plan_test.go's EXPLAIN of every one.
func SweepParts() []SweepPart {
	var out []SweepPart
	for _, p := range sweepParts() {
		out = append(out, SweepPart{p.kind, p.query})
	}
	return append(out, SweepPart{"all", qSweepCandidates})
}
