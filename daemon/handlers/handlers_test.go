package handlers_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/daemon/handlers"
)

func task(params string, attempt int) core.Task {
	return core.Task{RunID: "run-1", TaskRunID: "task-1", TaskName: "t", Workflow: "wf", Attempt: attempt,
		RunParams: json.RawMessage(`{"day":"2026-11-30","n":20261130,"nested":{"x":1}}`), Params: json.RawMessage(params),
		Upstream: map[string]json.RawMessage{"up": json.RawMessage(`{"v":1}`)}, IdempotencyKey: "k-1"}
}

func TestRegisterKeepsAProgramsOwnHandlersAndGatesShell(t *testing.T) {
	reg := core.NewRegistry()
	mine := func(context.Context, core.Task) (json.RawMessage, error) { return json.RawMessage(`"mine"`), nil }
	reg.MustRegister("noop", mine)
	handlers.Register(reg, handlers.Options{})
	if reg.Has("shell") {
		t.Fatal("shell registered without AllowShell")
	}
	h, _ := reg.Lookup("noop")
	if out, _ := h(context.Background(), task(`{}`, 1)); string(out) != `"mine"` {
		t.Fatalf("the program's noop was replaced: %s", out)
	}
	handlers.Register(reg, handlers.Options{AllowShell: true})
	for _, n := range []string{"noop", "sleep", "fail", "http", "shell"} {
		if !reg.Has(n) {
			t.Errorf("%s not registered", n)
		}
	}
}

func TestFailFailsItsFirstTimesAttempts(t *testing.T) {
	cases := []struct {
		name      string
		params    string
		attempt   int
		wantErr   bool
		permanent bool
	}{
		{"absent times fails every attempt", `{}`, 7, true, false},
		{"within times", `{"times": 2}`, 2, true, false},
		{"after times", `{"times": 2}`, 3, false, false},
		{"permanent", `{"times": 1, "permanent": true}`, 1, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := handlers.Fail(context.Background(), task(c.params, c.attempt))
			if (err != nil) != c.wantErr || core.IsPermanent(err) != c.permanent {
				t.Fatalf("err = %v (permanent %v), want error %v permanent %v", err, core.IsPermanent(err), c.wantErr, c.permanent)
			}
		})
	}
}

func TestUnknownParamsArePermanentErrors(t *testing.T) {
	for name, h := range map[string]core.Handler{"noop": handlers.Noop, "sleep": handlers.Sleep, "fail": handlers.Fail, "shell": handlers.Shell} {
		_, err := h(context.Background(), task(`{"tyop": 1}`, 1))
		if err == nil || !core.IsPermanent(err) || !strings.Contains(err.Error(), "tyop") {
			t.Errorf("%s with an unknown param: err = %v, want a permanent error naming it", name, err)
		}
	}
}

func TestSleepReturnsTheCauseWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(core.ErrRunCancelled)
	_, err := handlers.Sleep(ctx, task(`{"duration": "1h"}`, 1))
	if !errors.Is(err, core.ErrRunCancelled) {
		t.Fatalf("err = %v, want it to wrap core.ErrRunCancelled", err)
	}
}

func TestShellSeesTheTaskInItsEnvironmentAndReportsExitCodes(t *testing.T) {
	out, err := handlers.Shell(context.Background(), task(`{"command": ["sh", "-c", "echo $FLOWFORGE_RUN_ID $FLOWFORGE_TASK_RUN_ID $FLOWFORGE_TASK_NAME $FLOWFORGE_ATTEMPT $FLOWFORGE_PARAM_DAY $FLOWFORGE_PARAM_N $EXTRA; echo \"$FLOWFORGE_UPSTREAM\""], "env": {"EXTRA": "x"}}`, 2))
	if err != nil {
		t.Fatal(err)
	}
	var res handlers.ShellResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatal(err)
	}
	if want := "run-1 task-1 t 2 2026-11-30 20261130 x\n{\"up\":{\"v\":1}}\n"; res.Stdout != want || res.ExitCode != 0 {
		t.Fatalf("stdout %q exit %d, want %q 0", res.Stdout, res.ExitCode, want)
	}
	_, err = handlers.Shell(context.Background(), task(`{"command": ["sh", "-c", "echo oops >&2; exit 3"]}`, 1))
	if err == nil || core.IsPermanent(err) || !strings.Contains(err.Error(), "code 3") || !strings.Contains(err.Error(), "oops") {
		t.Fatalf("non-zero exit: err = %v, want a retryable error with the code and stderr", err)
	}
	_, err = handlers.Shell(context.Background(), task(`{"command": ["sh", "-c", "exit 4"]}`, 1))
	if err == nil || err.Error() != "shell: sh exited with code 4" {
		t.Fatalf("non-zero exit, empty stderr: err = %v, want exactly %q", err, "shell: sh exited with code 4")
	}
	_, err = handlers.Shell(context.Background(), task(`{"command": ["/no/such/binary"]}`, 1))
	if err == nil || !core.IsPermanent(err) {
		t.Fatalf("missing binary: err = %v, want permanent", err)
	}
}

