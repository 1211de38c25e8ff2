package store_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/flowforge/flowforge/core/store"
)

// TestAOneTripStatementWithNotificationsDrawsNoWarning: the statement a
// trigger sends with its notifications after its commit (one round trip)
// commits, is notified after, leaves its settings behind it, and draws
// no warning from the server. Sent as settings, statement, COMMIT without
// a BEGIN, PostgreSQL warned "there is no transaction in progress" for
// each: a line in the server's log for every run triggered. A statement
// that fails leaves the connection idle, not in an aborted transaction
// block, and the notification unsent.
func TestAOneTripStatementWithNotificationsDrawsNoWarning(t *testing.T) {
	f := newFixture(t)
	var mu sync.Mutex
	var notices []string
	cfg, err := pgx.ParseConfig(f.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		defer mu.Unlock()
		notices = append(notices, n.Severity+": "+n.Message)
	}
	c, err := pgx.ConnectConfig(f.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	listener, err := pgx.Connect(f.ctx, f.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = listener.Close(context.Background()) })
	if _, err := listener.Exec(f.ctx, `LISTEN onetrip_test`); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.ExecContext(f.ctx, `CREATE TABLE onetrip (n int)`); err != nil {
		t.Fatal(err)
	}

	var n int
	scan := func(r pgx.Rows) error {
		var err error
		n, err = pgx.CollectExactlyOneRow(r, pgx.RowTo[int])
		return err
	}
	if err := store.SendNotifying(f.ctx, c, `WITH i AS (INSERT INTO onetrip VALUES (7) RETURNING n) SELECT n FROM i`, scan, "onetrip_test", "done"); err != nil {
		t.Fatal(err)
	}
	if n != 7 || f.count(`SELECT count(*) FROM onetrip`) != 1 {
		t.Fatalf("the statement returned %d and wrote %d rows seen from another connection, want 7 and 1", n, f.count(`SELECT count(*) FROM onetrip`))
	}
	wctx, cancel := context.WithTimeout(f.ctx, 5*time.Second)
	defer cancel()
	got, err := listener.WaitForNotification(wctx)
	if err != nil || got.Payload != "done" {
		t.Fatalf("notification %+v (%v), want payload done", got, err)
	}
	var setting string
	if err := c.QueryRow(f.ctx, `SELECT current_setting('enable_seqscan')`).Scan(&setting); err != nil || setting != "on" {
		t.Fatalf("enable_seqscan %q after the statement (%v): its settings outlived it", setting, err)
	}

	err = store.SendNotifying(f.ctx, c, `SELECT 1 / (SELECT count(*) - 1 FROM onetrip)::int`, nil, "onetrip_test", "lost")
	if err == nil || !strings.Contains(err.Error(), "division by zero") {
		t.Fatalf("error %v, want division by zero", err)
	}
	if st := c.PgConn().TxStatus(); st != 'I' {
		t.Fatalf("transaction status %q after a failed statement, want idle (I)", st)
	}
	if err := c.QueryRow(f.ctx, `SELECT count(*) FROM onetrip`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the connection after a failed statement: count %d, %v", n, err)
	}
	sctx, scancel := context.WithTimeout(f.ctx, 300*time.Millisecond)
	defer scancel()
	if got, err := listener.WaitForNotification(sctx); err == nil {
		t.Fatalf("notification %+v sent for a statement that failed", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(notices) != 0 {
		t.Fatalf("the server sent %q, want nothing", notices)
	}
}
