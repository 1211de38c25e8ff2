package cli

import "regexp"

// stdFlagName matches a long flag's name as Go's flag package writes it
// in its parse errors, with one dash ("flag provided but not defined:
// -limt", "invalid value "abc" for flag -limit: ...", "flag needs an
// argument: -reason"). ffctl's long flags are written with two dashes
// everywhere else (help, docs, its own errors), so a one-dash name sends
// the reader looking for a flag spelt differently. One-letter names (-o,
// -n) are written with one dash and are left alone.
var stdFlagName = regexp.MustCompile(`(defined: |for flag |value "[^"]*" for |argument: )-([A-Za-z0-9][A-Za-z0-9_-]+)`)

// flagErrorText is err's text with every long flag name the flag package
// wrote with one dash written with two (stdFlagName).
func flagErrorText(err error) string {
	return stdFlagName.ReplaceAllString(err.Error(), "${1}--${2}")
}
