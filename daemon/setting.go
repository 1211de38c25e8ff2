package daemon

import "fmt"

// SettingError is a Config setting out of its bounds. Each daemon package
// checks its settings in one place (its Config's Validate), and ffctl
// reports the error as it is (exit 2), so the message names both the
// Config field and ffctl's flag for it:
//
//	worker: --lease 100ms (Config.Lease): must be at least 300ms, or 0 for the default (30s)
//	worker: FLOWFORGE_LEASE=100ms (--lease, Config.Lease): must be at least 300ms, … (set from the environment)
type SettingError struct {
	Component string // the package whose Config it is: "worker", "supervisor"
	Field     string // the Config field: "Lease", "Session.LockTimeout"
	Flag      string // ffctl's flag for the field without its dashes ("lease"); "" when it has none
	// Env, when set, is the environment variable the value came from
	// ("FLOWFORGE_LEASE"): the message names it first, since that is
	// what the operator wrote. ffctl sets it (cli: settingSource).
	Env   string
	Value any    // the value given
	Want  string // the bound: "at least 300ms, or 0 for the default (30s)"
}

func (e *SettingError) Error() string {
	if e.Flag == "" {
		return fmt.Sprintf("%s: Config.%s %v: must be %s", e.Component, e.Field, e.Value, e.Want)
	}
	if e.Env != "" {
		return fmt.Sprintf("%s: %s=%v (--%s, Config.%s): must be %s", e.Component, e.Env, e.Value, e.Flag, e.Field, e.Want)
	}
	return fmt.Sprintf("%s: --%s %v (Config.%s): must be %s", e.Component, e.Flag, e.Value, e.Field, e.Want)
}

// CheckNotNegative returns a *SettingError when v is negative: the bound of
// a count or duration whose zero means its default, def (named in the
// message). It returns nil otherwise.
func CheckNotNegative[T ~int | ~int64](component, field, flag string, v, def T) error {
	if v >= 0 {
		return nil
	}
	return &SettingError{Component: component, Field: field, Flag: flag, Value: v, Want: fmt.Sprintf("positive, or 0 for the default (%v)", def)}
}

// CheckRange returns a *SettingError when v is neither 0 (the default def)
// nor within [lo, hi]: for settings where a tiny value busy-loops a
// dependency or a huge one stalls what the setting drives.
func CheckRange[T ~int | ~int64](component, field, flag string, v, def, lo, hi T) error {
	if v == 0 || (v >= lo && v <= hi) {
		return nil
	}
	return &SettingError{Component: component, Field: field, Flag: flag, Value: v, Want: fmt.Sprintf("between %v and %v, or 0 for the default (%v)", lo, hi, def)}
}
