package core

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Duration is a time.Duration written as a Go duration string ("30s",
// "1m30s") in workflow files and stored definitions, optionally led by a
// whole number of days ("7d", "1d12h"; a day is 24 hours).
type Duration time.Duration

// MarshalJSON writes the duration as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON accepts only a duration string (ParseDuration).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration string such as \"30s\" or \"5m\", got %s", b)
	}
	v, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// ParseDuration parses a Go duration string ("30s", "1m30s") optionally
// led by a whole number of days ("7d", "1d12h"; a day is 24 hours, not a
// calendar day). Errors: one naming s for anything else, or for a value
// past about 290 years (time.Duration's range).
func ParseDuration(s string) (time.Duration, error) {
	bad := fmt.Errorf("unparseable duration %q (use Go syntax such as \"30s\", \"5m\" or \"24h\", or days: \"7d\", \"1d12h\")", s)
	days, rest := int64(0), s
	if i := strings.IndexByte(s, 'd'); i > 0 {
		n, err := strconv.ParseInt(s[:i], 10, 64)
		if err != nil || n < 0 || n > math.MaxInt64/int64(24*time.Hour) {
			return 0, bad
		}
		days, rest = n, s[i+1:]
		if rest == "" {
			rest = "0s"
		}
	}
	v, err := time.ParseDuration(rest)
	if err != nil || (days > 0 && (v < 0 || strings.HasPrefix(rest, "+"))) {
		return 0, bad
	}
	total := time.Duration(days) * 24 * time.Hour
	if v > math.MaxInt64-total {
		return 0, bad
	}
	return total + v, nil
}