func TestShellKillsTheProcessGroupOnCancel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := handlers.Shell(ctx, task(`{"command": ["sh", "-c", "sleep 30 & sleep 30; wait"]}`, 1))
	if err == nil {
		t.Fatal("a cancelled command succeeded")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("cancel took %s: the process group was not killed", d)
	}
}

func TestHTTPClassifiesStatusesAndSendsTheIdempotencyKey(t *testing.T) {
	var gotKey, gotBody string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotKey = r.Header.Get("Idempotency-Key")
		b, _ := io.ReadAll(r.Body)
		gotBody = string(b)
		switch r.URL.Path {
		case "/ok":
			w.Write([]byte("fine"))
		case "/bad":
			http.Error(w, "no such thing", http.StatusNotFound)
		default:
			http.Error(w, "try later", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	h := handlers.HTTP(srv.Client())
	out, err := h(context.Background(), task(`{"url": "`+srv.URL+`/ok"}`, 1))
	if err != nil || !strings.Contains(string(out), `"status":200`) || gotKey != "k-1" || !strings.Contains(gotBody, `"task_run_id":"task-1"`) {
		t.Fatalf("2xx: out %s err %v key %q body %s", out, err, gotKey, gotBody)
	}
	if _, err := h(context.Background(), task(`{"url": "`+srv.URL+`/bad"}`, 1)); err == nil || !core.IsPermanent(err) {
		t.Fatalf("4xx: err = %v, want permanent", err)
	}
	if _, err := h(context.Background(), task(`{"url": "`+srv.URL+`/busy"}`, 1)); err == nil || core.IsPermanent(err) {
		t.Fatalf("5xx: err = %v, want retryable", err)
	}
	if _, err := h(context.Background(), task(`{"url": "ftp://x"}`, 1)); err == nil || !core.IsPermanent(err) {
		t.Fatalf("non-http url: err = %v, want permanent", err)
	}
	if _, err := h(context.Background(), task(`{"url": "http://127.0.0.1:1/"}`, 1)); err == nil || core.IsPermanent(err) {
		t.Fatalf("network error: err = %v, want retryable", err)
	}
}

// TestShellCommandDiesWithItsWorker: a command started by a process that is
// SIGKILLed gets the parent-death signal instead of running on beside the
// retry. The "worker" here is this test binary re-executed as a child.
func TestShellCommandDiesWithItsWorker(t *testing.T) {
	if os.Getenv("FF_SHELL_PARENT") == "1" {
		out, _ := handlers.Shell(context.Background(), task(`{"command": ["sh", "-c", "echo $$ > `+os.Getenv("FF_PIDFILE")+`; exec sleep 60"]}`, 1))
		t.Logf("%s", out)
		return
	}
	pidfile := filepath.Join(t.TempDir(), "pid")
	cmd := exec.Command(os.Args[0], "-test.run", "^TestShellCommandDiesWithItsWorker$")
	cmd.Env = append(os.Environ(), "FF_SHELL_PARENT=1", "FF_PIDFILE="+pidfile)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	deadline := time.Now().Add(20 * time.Second)
	for pid == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the command never started")
		}
		if b, err := os.ReadFile(pidfile); err == nil {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		time.Sleep(20 * time.Millisecond) // polling a file the child writes
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the command (pid %d) outlived its killed worker", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// bigTask is task() with run params holding a blob of n bytes under "blob"
// and an upstream result of m bytes under "up".
func bigTask(params string, n, m int) core.Task {
	t := task(params, 1)
	t.RunParams = json.RawMessage(`{"day":"2026-11-30","blob":"` + strings.Repeat("p", n) + `"}`)
	t.Upstream = map[string]json.RawMessage{"up": json.RawMessage(`{"v":"` + strings.Repeat("u", m) + `"}`)}
	return t
}

func sha(b []byte) string { return fmt.Sprintf("%x", sha256.Sum256(b)) }

// TestShellGetsParamsTooLargeForTheEnvironmentFromFilesAndStdin is the
// reported defect: a 300 KiB run param (params may be 1 MiB) went into
// FLOWFORGE_PARAMS and FLOWFORGE_PARAM_BLOB, over Linux's 128 KiB per
// variable, so every attempt failed with "argument list too long" and was
// retried to DEAD. Now the command reads the whole document from
// FLOWFORGE_PARAMS_FILE (or stdin), small values stay in the environment,
// the oversized ones are named in FLOWFORGE_ENV_OMITTED, and the files are
// gone once the command exits.
func TestShellGetsParamsTooLargeForTheEnvironmentFromFilesAndStdin(t *testing.T) {
	const script = `sha256sum < "$FLOWFORGE_PARAMS_FILE" | cut -d' ' -f1; sha256sum < "$FLOWFORGE_UPSTREAM_FILE" | cut -d' ' -f1; ` +
		`echo "day=$FLOWFORGE_PARAM_DAY omitted=$FLOWFORGE_ENV_OMITTED params=${#FLOWFORGE_PARAMS} file=$FLOWFORGE_PARAMS_FILE"`
	cmdJSON, _ := json.Marshal([]string{"sh", "-c", script})
	cases := []struct {
		name, params string
		n, m         int
		want         func(tk core.Task, up []byte) []string // stdout lines before the last
		wantOmitted  string
		stdin        bool // the command reads stdin and prints no environment line
	}{
		{"300 KiB param and 200 KiB upstream", `{"command": ` + string(cmdJSON) + `}`, 300 << 10, 200 << 10,
			func(tk core.Task, up []byte) []string { return []string{sha(tk.RunParams), sha(up)} }, "FLOWFORGE_PARAMS,FLOWFORGE_UPSTREAM,FLOWFORGE_PARAM_BLOB", false},
		{"small params stay in the environment too", `{"command": ` + string(cmdJSON) + `}`, 10, 10,
			func(tk core.Task, up []byte) []string { return []string{sha(tk.RunParams), sha(up)} }, "", false},
		{"stdin params", `{"command": ["sh", "-c", "sha256sum | cut -d' ' -f1; echo -"], "stdin": "params"}`, 300 << 10, 10,
			func(tk core.Task, _ []byte) []string { return []string{sha(tk.RunParams)} }, "", true},
		{"stdin upstream", `{"command": ["sh", "-c", "sha256sum | cut -d' ' -f1; echo -"], "stdin": "upstream"}`, 10, 200 << 10,
			func(_ core.Task, up []byte) []string { return []string{sha(up)} }, "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tk := bigTask(c.params, c.n, c.m)
			up, _ := json.Marshal(tk.Upstream)
			out, err := handlers.Shell(context.Background(), tk)
			if err != nil {
				t.Fatalf("err = %v (permanent %v)", err, core.IsPermanent(err))
			}
			var res handlers.ShellResult
			if err := json.Unmarshal(out, &res); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimRight(res.Stdout, "\n"), "\n")
			want := c.want(tk, up)
			if len(lines) != len(want)+1 || strings.Join(lines[:len(want)], "\n") != strings.Join(want, "\n") {
				t.Fatalf("stdout %q, want the digests %q first", res.Stdout, want)
			}
			last := lines[len(want)]
			if !c.stdin {
				if !strings.Contains(last, "day=2026-11-30 ") || !strings.Contains(last, " omitted="+c.wantOmitted+" ") {
					t.Errorf("last line %q: want day=2026-11-30 and omitted=%s", last, c.wantOmitted)
				}
				if c.wantOmitted == "" && !strings.Contains(last, fmt.Sprintf(" params=%d ", len(tk.RunParams))) {
					t.Errorf("last line %q: FLOWFORGE_PARAMS should hold the %d-byte params", last, len(tk.RunParams))
				}
				file := last[strings.Index(last, " file=")+len(" file="):]
				if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s still exists after the command (%v)", file, err)
				}
			}
		})
	}
}

