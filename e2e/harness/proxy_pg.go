package harness

import (
	"bytes"
	"encoding/binary"
	"strings"
)

// DropReplyAfter arms the proxy to lose exactly one reply: on the first
// connection whose client executes, one right after another, statements
// containing each of patterns (in order; the PostgreSQL wire protocol's
// simple Query, or Execute of a statement prepared with Parse), every
// server→client byte from that last statement on is discarded. The server
// runs (and commits) the statement; the client never hears of it. The
// connection is then out of step: it is reset by ResetConns or by the next
// SetMode. It disarms after firing once; Fired reports whether it has.
//
// Example: DropReplyAfter("WITH claimed AS", "commit") loses the reply to
// the COMMIT of a claim's transaction, DropReplyAfter("WITH fin AS") the
// reply to an autocommitted finish. Only unencrypted connections
// (sslmode=disable) can be matched.
func (p *Proxy) DropReplyAfter(patterns ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropAfter = append([]string(nil), patterns...)
	p.fired = false
}

// Fired reports whether the reply DropReplyAfter armed for has been lost.
func (p *Proxy) Fired() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fired
}

// armed returns the patterns to match, nil when disarmed.
func (p *Proxy) armed() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fired {
		return nil
	}
	return p.dropAfter
}

// fire disarms the trigger; it reports false when another connection fired
// first.
func (p *Proxy) fire() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fired || p.dropAfter == nil {
		return false
	}
	p.fired = true
	return true
}

// pgStream follows the client→server half of one PostgreSQL connection
// far enough to know which statement each Execute or Query runs.
type pgStream struct {
	buf     []byte
	started bool              // the startup message has passed
	stmts   map[string]string // prepared statement name -> query
	portals map[string]string // portal name -> query
	matched int               // how many patterns the latest statements matched
}

// pgMaxMessage bounds a buffered message; longer ones are skipped unparsed.
const pgMaxMessage = 1 << 20

// feed consumes client bytes and reports whether the statements executed
// so far completed patterns.
func (s *pgStream) feed(b []byte, patterns []string) bool {
	if s.stmts == nil {
		s.stmts, s.portals = map[string]string{}, map[string]string{}
	}
	s.buf = append(s.buf, b...)
	hit := false
	for {
		if !s.started {
			if len(s.buf) < 8 {
				return hit
			}
			n := int(binary.BigEndian.Uint32(s.buf))
			if n < 8 || n > pgMaxMessage {
				s.buf, s.started = nil, true
				continue
			}
			if len(s.buf) < n {
				return hit
			}
			code := binary.BigEndian.Uint32(s.buf[4:])
			s.buf = s.buf[n:]
			if code != 80877103 && code != 80877104 { // not SSLRequest / GSSENCRequest
				s.started = true
			}
			continue
		}
		if len(s.buf) < 5 {
			return hit
		}
		n := int(binary.BigEndian.Uint32(s.buf[1:]))
		if n < 4 || n > pgMaxMessage {
			s.buf = nil // lost track (a huge message); stop matching
			return hit
		}
		if len(s.buf) < 1+n {
			return hit
		}
		typ, body := s.buf[0], s.buf[5:1+n]
		s.buf = s.buf[1+n:]
		if q, ok := s.executes(typ, body); ok && s.match(q, patterns) {
			hit = true
		}
	}
}

// executes tracks Parse and Bind, and returns the query an Execute or a
// simple Query runs.
func (s *pgStream) executes(typ byte, body []byte) (string, bool) {
	fields := bytes.SplitN(body, []byte{0}, 3)
	field := func(i int) string {
		if i < len(fields) {
			return string(fields[i])
		}
		return ""
	}
	switch typ {
	case 'P':
		s.stmts[field(0)] = field(1)
	case 'B':
		s.portals[field(0)] = s.stmts[field(1)]
	case 'E':
		return s.portals[field(0)], true
	case 'Q':
		return field(0), true
	}
	return "", false
}

// match advances over patterns with the executed query q: each pattern
// must match the statement right after the previous one's.
func (s *pgStream) match(q string, patterns []string) bool {
	if len(patterns) == 0 {
		return false
	}
	if s.matched >= len(patterns) {
		s.matched = 0
	}
	if strings.Contains(q, patterns[s.matched]) {
		s.matched++
	} else {
		s.matched = 0
		if strings.Contains(q, patterns[0]) {
			s.matched = 1
		}
	}
	if s.matched == len(patterns) {
		s.matched = 0
		return true
	}
	return false
}
