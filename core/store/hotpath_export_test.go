package store

// HotPathStatement is a statement of the hot path whose cached plan must
// look its rows up by key, and its number of parameters.
type HotPathStatement struct {
	Name   string
	Query  string
	Params int
}

// HotPathStatements are the statements sent with KeyPlan (inOneTrip):
// claims, the renewal, finishes and the trigger.
func HotPathStatements() []HotPathStatement {
	return []HotPathStatement{
		{"claim one", qClaimOne, 5},
		{"claim batch", qClaim, 5},
		{"renew", qRenew, 4},
		{"finish one", qFinishDoneOne, 16},
		{"finish batch", qFinishDone, 16},
		{"trigger", qTrigger, 40},
	}
}

// KeyPlanSettings are the settings KeyPlan sends, as name-value pairs.
func KeyPlanSettings() (names, values []string) {
	return tripSettings{KeyPlan: true}.namesAndValues()
}
