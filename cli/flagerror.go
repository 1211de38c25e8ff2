package cli

import (
	"regexp"
	"strconv"
	"strings"
)

// stdFlagName matches a long flag's name as Go's flag package writes it
// in its parse errors, with one dash ("flag provided but not defined:
// -limt", "invalid value "abc" for flag -limit: ...", "flag needs an
// argument: -reason"). ffctl's long flags are written with two dashes
// everywhere else (help, docs, its own errors), so a one-dash name sends
// the reader looking for a flag spelt differently. One-letter names (-o,
// -n) are written with one dash and are left alone.
var stdFlagName = regexp.MustCompile(`(defined: |for flag |value "[^"]*" for |argument: )-([A-Za-z0-9][A-Za-z0-9_-]+)`)

// envParseError matches urfave/cli's refusal of a flag's environment
// variable: `could not parse "0x10" as int value from environment variable
// "FLOWFORGE_CONCURRENCY" for flag concurrency: strconv.ParseInt: parsing
// "0x10": invalid syntax`, which names Go's parser and not what the value
// should be.
var envParseError = regexp.MustCompile(`could not parse "(.*)" as (\w+) value from environment variable "(\w+)" for flag ([\w-]+): .*`)

// envWants says what a flag's value must be, by the type urfave/cli names.
var envWants = map[string]string{
	"int": "a whole number in plain decimal", "int64": "a whole number in plain decimal", "uint": "a whole number in plain decimal",
	"float64": "a number", "bool": "true or false", "duration": "a duration such as 30s or 5m",
}

// flagErrorText is err's text with every long flag name the flag package
// wrote with one dash written with two (stdFlagName), and a bad value of
// a flag's environment variable said as what it must be (envParseError).
func flagErrorText(err error) string {
	text := stdFlagName.ReplaceAllString(err.Error(), "${1}--${2}")
	if m := envParseError.FindStringSubmatch(text); m != nil {
		want, ok := envWants[m[2]]
		if !ok {
			want = "a " + m[2]
		}
		dashes := "--"
		if len(m[4]) == 1 {
			dashes = "-"
		}
		text = strings.Replace(text, m[0], m[3]+"="+strconv.Quote(m[1])+" (for "+dashes+m[4]+"): want "+want, 1)
	}
	return text
}
