package store_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core/store/storetest"
)

// BenchmarkUUIDArrayParameter measures a 500-run uuid[] parameter (a
// scheduler pass's size) sent as []uuid.UUID (each element's
// driver.Valuer: text, parsed back by the server) and as [][16]byte (the
// store's uuidArray: binary). Run with -bench UUIDArray; it asserts
// nothing.
func BenchmarkUUIDArrayParameter(b *testing.B) {
	_, db, _ := storetest.NewWithDB(b)
	ids := make([]uuid.UUID, 500)
	raw := make([][16]byte, len(ids))
	for i := range ids {
		ids[i] = uuid.New()
		raw[i] = ids[i]
	}
	const q = `SELECT count(*) FROM workflow_runs WHERE id = ANY ($1::uuid[])`
	for _, tc := range []struct {
		name string
		arg  any
	}{{"text []uuid.UUID", ids}, {"binary [][16]byte", raw}} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				var n int
				if err := db.QueryRow(q, tc.arg).Scan(&n); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
