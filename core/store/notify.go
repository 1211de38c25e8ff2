package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jmoiron/sqlx"
)

// TasksChannel is the channel that wakes schedulers when task states
// changed (issue 14: a channel per topic, so the server filters and
// publishers are not woken by finishes). Its payload is a RunWake (see
// runwake.go): the comma-separated ids of the runs whose tasks changed, so
// that a scheduler can advance just those runs, or AnyRun.
const TasksChannel = "flowforge_tasks"

// OutboxChannel is the channel that wakes publishers when outbox rows were
// written; its payload is ignored.
const OutboxChannel = "flowforge_outbox"

// AnyRun in a TasksChannel payload means "runs not named here": the
// scheduler sweeps (RunWake.AnyRun).
const AnyRun = "*"

// AdmitWake in a TasksChannel payload means "a flow-control key may have
// room, or waiters": a task run made READY waiting for its admission, a
// slot given back. It names no run: the scheduler's turn runs only the
// admission (store.Admit), with no pass over any run (RunWake.Admit). A
// scheduler that predates it reads it as AnyRun (an item that is no run
// id), and sweeps, which admits as well.
const AdmitWake = "admit"

// CancelChannel is the channel workers LISTEN on to stop running handlers
// promptly: its payload is the comma-separated ids of runs whose running
// tasks should stop (a run cancelled, or a fail_fast run that failed), or
// CancelAllRuns when they do not fit in one payload (CancelWake, in
// cancelwake.go, is its one home). It is its own channel
// so that schedulers and publishers are not woken by it. A notification is
// a hint: the worker asks the database (its lease renewal) before it
// cancels anything, and the heartbeat remains the backstop when a
// notification is lost.
const CancelChannel = "flowforge_cancel"

// notice is one NOTIFY: a channel and its payload.
type notice struct {
	channel, payload string
}

// outboxNotice wakes the publishers (OutboxChannel; the payload is
// ignored).
func outboxNotice() notice {
	return notice{OutboxChannel, ""}
}

// runsNotices wakes the schedulers on TasksChannel for the runs whose
// tasks changed: a notice per payload of RunWake{Runs: runs}.Encode (none
// for no runs). The notices go into the transaction's one notifyAll
// statement: the commit takes the notification queue's lock once whatever
// their number.
func runsNotices(runs []uuid.UUID) []notice {
	payloads := RunWake{Runs: runs}.Encode()
	out := make([]notice, len(payloads))
	for i, p := range payloads {
		out[i] = notice{TasksChannel, p}
	}
	return out
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

// ListenOn opens a dedicated connection to url and LISTENs on channel
// (TasksChannel, OutboxChannel or CancelChannel). The caller owns it: call Close, and on
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
// comma-separated items: a RunWake's on TasksChannel (DecodeRunWake reads
// them), run ids or CancelAllRuns on CancelChannel, one empty item on
// OutboxChannel)
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

// parseIDs parses a comma-separated list of uuids ("" is none).
func parseIDs(list string) ([]uuid.UUID, error) {
	if list == "" {
		return nil, nil
	}
	parts := strings.Split(list, ",")
	out := make([]uuid.UUID, 0, len(parts))
	for _, p := range parts {
		id, err := uuid.Parse(p)
		if err != nil {
			return nil, fmt.Errorf("parse run id %q: %w", p, err)
		}
		out = append(out, id)
	}
	return out, nil
}
