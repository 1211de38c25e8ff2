package cli

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
)

// maxAgeDays bounds the days of an age: a time.Duration holds about
// 106,751 days.
const maxAgeDays = 106000

// durationSyntax is the syntax of time.ParseDuration's unsigned input, to
// tell an overflow from malformed text (the function says "invalid
// duration" for both).
var durationSyntax = regexp.MustCompile(`^(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`)

// parseAge parses an age filter such as --older-than: a Go duration
// ("90m", "1h30m") that may begin with whole or fractional days ("3d",
// "1d12h", "1.5d"); a day is 24 hours. It is the one parser of every flag
// that is an age filter. Errors: malformed text, an age longer than
// maxAgeDays, or one that is not positive.
func parseAge(s string) (time.Duration, error) {
	d, err := parseAgeOrZero(s)
	if err == nil && d == 0 {
		return 0, fmt.Errorf("%q: must be positive", s)
	}
	return d, err
}

// parseAgeOrZero is parseAge that also takes a zero age in any spelling
// ("0", "0d", "0s", "0h0m"), for the flags where 0 means the default.
func parseAgeOrZero(s string) (time.Duration, error) {
	text := strings.TrimSpace(s)
	malformed := fmt.Errorf("%q: want a duration such as 3d, 1d12h, 90m or 1h30m", s)
	tooLong := fmt.Errorf("%q: too long: an age is at most %d days", s, maxAgeDays)
	switch text {
	case "0":
		return 0, nil
	case "":
		return 0, malformed
	}
	var d time.Duration
	rest := text
	if i := strings.IndexByte(rest, 'd'); i >= 0 {
		days, err := strconv.ParseFloat(rest[:i], 64)
		if err != nil || days < 0 || rest[:i] == "" || strings.ContainsAny(rest[:i], "eE+-xXpP_") {
			return 0, malformed
		}
		if days > maxAgeDays {
			return 0, tooLong
		}
		d = time.Duration(days * float64(24*time.Hour))
		rest = rest[i+1:]
	}
	if rest != "" {
		if strings.HasPrefix(rest, "+") || strings.HasPrefix(rest, "-") {
			return 0, malformed
		}
		r, err := time.ParseDuration(rest)
		switch {
		case err != nil && durationSyntax.MatchString(rest):
			return 0, tooLong // well formed: time.Duration overflowed
		case err != nil:
			return 0, malformed
		}
		if r > time.Duration(maxAgeDays)*24*time.Hour-d {
			return 0, tooLong
		}
		d += r
	}
	return d, nil
}

// ageFlag returns the age-filter flag name (a string flag parsed by
// parseAge).
func ageFlag(name, usage string) *cli.StringFlag {
	return &cli.StringFlag{Name: name, Usage: usage + " (such as 3d, 1d12h, 90m)"}
}
