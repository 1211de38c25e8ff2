package cli_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// `make install`, run from the repository's root as a user would, into
// temporary directories.

// makeEnv is the test's environment without what would change what make
// does: the stamp and install variables, and a calling make's flags (a
// jobserver of `make test`).
func makeEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "VERSION", "COMMIT", "BUILD_DATE", "PREFIX", "DESTDIR", "BIN", "IMAGE", "MAKEFLAGS", "MFLAGS", "MAKELEVEL":
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// runMake runs make in the repository's root with args (see runMakeIn).
func runMake(t *testing.T, as []string, env []string, args ...string) (int, string) {
	t.Helper()
	return runMakeIn(t, docsRoot, as, env, args...)
}

// runMakeIn runs make in dir with args, as the argv prefix as says (nil:
// as this process), and returns its exit code and output.
func runMakeIn(t *testing.T, dir string, as []string, env []string, args ...string) (int, string) {
	t.Helper()
	makeBin, err := exec.LookPath("make")
	if err != nil {
		t.Skip("no make here: make install is not checked")
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	argv := append(append(slices.Clone(as), makeBin, "--no-print-directory", "-C", dir), args...)
	cmd := exec.CommandContext(t.Context(), argv[0], argv[1:]...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	case err != nil:
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return 0, string(out)
}

// gitOut is the output of git in the repository, or "" without git or a
// repository (the Makefile then stamps "dev" and no commit).
func gitOut(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "git", append([]string{"-C", docsRoot}, args...)...).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// TestMakeInstallPutsAStampedFfctlInPrefix: `make install PREFIX=DIR`
// builds ffctl as make build does (version, commit and build date
// stamped), installs it as DIR/bin/ffctl, says where, and says that DIR/bin
// is not on the PATH; the installed binary runs `ffctl version`.
func TestMakeInstallPutsAStampedFfctlInPrefix(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	prefix := filepath.Join(dir, "prefix")
	started := time.Now().UTC().Add(-time.Second).Truncate(time.Second)
	code, out := runMake(t, nil, makeEnv(), "install", "PREFIX="+prefix, "BIN="+filepath.Join(dir, "build", "ffctl"))
	if code != 0 {
		t.Fatalf("make install: exit %d\n%s", code, out)
	}
	ffctl := filepath.Join(prefix, "bin", "ffctl")
	for _, want := range []string{
		"installed " + ffctl + "\n",
		"note: " + prefix + "/bin is not on your PATH; add it: export PATH=\"" + prefix + "/bin:$PATH\"\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("make install's output lacks %q:\n%s", want, out)
		}
	}
	if fi, err := os.Stat(ffctl); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("installed ffctl: %v, mode %v", err, fi)
	}

	run := exec.CommandContext(t.Context(), ffctl, "version", "-o", "json")
	run.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir}
	vout, err := run.Output()
	if err != nil {
		t.Fatalf("%s version -o json: %v", ffctl, err)
	}
	var v struct {
		Version   string  `json:"version"`
		Commit    *string `json:"commit"`
		BuildDate *string `json:"build_date"`
	}
	if err := json.Unmarshal(vout, &v); err != nil {
		t.Fatalf("version -o json: %v\n%s", err, vout)
	}
	wantVersion, wantCommit := gitOut(t, "describe", "--tags", "--always", "--dirty"), gitOut(t, "rev-parse", "HEAD")
	if wantVersion == "" {
		wantVersion = "dev"
	}
	if v.Version != wantVersion || (wantCommit != "") != (v.Commit != nil) || v.Commit != nil && *v.Commit != wantCommit {
		t.Errorf("installed ffctl: %s, want version %q and commit %q (make build's stamp)", vout, wantVersion, wantCommit)
	}
	if v.BuildDate == nil {
		t.Fatalf("installed ffctl has no build date: %s", vout)
	}
	if d, err := time.Parse(time.RFC3339, *v.BuildDate); err != nil || d.Before(started) || d.After(time.Now().Add(time.Minute)) {
		t.Errorf("build date %q (%v): want the time of this make install, after %s", *v.BuildDate, err, started.Format(time.RFC3339))
	}

	text := exec.CommandContext(t.Context(), ffctl, "version")
	text.Env = run.Env
	tout, err := text.Output()
	if err != nil || !strings.HasPrefix(string(tout), "ffctl "+wantVersion+"\n") {
		t.Errorf("%s version: %v\n%s", ffctl, err, tout)
	}
}

