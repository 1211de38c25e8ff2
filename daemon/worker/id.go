package worker

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// IDMaxBytes bounds a worker id: the id is the broker consumer tag as it
// is (no prefix is added), and a consumer tag is an AMQP short string of at
// most 255 bytes. A longer one cannot be encoded, and the consume call
// fails on every reconnect attempt, for ever.
const IDMaxBytes = 255

// CheckID returns an error when id cannot name a worker: longer than
// IDMaxBytes bytes (bytes, not characters: "é" is two), not valid UTF-8,
// or holding a control character (C0, DEL, C1), white space or a
// bidirectional formatting character (U+202E and its kin), which would
// garble the logs, leases and dashboards it appears in. The empty id is
// accepted (a default is chosen). Errors name the problem and the limit.
func CheckID(id string) error {
	if len(id) > IDMaxBytes {
		return fmt.Errorf("id is %d bytes; at most %d (it is the AMQP consumer tag, a short string)", len(id), IDMaxBytes)
	}
	if !utf8.ValidString(id) {
		return fmt.Errorf("id %q is not valid UTF-8", id)
	}
	for i, r := range id {
		if unicode.IsControl(r) || unicode.IsSpace(r) || unicode.Is(unicode.Cf, r) {
			return fmt.Errorf("id %q has %U at byte %d; use letters, digits and punctuation without spaces, control or invisible format characters", id, r, i)
		}
	}
	return nil
}
