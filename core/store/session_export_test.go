package store

import "database/sql"

// DB exposes the pool, for session_test.go's checks of what every session
// of it carries (timeouts a store method would never hit on purpose).
func (s *Store) DB() *sql.DB { return s.db.DB }
