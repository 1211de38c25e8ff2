package house

import (
	"fmt"
	"go/ast"
	"strings"
	"testing"
)

// importRule is one arrow of the house: what a set of packages may not
// import, and who is excepted.
type importRule struct {
	name string
	// from reports whether the rule applies to a package (an import path).
	from func(pkg string) bool
	// forbids reports whether the rule forbids an import path.
	forbids func(imp string) bool
}

// modulePkg reports whether imp is dir of this module or below it.
func modulePkg(dir string) func(string) bool {
	return func(imp string) bool { return under(imp, dir) }
}

// anyOf reports whether any of preds holds.
func anyOf(preds ...func(string) bool) func(string) bool {
	return func(s string) bool {
		for _, p := range preds {
			if p(s) {
				return true
			}
		}
		return false
	}
}

// not negates pred.
func not(pred func(string) bool) func(string) bool {
	return func(s string) bool { return !pred(s) }
}

// prefixed reports whether an import path is one of prefixes or below one.
func prefixed(prefixes ...string) func(string) bool {
	return func(imp string) bool {
		for _, p := range prefixes {
			if imp == p || strings.HasPrefix(imp, p+"/") {
				return true
			}
		}
		return false
	}
}

// clientPgxTypes are the packages whose types core/client's API names: a
// caller's transaction (pgx.Tx) and pool (pgxpool.Pool).
var clientPgxTypes = anyOf(
	func(imp string) bool { return imp == "github.com/jackc/pgx/v5" },
	func(imp string) bool { return imp == "github.com/jackc/pgx/v5/pgxpool" },
)

// allOf reports whether every one of preds holds.
func allOf(preds ...func(string) bool) func(string) bool {
	return func(s string) bool {
		for _, p := range preds {
			if !p(s) {
				return false
			}
		}
		return true
	}
}

// The test rigs: packages that exist to build tests, which may reach past
// an arrow (a rig starts real servers and speaks their protocols).
var testRigs = anyOf(modulePkg("core/store/storetest"), modulePkg("core/broker/brokertest"), modulePkg("e2e/harness"))

// The house's import arrows (STYLE.md: cli → daemon, tui → core → sql).
var importRules = []importRule{
	{
		name:    "no package imports cli (but the ffctl binary, the examples built on it and the e2e test binary)",
		from:    not(anyOf(modulePkg("cli/ffctl"), modulePkg("cli/examples"), modulePkg("e2e/harness/testbin"))),
		forbids: func(imp string) bool { return imp == modulePath+"/cli" },
	},
	{
		name:    "core imports nothing of daemon, tui, cli, e2e or scripts",
		from:    modulePkg("core"),
		forbids: anyOf(modulePkg("daemon"), modulePkg("tui"), modulePkg("cli"), modulePkg("e2e"), modulePkg("scripts")),
	},
	{
		name:    "core imports no screen library (the domain knows no lipgloss)",
		from:    modulePkg("core"),
		forbids: prefixed("github.com/charmbracelet", "github.com/muesli/termenv"),
	},
	{
		name:    "daemon imports nothing of tui or cli",
		from:    modulePkg("daemon"),
		forbids: anyOf(modulePkg("tui"), modulePkg("cli")),
	},
	{
		name:    "tui imports nothing of daemon or cli (it reads through core)",
		from:    modulePkg("tui"),
		forbids: anyOf(modulePkg("daemon"), modulePkg("cli")),
	},
	{
		name:    "only core/store (and the test rigs) speak SQL: pgx and sqlx",
		from:    not(anyOf(modulePkg("core/store"), modulePkg("core/client"), testRigs)),
		forbids: prefixed("github.com/jackc/pgx", "github.com/jmoiron/sqlx", "github.com/lib/pq"),
	},
	{
		name: "core/client names a caller's pgx pool and transaction (pgx, pgxpool) in its API, and imports nothing else of pgx or sqlx: " +
			"the store speaks SQL for it (TestTheClientSendsNoStatement)",
		from:    modulePkg("core/client"),
		forbids: allOf(prefixed("github.com/jackc/pgx", "github.com/jmoiron/sqlx", "github.com/lib/pq"), not(clientPgxTypes)),
	},
	{
		name:    "only core/broker (and the test rigs) speak AMQP: amqp091-go",
		from:    not(anyOf(modulePkg("core/broker"), testRigs)),
		forbids: prefixed("github.com/rabbitmq/amqp091-go", "github.com/streadway/amqp"),
	},
}

