package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jmoiron/sqlx"
)

// NotifyChannel is the one LISTEN/NOTIFY channel FlowForge uses. The payload
// names what changed: TopicOutbox (new outbox rows: wake publishers) and/or
// TopicTasks (task states changed: wake schedulers), comma separated.
const NotifyChannel = "flowforge_events"

// Notification topics carried in NotifyChannel payloads.
const (
	TopicOutbox = "outbox"
	TopicTasks  = "tasks"
)

// notify queues one NOTIFY in tx (delivered at commit). A transaction
// notifies at most once: NOTIFY serialises commits cluster-wide.
func notify(ctx context.Context, tx *sqlx.Tx, topics ...string) error {
	if _, err := tx.ExecContext(ctx, `SELECT pg_notify($1, $2)`, NotifyChannel, strings.Join(topics, ",")); err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	return nil
}

// Listener is one dedicated connection LISTENing on NotifyChannel.
type Listener struct {
	conn *pgx.Conn
}

// Listen opens a dedicated connection to url and LISTENs on NotifyChannel.
// The caller owns it: call Close, and on any error from Wait reconnect.
func Listen(ctx context.Context, url string) (*Listener, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("listen: connect %s: %w", RedactURL(url), err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("listen: %w", err)
	}
	return &Listener{conn: conn}, nil
}

// Wait blocks until a notification arrives (returning its topics) or ctx
// ends. A context error means "no notification in time"; any other error
// means the connection is broken.
func (l *Listener) Wait(ctx context.Context) ([]string, error) {
	n, err := l.conn.WaitForNotification(ctx)
	if err != nil {
		return nil, err
	}
	return strings.Split(n.Payload, ","), nil
}

// Close closes the connection.
func (l *Listener) Close() error {
	return l.conn.Close(context.Background())
}
