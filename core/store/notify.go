package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jmoiron/sqlx"
)

// NotifyChannel is the LISTEN/NOTIFY channel that wakes the control plane.
// The payload names what changed: TopicOutbox (new outbox rows: wake
// publishers) and/or TopicTasks (task states changed: wake schedulers),
// comma separated.
const NotifyChannel = "flowforge_events"

// Notification topics carried in NotifyChannel payloads.
const (
	TopicOutbox = "outbox"
	TopicTasks  = "tasks"
)

// TasksChannel is the channel that wakes schedulers when task states
// changed (issue 14: a channel per topic, so the server filters and
// publishers are not woken by finishes). Its payload is the
// comma-separated ids of the runs whose tasks changed, so that a scheduler
// can advance just those runs; AnyRun (or an empty payload) means "runs
// not named": the scheduler sweeps. A notification is a hint: the
// scheduler's periodic sweep covers any that are lost.
const TasksChannel = "flowforge_tasks"

// OutboxChannel is the channel that wakes publishers when outbox rows were
// written; its payload is ignored.
const OutboxChannel = "flowforge_outbox"

// AnyRun in a TasksChannel payload means "runs not named here".
const AnyRun = "*"

// CancelChannel is the channel workers LISTEN on to stop running handlers
// promptly: its payload is the comma-separated ids of runs whose running
// tasks should stop (a run cancelled, or a fail_fast run that failed), or
// CancelAllRuns when they do not fit in one payload. It is its own channel
// so that schedulers and publishers are not woken by it. A notification is
// a hint: the worker asks the database (its lease renewal) before it
// cancels anything, and the heartbeat remains the backstop when a
// notification is lost.
const CancelChannel = "flowforge_cancel"

// CancelAllRuns in a CancelChannel payload means "any run": listeners check
// every task they are running.
const CancelAllRuns = "*"

// cancelPayloadMax bounds a CancelChannel payload below PostgreSQL's 8000
// byte limit on NOTIFY payloads.
const cancelPayloadMax = 7900

// notice is one NOTIFY: a channel and its payload.
type notice struct {
	channel, payload string
}

// tasksNotice wakes the listeners of topics on NotifyChannel.
func tasksNotice(topics ...string) notice {
	return notice{NotifyChannel, strings.Join(topics, ",")}
}

// cancelNotice tells workers to check the running tasks of runs.
func cancelNotice(runs []uuid.UUID) notice {
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.String()
	}
	p := strings.Join(ids, ",")
	if len(p) > cancelPayloadMax {
		p = CancelAllRuns
	}
	return notice{CancelChannel, p}
}

// notify queues one NOTIFY on NotifyChannel in tx (delivered at commit).
func notify(ctx context.Context, tx *sqlx.Tx, topics ...string) error {
	return notifyAll(ctx, tx, tasksNotice(topics...))
}

// notifyAll queues the notices in tx in ONE statement (delivered at
// commit). A transaction notifies at most once: NOTIFY serialises commits
// cluster-wide (the commit takes the notification queue's lock once,
// whatever the number of channels), so callers gather what they have to
// say and call this once.
func notifyAll(ctx context.Context, tx *sqlx.Tx, notices ...notice) error {
	if len(notices) == 0 {
		return nil
	}
	calls := make([]string, len(notices))
	args := make([]any, 0, 2*len(notices))
	for i, n := range notices {
		calls[i] = fmt.Sprintf("pg_notify($%d, $%d)", 2*i+1, 2*i+2)
		args = append(args, n.channel, n.payload)
	}
	if _, err := tx.ExecContext(ctx, "SELECT "+strings.Join(calls, ", "), args...); err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	return nil
}

// Listener is one dedicated connection LISTENing on one channel.
type Listener struct {
	conn *pgx.Conn
}

// Listen opens a dedicated connection to url and LISTENs on NotifyChannel.
// The caller owns it: call Close, and on any error from Wait reconnect.
func Listen(ctx context.Context, url string) (*Listener, error) {
	return ListenOn(ctx, url, NotifyChannel)
}

// ListenOn opens a dedicated connection to url and LISTENs on channel
// (NotifyChannel or CancelChannel). The caller owns it: call Close, and on
// any error from Wait reconnect.
func ListenOn(ctx context.Context, url, channel string) (*Listener, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("listen: connect %s: %w", RedactURL(url), err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("listen on %s: %w", channel, err)
	}
	return &Listener{conn: conn}, nil
}

// Wait blocks until a notification arrives (returning its payload's
// comma-separated items: topics on NotifyChannel, run ids on CancelChannel)
// or ctx ends. A context error means "no notification in time"; any other
// error means the connection is broken.
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
