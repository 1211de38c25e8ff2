package harness

import (
	"bytes"
	"encoding/binary"
	"strings"
)

// DropCommitReply arms the proxy to lose exactly one reply: the one that
// would tell a client its statement committed. On the first connection
// whose client executes a statement containing pattern (the PostgreSQL wire
// protocol's simple Query, or Execute of a statement prepared with Parse),
// every server→client byte is discarded from that statement on when it
// runs outside a transaction block (it commits on its own), or from the
// transaction's COMMIT on when it runs inside one. The server commits; the
// client never hears of it. The connection is then out of step: it is reset
// by ResetConns or by the next SetMode. It disarms after firing once; Fired
// reports whether it has. Only unencrypted connections (sslmode=disable)
// can be matched.
func (p *Proxy) DropCommitReply(pattern string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropAfter = pattern
	p.fired = false
}

// Fired reports whether the reply DropCommitReply armed for was lost.
func (p *Proxy) Fired() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fired
}

// armed returns the pattern to match, "" when disarmed.
func (p *Proxy) armed() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fired {
		return ""
	}
	return p.dropAfter
}

// fire disarms the trigger; it reports false when another connection fired
// first.
func (p *Proxy) fire() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fired || p.dropAfter == "" {
		return false
	}
	p.fired = true
	return true
}

// pgStream follows the client→server half of one PostgreSQL connection
// far enough to know which statement each Execute or Query runs.
type pgStream struct {
	buf      []byte
	started  bool              // the startup message has passed
	stmts    map[string]string // prepared statement name -> query
	portals  map[string]string // portal name -> query
	inTx     bool              // inside a transaction block (BEGIN ... COMMIT)
	lostSync bool              // a message too large to follow: matching stopped
	pending  bool              // the pattern ran in this block: lose the COMMIT's reply
}

// pgMaxMessage bounds a buffered message; past it the stream is no longer
// followed (DropCommitReply then never fires on that connection).
const pgMaxMessage = 8 << 20

// feed consumes client bytes and reports whether they hold the message
// whose reply tells of the commit of a statement containing pattern ("":
// match nothing, only follow the stream).
func (s *pgStream) feed(b []byte, pattern string) bool {
	if s.lostSync {
		return false
	}
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
				s.buf, s.lostSync = nil, true
				return hit
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
			s.buf, s.lostSync = nil, true
			return hit
		}
		if len(s.buf) < 1+n {
			return hit
		}
		typ, body := s.buf[0], s.buf[5:1+n]
		s.buf = s.buf[1+n:]
		if q, ok := s.executes(typ, body); ok && s.commits(q, pattern) {
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

// commits follows transaction blocks through the executed query q and
// reports whether q's reply is the one that tells of the commit of a
// statement containing pattern.
func (s *pgStream) commits(q, pattern string) bool {
	word := strings.ToLower(strings.TrimSpace(q))
	if i := strings.IndexAny(word, " ;"); i >= 0 {
		word = word[:i]
	}
	switch word {
	case "begin", "start":
		s.inTx, s.pending = true, false
		return false
	case "commit", "end":
		hit := s.inTx && s.pending && pattern != ""
		s.inTx, s.pending = false, false
		return hit
	case "rollback", "abort":
		s.inTx, s.pending = false, false
		return false
	}
	if pattern == "" || !strings.Contains(q, pattern) {
		return false
	}
	if s.inTx {
		s.pending = true
		return false
	}
	return true
}