// TestShellRefusesWhatExecCannotTakeAsPermanent: an environment or an
// argument exec(2) must refuse is the same on every attempt, so it is a
// permanent error (the task goes DEAD at once instead of being retried)
// that says where large values go; an unknown params.stdin too.
func TestShellRefusesWhatExecCannotTakeAsPermanent(t *testing.T) {
	big := strings.Repeat("x", 200<<10)
	many := map[string]string{}
	for i := range 70 { // 70 x 100 KiB: each fits, the whole is over 6 MiB
		many[fmt.Sprintf("V%d", i)] = strings.Repeat("y", 100<<10)
	}
	manyJSON, _ := json.Marshal(many)
	cases := []struct{ name, params, want string }{
		{"a params.env value over 128 KiB", `{"command": ["true"], "env": {"BIG": "` + big + `"}}`, "params.env BIG"},
		{"an argument over 128 KiB", `{"command": ["echo", "` + big + `"]}`, "argument 1 of params.command"},
		{"too much in all", `{"command": ["true"], "env": ` + string(manyJSON) + `}`, "in all"},
		{"an unknown stdin", `{"command": ["true"], "stdin": "run"}`, `params.stdin "run"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := handlers.Shell(context.Background(), task(c.params, 1))
			if err == nil || !core.IsPermanent(err) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v (permanent %v), want a permanent error naming %q", err, core.IsPermanent(err), c.want)
			}
			if c.want != `params.stdin "run"` && !strings.Contains(err.Error(), "FLOWFORGE_PARAMS_FILE") {
				t.Errorf("err = %v: it should say where large values go", err)
			}
		})
	}
}
