package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// W6's HTTP path (see triggerworkloads.go): `ffctl daemon api` of the tree
// on a free loopback port, on a fresh database, with an operator token
// made by `ffctl token create` (authentication is on: each request reads
// its token's row, as in production); the driver's HTTP clients POST
// /v1/workflows/{name}/runs with {"params":{}} and time each request to
// its answer read. No other daemon runs: the runs are triggered, never
// worked.

// apiTokenName is the token the driver creates for its requests.
const apiTokenName = "bench"

// apiServer is a running `ffctl daemon api`: its base URL and the bearer
// token of the requests.
type apiServer struct {
	proc  *child
	base  string
	token string
}

// startAPI creates an operator token on database db and starts `ffctl
// daemon api` on it (health server off, no broker: the API needs none),
// then waits until it answers an authenticated request.
func (f *flowforge) startAPI(ctx context.Context, db string) (*apiServer, error) {
	url := f.env.pg.URL(db, "postgres")
	out, err := f.ffctl(ctx, url, "token", "create", apiTokenName, "--role", "operator", "-o", "json")
	if err != nil {
		return nil, err
	}
	var tok struct {
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal([]byte(out), &tok); err != nil || tok.Secret == "" {
		return nil, fmt.Errorf("%s: ffctl token create: no secret in %q (%v)", f.build.Label, out, err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(f.build.FFCTL, "daemon", "api", "--listen", addr)
	cmd.Env = ffctlEnv("FLOWFORGE_DATABASE_URL="+url, "FLOWFORGE_HEALTH_ADDR=")
	c, err := startChild("api", cmd, filepath.Join(f.dir, db+"-api.log"))
	if err != nil {
		return nil, err
	}
	a := &apiServer{proc: c, base: "http://" + addr, token: tok.Secret}
	hc := &http.Client{Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	var last error // the latest probe's
	err = pollEvery(20*time.Millisecond, 30*time.Second, func() (bool, error) {
		if c.exited() {
			return false, fmt.Errorf("daemon api exited: %s", c.tail(15))
		}
		last = a.get(ctx, hc, "/v1/workflows")
		return last == nil, nil
	})
	if err != nil {
		a.stop()
		return nil, fmt.Errorf("%s: daemon api not ready: %w (last probe: %v)", f.build.Label, err, last)
	}
	return a, nil
}

// stop stops the daemon (SIGTERM, then SIGKILL after 30 s).
func (a *apiServer) stop() { a.proc.stop(syscall.SIGTERM, 30*time.Second) }

// get sends an authenticated GET of path; an answer other than 200 is an
// error.
func (a *apiServer) get(ctx context.Context, hc *http.Client, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+path, nil)
	if err != nil {
		return fmt.Errorf("api GET %s: %w", path, err)
	}
	return a.do(hc, req, http.StatusOK)
}

// trigger returns a call that triggers one run of workflow through hc: an
// answer other than 201 is an error.
func (a *apiServer) trigger(hc *http.Client, workflow string) func(context.Context) error {
	path := "/v1/workflows/" + workflow + "/runs"
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.base+path, strings.NewReader(`{"params":{}}`))
		if err != nil {
			return fmt.Errorf("api POST %s: %w", path, err)
		}
		req.Header.Set("Content-Type", "application/json")
		return a.do(hc, req, http.StatusCreated)
	}
}

// do sends req with the token and reads the whole answer, which must
// have status want.
func (a *apiServer) do(hc *http.Client, req *http.Request, want int) error {
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("api %s %s: %w", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("api %s %s: read the answer: %w", req.Method, req.URL.Path, err)
	}
	if resp.StatusCode != want {
		return fmt.Errorf("api %s %s: %s: %s", req.Method, req.URL.Path, resp.Status, firstLine(string(body)))
	}
	return nil
}

// apiTrigger is FlowForge's HTTP load: load's loops are HTTP clients of
// one keep-alive transport (a connection each), triggering single-task
// runs through a fresh database's `ffctl daemon api`.
func (f *flowforge) apiTrigger(ctx context.Context, load closedLoad) (sample, error) {
	return f.onFreshDB(ctx, func(db string, pool *pgxpool.Pool) (sample, error) {
		a, err := f.startAPI(ctx, db)
		if err != nil {
			return sample{}, err
		}
		defer a.stop()
		tr := &http.Transport{MaxIdleConnsPerHost: max(load.Loops, 1), IdleConnTimeout: time.Minute}
		hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
		defer tr.CloseIdleConnections()
		r := runClosedLoop(ctx, load, a.trigger(hc, wfOne))
		if r.Errors > 0 {
			return sample{}, fmt.Errorf("%s: %d HTTP triggers failed, first: %s", f.build.Label, r.Errors, r.FirstError)
		}
		if err := checkRows(ctx, pool, r.Calls+load.warmRuns(1), "workflow_runs"); err != nil {
			return sample{}, fmt.Errorf("%s: %w", f.build.Label, err)
		}
		return sample{Metrics: loadFigures(r.Calls, r.Seconds, r.LatMS)}, nil
	})
}
