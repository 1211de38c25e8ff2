package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// SendNotifying sends query (no arguments) as store.Trigger sends its
// statement, in one trip on c with a notification on channel after its
// commit, scanning its rows with scan.
func SendNotifying(ctx context.Context, c *pgx.Conn, query string, scan func(pgx.Rows) error, channel, payload string) error {
	return sendNotifying(ctx, c, tripSettings{KeyPlan: true}, query, nil, scan, notice{channel, payload})
}
