package house

import (
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
		from:    not(anyOf(modulePkg("core/store"), testRigs)),
		forbids: prefixed("github.com/jackc/pgx", "github.com/jmoiron/sqlx", "github.com/lib/pq"),
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
