package store_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// openBounded opens a second store on dbURL with the session bounds of opt.
func openBounded(t *testing.T, dbURL string, opt store.Options) *store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	opt.MaxConns = 4
	s, err := store.Open(ctx, dbURL, opt)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// TestSessionBoundsAreSetOnEverySession: Options' bounds reach PostgreSQL
// as each session's settings, in both connection-string forms of
// SessionURL too; unset bounds keep the server's default.
func TestSessionBoundsAreSetOnEverySession(t *testing.T) {
	t.Parallel()
	_, dbURL := storetest.New(t)
	bounded := store.Options{StatementTimeout: 1500 * time.Millisecond, LockTimeout: 700 * time.Millisecond, IdleInTxTimeout: 20 * time.Second}
	want := map[string]string{"statement_timeout": "1500ms", "lock_timeout": "700ms", "idle_in_transaction_session_timeout": "20s"}
	unset := map[string]string{"statement_timeout": "0", "lock_timeout": "0", "idle_in_transaction_session_timeout": "0"}

	show := func(t *testing.T, q func(ctx context.Context, sql string) (string, error), want map[string]string) {
		t.Helper()
		for name, w := range want {
			got, err := q(t.Context(), "SHOW "+name)
			if err != nil {
				t.Fatalf("SHOW %s: %v", name, err)
			}
			if got != w {
				t.Errorf("%s = %q, want %q", name, got, w)
			}
		}
	}
	pool := func(s *store.Store) func(ctx context.Context, q string) (string, error) {
		return func(ctx context.Context, q string) (v string, err error) {
			err = s.DB().QueryRowContext(ctx, q).Scan(&v)
			return v, err
		}
	}
	conn := func(t *testing.T, raw string) func(ctx context.Context, q string) (string, error) {
		c, err := pgx.Connect(t.Context(), raw)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return func(ctx context.Context, q string) (v string, err error) {
			err = c.QueryRow(ctx, q).Scan(&v)
			return v, err
		}
	}
	u, _ := url.Parse(dbURL)
	dsn := fmt.Sprintf("host=%s port=%s user=%s dbname=%s sslmode=disable search_path=%s", u.Hostname(), u.Port(), u.User.Username(), strings.TrimPrefix(u.Path, "/"), u.Query().Get("search_path"))

	t.Run("pool", func(t *testing.T) { show(t, pool(openBounded(t, dbURL, bounded)), want) })
	t.Run("pool unbounded", func(t *testing.T) { show(t, pool(openBounded(t, dbURL, store.Options{})), unset) })
	for name, raw := range map[string]string{"url": dbURL, "dsn": dsn} {
		t.Run("SessionURL "+name, func(t *testing.T) {
			su, err := store.SessionURL(raw, bounded)
			if err != nil {
				t.Fatal(err)
			}
			show(t, conn(t, su), want)
		})
	}
}

// TestSessionBoundsApply: a statement over StatementTimeout fails, a lock
// wait over LockTimeout fails with IsLockTimeout, and PostgreSQL ends a
// session idle in a transaction longer than IdleInTxTimeout.
func TestSessionBoundsApply(t *testing.T) {
	t.Parallel()
	_, dbURL := storetest.New(t)
	ctx := t.Context()

	t.Run("statement", func(t *testing.T) {
		s := openBounded(t, dbURL, store.Options{StatementTimeout: 200 * time.Millisecond})
		start := time.Now()
		_, err := s.DB().ExecContext(ctx, `SELECT pg_sleep(10)`)
		if sqlState(err) != "57014" {
			t.Fatalf("pg_sleep(10) under a 200ms statement timeout: err %v, want SQLSTATE 57014 (query_canceled)", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("the statement ran %s", d)
		}
	})

	t.Run("lock", func(t *testing.T) {
		holder, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { holder.Close(context.Background()) })
		tx, err := holder.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		if _, err := tx.Exec(ctx, `LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		s := openBounded(t, dbURL, store.Options{LockTimeout: 200 * time.Millisecond})
		_, err = s.DB().ExecContext(ctx, `SELECT count(*) FROM outbox`)
		if !store.IsLockTimeout(err) {
			t.Fatalf("reading a locked table under a 200ms lock timeout: err %v, want a lock timeout", err)
		}
	})

	t.Run("idle in transaction", func(t *testing.T) {
		s := openBounded(t, dbURL, store.Options{IdleInTxTimeout: 300 * time.Millisecond})
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback() })
		var pid int
		if err := tx.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			t.Fatal(err)
		}
		watcher, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { watcher.Close(context.Background()) })
		deadline := time.Now().Add(10 * time.Second)
		for {
			var alive bool
			if err := watcher.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)`, pid).Scan(&alive); err != nil {
				t.Fatal(err)
			}
			if !alive {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("session %d idle in a transaction is still alive 10s after a 300ms idle-in-transaction timeout", pid)
			}
			select {
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			case <-time.After(50 * time.Millisecond): // poll interval
			}
		}
		if _, err := tx.ExecContext(ctx, `SELECT 1`); err == nil {
			t.Fatal("the killed transaction still answers")
		}
	})
}

func TestValidateSession(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		opt      store.Options
		idleHeld time.Duration
		wantErr  string
	}{
		{"defaults with the default confirm timeout", store.Options{StatementTimeout: store.StatementTimeoutDefault, LockTimeout: store.LockTimeoutDefault, IdleInTxTimeout: store.IdleInTxTimeoutDefault}, 10 * time.Second, ""},
		{"all disabled", store.Options{}, 10 * time.Second, ""},
		{"negative", store.Options{StatementTimeout: -time.Second}, 0, "negative"},
		{"below a millisecond", store.Options{LockTimeout: time.Microsecond}, 0, "resolution"},
		{"lock above statement", store.Options{StatementTimeout: time.Second, LockTimeout: 2 * time.Second}, 0, "never fire"},
		{"lock without statement bound", store.Options{LockTimeout: 2 * time.Second}, 0, ""},
		{"idle below the confirm wait", store.Options{IdleInTxTimeout: 10 * time.Second}, 10 * time.Second, "confirm timeout"},
		{"idle just above the margin", store.Options{IdleInTxTimeout: 15 * time.Second}, 10 * time.Second, ""},
		{"idle without a publisher", store.Options{IdleInTxTimeout: store.IdleInTxMargin}, 0, ""},
		{"idle below the round-trip margin", store.Options{IdleInTxTimeout: time.Second}, 0, "round trips"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opt.ValidateSession(tc.idleHeld)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if !errors.Is(err, store.ErrBadSessionBounds) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err %v, want ErrBadSessionBounds mentioning %q", err, tc.wantErr)
			}
		})
	}
}
