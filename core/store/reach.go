package store

import "strings"

// IsUnreachable reports whether err, from a Store method, says that the
// database could not be reached rather than that it answered and refused:
// no SQLSTATE came back (a refused, broken or timed out connection, a
// closed pool, a context that ended), or the server said it takes no work
// now (class 08, connection exception; 57P01-57P03, an administrator's or a
// crash's shutdown, or a server still starting; 53300, too many
// connections). Any other SQLSTATE is an answer: a lock_timeout (55P03),
// a statement_timeout (57014), a constraint, a serialization failure. A
// daemon counts only the first kind as its loss of the database. An error
// of no SQLSTATE counts even when it is no network fault (a scan error): it
// cannot be told from one, and counting it costs only a lease of grace. nil
// is neither: false.
func IsUnreachable(err error) bool {
	if err == nil {
		return false
	}
	code := pgCode(err)
	switch {
	case code == "":
		return true
	case strings.HasPrefix(code, "08"):
		return true
	}
	switch code {
	case "57P01", "57P02", "57P03", "53300":
		return true
	}
	return false
}
