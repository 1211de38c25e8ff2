package handlers

import (
	"fmt"
	"os"
	"strings"
)

// ShellPathDefault is the PATH a shell command gets when the worker itself
// has none.
const ShellPathDefault = "/usr/local/bin:/usr/bin:/bin"

// ShellOptions configures the shell handler.
type ShellOptions struct {
	// EnvPass names further worker variables a command gets (the operator's
	// --shell-env-pass). Check them with CheckShellEnvPass.
	EnvPass []string
	// LookupEnv reads the worker's environment; nil means os.LookupEnv.
	// Tests inject one instead of setting the process environment.
	LookupEnv func(name string) (string, bool)
	// Supervisor is the argv prefix that runs SuperviseShell in a new
	// process (ffctl's is ["/proc/self/exe", "__shell-supervisor"]: the
	// worker's own executable). Each command then runs under it, so that
	// when the worker dies the command's whole process group dies with it,
	// grandchildren included. Empty means no supervisor: only the command
	// itself gets the parent-death signal.
	Supervisor []string
	// Concurrency bounds the commands the handler runs at once (0: no
	// bound). A task over the bound waits for a turn inside its attempt:
	// its worker slot held, its lease renewed, its timeout running; a
	// context that ends meanwhile fails the attempt with its cause.
	Concurrency int
}

// CheckShellEnvPass returns an error naming the first name in names that
// is not a valid variable name (empty, or holding '=' or NUL) or that must
// never reach a task however it is asked for: FLOWFORGE_* (the worker's
// own settings: FLOWFORGE_DATABASE_URL, FLOWFORGE_AMQP_URL, …; the task's
// FLOWFORGE_* variables are set by the handler itself) and PG* (libpq's
// connection settings, PGPASSWORD included, which the worker's own
// database connection reads). A task that needs a database of its own gets
// its URL under another name, through params.env or a passed variable.
func CheckShellEnvPass(names []string) error {
	for _, n := range names {
		switch {
		case n == "" || strings.ContainsAny(n, "=\x00"):
			return fmt.Errorf("shell env pass %q: not a variable name", n)
		case strings.HasPrefix(strings.ToUpper(n), "FLOWFORGE_"):
			return fmt.Errorf("shell env pass %s: FLOWFORGE_* are the worker's own settings and never reach a task", n)
		case strings.HasPrefix(strings.ToUpper(n), "PG"):
			return fmt.Errorf("shell env pass %s: PG* are the worker's database settings and never reach a task", n)
		}
	}
	return nil
}

// baseEnv returns the inherited part of a command's environment: PATH,
// HOME, USER, LOGNAME, TMPDIR, TZ, LANG, LANGUAGE, LC_ALL and the POSIX
// LC_* categories, and opt.EnvPass, as the worker has them.
// Names CheckShellEnvPass refuses are skipped here too, so a caller that
// forgot the check still leaks nothing.
func baseEnv(opt ShellOptions) []string {
	lookup := opt.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	var env []string
	seen := map[string]bool{}
	add := func(name string) {
		if seen[name] || CheckShellEnvPass([]string{name}) != nil {
			return
		}
		seen[name] = true
		if v, ok := lookup(name); ok {
			env = append(env, name+"="+v)
		} else if name == "PATH" {
			env = append(env, "PATH="+ShellPathDefault)
		}
	}
	// What ordinary programs need, none of it a secret: PATH (the one the
	// worker resolved argv[0] with), a home and user for tools that read
	// their own config, a temporary directory, and the locale and time zone
	// so that output and dates come out as the operator expects.
	for _, n := range []string{"PATH", "HOME", "USER", "LOGNAME", "TMPDIR", "TZ", "LANG", "LANGUAGE",
		"LC_ALL", "LC_CTYPE", "LC_COLLATE", "LC_MESSAGES", "LC_MONETARY", "LC_NUMERIC", "LC_TIME"} {
		add(n)
	}
	for _, n := range opt.EnvPass {
		add(n)
	}
	return env
}
