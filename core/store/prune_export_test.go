package store

import (
	"context"

	"github.com/jmoiron/sqlx"
)

// InPruneTx exposes inPruneTx, for prune_test.go's check of the settings
// a retention batch's transaction carries.
func (s *Store) InPruneTx(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
	return s.inPruneTx(ctx, fn)
}