// TestMakeInstallStagesIntoDestdir: DESTDIR prefixes the install, as a
// package build wants; the PREFIX/bin on the PATH draws no note.
func TestMakeInstallStagesIntoDestdir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	stage := filepath.Join(dir, "stage")
	code, out := runMake(t, nil, makeEnv("PATH=/opt/flowforge/bin:"+os.Getenv("PATH")), "install", "DESTDIR="+stage, "PREFIX=/opt/flowforge", "BIN="+filepath.Join(dir, "build", "ffctl"))
	if code != 0 {
		t.Fatalf("make install: exit %d\n%s", code, out)
	}
	if !strings.Contains(out, "installed "+stage+"/opt/flowforge/bin/ffctl\n") || strings.Contains(out, "note:") {
		t.Errorf("make install's output:\n%s", out)
	}
	if fi, err := os.Stat(filepath.Join(stage, "opt", "flowforge", "bin", "ffctl")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("staged ffctl: %v, %v", err, fi)
	}
}

// TestMakeInstallDefaultPrefix: without PREFIX a user installs into
// ~/.local/bin and root into /usr/local/bin (make -n: nothing is built).
// Run as root, the test also asks as nobody, where setpriv can switch, in
// a directory holding only a copy of the Makefile (git would refuse
// nobody the clone: TestMakeBuildSaysWhenGitRefusesTheClone).
func TestMakeInstallDefaultPrefix(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	check := func(as []string, dir, want string) {
		t.Helper()
		code, out := runMakeIn(t, dir, as, makeEnv("HOME="+home), "-n", "install")
		if code != 0 || !strings.Contains(out, "install -m 0755 'bin/ffctl' '"+want+"'\n") {
			t.Errorf("%s make -n install: exit %d, want it to install %s:\n%s", strings.Join(as, " "), code, want, out)
		}
	}
	if os.Getuid() != 0 {
		check(nil, docsRoot, home+"/.local/bin/ffctl")
		return
	}
	check(nil, docsRoot, "/usr/local/bin/ffctl")
	setpriv := asNobody(t)
	alone, err := os.MkdirTemp("", "ffctl-makefile-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(alone) })
	mk, err := os.ReadFile(filepath.Join(docsRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(alone, "Makefile"), mk, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(alone, 0o755); err != nil {
		t.Fatal(err)
	}
	check(setpriv, alone, home+"/.local/bin/ffctl")
}

// asNobody is the argv prefix that runs a command as nobody; it skips the
// test unless it runs as root with setpriv at hand.
func asNobody(t *testing.T) []string {
	t.Helper()
	setpriv, err := exec.LookPath("setpriv")
	if os.Getuid() != 0 || err != nil {
		t.Skip("needs root and setpriv to run make as another user")
	}
	return []string{setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"}
}

// TestMakeBuildSaysWhenGitRefusesTheClone: make build (and install) in a
// clone another user owns, as for sudo make install in a user's clone,
// where git refuses to read it, stops with exit 2 saying why and what to
// do, before anything is built.
func TestMakeBuildSaysWhenGitRefusesTheClone(t *testing.T) {
	t.Parallel()
	as := asNobody(t)
	for _, goal := range []string{"build", "install"} {
		code, out := runMake(t, as, makeEnv("HOME=/nonexistent"), "-n", goal, "PREFIX=/tmp/nowhere")
		want := "git cannot read this clone as nobody: another user owns it (git's safe.directory). Build as its owner (make build), then install as root: install -m 0755 bin/ffctl /usr/local/bin/ffctl.  Stop.\n"
		if code != 2 || !strings.Contains(out, want) || strings.Contains(out, "go build") {
			t.Errorf("make -n %s as nobody in root's clone: exit %d, want 2 and %q before any go build:\n%s", goal, code, want, out)
		}
	}
}

// TestMakeInstallRefusesABadPrefix: an empty or relative PREFIX is a usage
// error (make's exit 2) named as such, before anything is built.
func TestMakeInstallRefusesABadPrefix(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"", "relative/dir", " "} {
		bin := filepath.Join(t.TempDir(), "ffctl")
		code, out := runMake(t, nil, makeEnv(), "install", "PREFIX="+prefix, "BIN="+bin)
		want := "PREFIX must be an absolute directory (got '" + strings.TrimSpace(prefix) + "'); e.g. make install PREFIX=/usr/local.  Stop.\n"
		if code != 2 || !strings.Contains(out, want) {
			t.Errorf("make install PREFIX=%s: exit %d, want 2 and %q:\n%s", strconv.Quote(prefix), code, want, out)
		}
		if _, err := os.Stat(bin); !os.IsNotExist(err) {
			t.Errorf("make install PREFIX=%s built %s (%v)", strconv.Quote(prefix), bin, err)
		}
	}
}