// TestImportArrowsPointOneWay: every production file keeps every rule of
// importRules. Tests may import what they need (the e2e suite drives the
// built binary and its servers), so only production files are read.
func TestImportArrowsPointOneWay(t *testing.T) {
	files := production(moduleFiles(t))
	for _, r := range importRules {
		for _, f := range files {
			if !r.from(f.pkg) {
				continue
			}
			for _, imp := range f.imports() {
				if r.forbids(imp) {
					t.Errorf("%s imports %s: %s", f.rel, imp, r.name)
				}
			}
		}
	}
}

// TestTheImportRulesCatchAnOffender: each rule, given a package it applies
// to and an import it forbids, forbids it; the exceptions hold.
func TestTheImportRulesCatchAnOffender(t *testing.T) {
	cases := []struct {
		from, imp string
		want      bool
	}{
		{modulePath + "/core/store", modulePath + "/cli", true},
		{modulePath + "/cli/ffctl", modulePath + "/cli", false},
		{modulePath + "/core", modulePath + "/daemon/worker", true},
		{modulePath + "/core/palette", "github.com/charmbracelet/lipgloss", true},
		{modulePath + "/daemon/worker", modulePath + "/tui", true},
		{modulePath + "/tui", modulePath + "/daemon/metrics", true},
		{modulePath + "/daemon/scheduler", "github.com/jackc/pgx/v5", true},
		{modulePath + "/core/store", "github.com/jackc/pgx/v5/stdlib", false},
		{modulePath + "/core/store/storetest", "github.com/jackc/pgx/v5", false},
		{modulePath + "/daemon/worker", "github.com/rabbitmq/amqp091-go", true},
		{modulePath + "/e2e/harness", "github.com/rabbitmq/amqp091-go", false},
		{modulePath + "/cli", modulePath + "/tui", false},
		{modulePath + "/core/client", "github.com/jackc/pgx/v5", false},
		{modulePath + "/core/client", "github.com/jackc/pgx/v5/pgxpool", false},
		{modulePath + "/core/client", "github.com/jackc/pgx/v5/stdlib", true},
		{modulePath + "/core/client", "github.com/jackc/pgx/v5/pgconn", true},
		{modulePath + "/core/client", "github.com/jmoiron/sqlx", true},
	}
	for _, c := range cases {
		got := false
		for _, r := range importRules {
			if r.from(c.from) && r.forbids(c.imp) {
				got = true
			}
		}
		if got != c.want {
			t.Errorf("%s importing %s: forbidden=%v, want %v", c.from, c.imp, got, c.want)
		}
	}
}

// queryMethods are the methods through which Go code sends SQL: pgx's,
// database/sql's and sqlx's.
var queryMethods = map[string]bool{
	"Query": true, "QueryRow": true, "Exec": true, "SendBatch": true, "CopyFrom": true, "Prepare": true,
	"QueryContext": true, "QueryRowContext": true, "ExecContext": true, "PrepareContext": true,
	"Begin": true, "BeginTx": true, "Select": true, "Get": true, "SelectContext": true, "GetContext": true,
	"QueryxContext": true, "QueryRowxContext": true, "NamedExecContext": true,
}

// TestTheClientSendsNoStatement: core/client may name pgx's types (a
// caller's pool and transaction) but calls none of their query methods:
// every statement is the store's, which the client hands the caller's
// transaction to.
func TestTheClientSendsNoStatement(t *testing.T) {
	offences := map[string]string{}
	for _, f := range production(moduleFiles(t)) {
		if !under(f.pkg, "core/client") {
			continue
		}
		ast.Inspect(f.file, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && queryMethods[sel.Sel.Name] {
				pos := f.fset.Position(sel.Pos())
				offences[fmt.Sprintf("%s:%d", f.rel, pos.Line)] = fmt.Sprintf("%s:%d: calls %s", f.rel, pos.Line, sel.Sel.Name)
			}
			return true
		})
	}
	report(t, "core/client sends no statement of its own (core/store does)", offences)
}
