package e2e

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/flowforge/flowforge/core/store/storetest"
	"github.com/flowforge/flowforge/e2e/harness"
)

func schemaExec(t *testing.T, dbURL, query string) {
	t.Helper()
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, query); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func TestMigrateTwiceIsANoOp(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{}) // migrated once
	out := s.MustCLI(t, "migrate")
	if !strings.Contains(out, "up to date") {
		t.Fatalf("second migrate said %q, want it to report the schema up to date", out)
	}
}

func TestDaemonRefusesAnUnmigratedOrNewerSchema(t *testing.T) {
	bin := harness.BuildFFCTL(t)
	newer := harness.NewStack(t, harness.StackOptions{})
	schemaExec(t, newer.DatabaseURL, `INSERT INTO goose_db_version (version_id, is_applied) VALUES (999, true)`)
	cases := []struct {
		name  string
		dbURL string
		want  string
	}{
		{"unmigrated", storetest.NewDatabase(t), "run `ffctl migrate`"},
		{"newer", newer.DatabaseURL, "upgrade ffctl"},
	}
	for _, role := range []string{"scheduler", "worker"} {
		for _, c := range cases {
			t.Run(role+"/"+c.name, func(t *testing.T) {
				p := harness.StartProcess(t, role, bin, []string{"daemon", role, "--health-addr", ""},
					[]string{"FLOWFORGE_DATABASE_URL=" + c.dbURL, "FLOWFORGE_AMQP_URL=" + harness.TestAMQPURL(), "FLOWFORGE_QUEUE=" + newer.Queue})
				code, err := p.Wait(30 * time.Second)
				if err != nil {
					t.Fatalf("daemon did not exit: %v", err)
				}
				if code != 1 {
					t.Fatalf("exit code %d, want 1; log:\n%s", code, p.Logs())
				}
				if !strings.Contains(p.Logs(), c.want) {
					t.Fatalf("log does not say %q:\n%s", c.want, p.Logs())
				}
			})
		}
	}
}
