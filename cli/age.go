package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
)

// parseAge parses an age filter such as --older-than: a Go duration
// ("90m", "1h30m") that may begin with whole or fractional days ("3d",
// "1d12h", "1.5d"); a day is 24 hours. It is the one parser of every flag
// that is an age filter. Errors: malformed text, or an age that is not
// positive.
func parseAge(s string) (time.Duration, error) {
	text := strings.TrimSpace(s)
	var d time.Duration
	rest := text
	if i := strings.IndexByte(rest, 'd'); i >= 0 {
		days, err := strconv.ParseFloat(rest[:i], 64)
		if err != nil || days < 0 || rest[:i] == "" || strings.ContainsAny(rest[:i], "eE+-xXpP_") || days > 106000 {
			return 0, fmt.Errorf("%q: want a duration such as 3d, 1d12h, 90m or 1h30m", s)
		}
		d = time.Duration(days * float64(24*time.Hour))
		rest = rest[i+1:]
	}
	if rest != "" {
		r, err := time.ParseDuration(rest)
		if err != nil || strings.HasPrefix(rest, "+") || strings.HasPrefix(rest, "-") {
			return 0, fmt.Errorf("%q: want a duration such as 3d, 1d12h, 90m or 1h30m", s)
		}
		d += r
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q: must be positive", s)
	}
	return d, nil
}

// ageFlag returns the age-filter flag name (a string flag parsed by
// parseAge).
func ageFlag(name, usage string) *cli.StringFlag {
	return &cli.StringFlag{Name: name, Usage: usage + " (such as 3d, 1d12h, 90m)"}
}
