package store

// finalRunStatesSQL is core.FinalRunStates as an SQL list, for the
// conditions that a run is settled (settledOlder, settledNow): a literal,
// not a parameter, because the conditions are spliced into statements of
// different parameters and a literal keeps their plans' state tests
// constant. TestTheSQLFinalRunStatesAreCores checks it against the list.
const finalRunStatesSQL = `('SUCCEEDED', 'FAILED', 'CANCELLED')`
