package store

// FinalRunStatesSQL is finalRunStatesSQL, for finalstates_test.go's check
// against core.FinalRunStates.
const FinalRunStatesSQL = finalRunStatesSQL
