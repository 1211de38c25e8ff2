package store

import "github.com/google/uuid"

// uuidArray returns ids as a value pgx encodes as a binary uuid[] ([16]byte
// elements go through pgtype's UUID codec). A []uuid.UUID goes through
// each element's driver.Valuer instead, formatting every id as text and
// having the server parse it back: measured at almost half the
// scheduler's CPU on 500-run passes (issue 14). nil stays nil (SQL NULL,
// which ANY and unnest treat as empty).
func uuidArray(ids []uuid.UUID) [][16]byte {
	if ids == nil {
		return nil
	}
	out := make([][16]byte, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}
