package api_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core/auth"
	"github.com/flowforge/flowforge/core/client"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
	"github.com/flowforge/flowforge/daemon/api"
	"github.com/flowforge/flowforge/daemon/handlers"
	"github.com/flowforge/flowforge/daemon/metrics"
)

// openAPIPath is the document the server is held to.
const openAPIPath = "../../docs/openapi.yaml"

// loadOpenAPI loads and validates docs/openapi.yaml with kin-openapi and
// returns it with a router over its paths (the server's address left out:
// any host matches).
func loadOpenAPI(t *testing.T) (*openapi3.T, routers.Router) {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(openAPIPath)
	if err != nil {
		t.Fatalf("load %s: %v", openAPIPath, err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("%s is not a valid OpenAPI 3 document: %v", openAPIPath, err)
	}
	doc.Servers = nil
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return doc, router
}

// fixture is an API server on a throwaway database with three tokens, one
// per role, and what the tests look at: the store, the client, the
// metrics, the OpenAPI router.
type fixture struct {
	t      *testing.T
	ctx    context.Context
	s      *store.Store
	db     *sql.DB
	c      *client.Client
	m      *metrics.Metrics
	base   string
	router routers.Router
	tokens map[auth.Role]string
}

// newFixture starts a server (Config cfg, whose Client, Listen and
// Metrics it sets) with the workflows of srcs applied and a token per
// role.
func newFixture(t *testing.T, cfg api.Config, srcs ...string) *fixture {
	t.Helper()
	s, db, _ := storetest.NewWithDB(t)
	f := &fixture{t: t, ctx: t.Context(), s: s, db: db, c: client.FromStore(s, client.Options{Actor: "test"}), m: metrics.New(), tokens: map[auth.Role]string{}}
	_, f.router = loadOpenAPI(t)
	for _, src := range srcs {
		storetest.Apply(t, s, src)
	}
	for _, r := range auth.Roles() {
		tok, err := f.c.CreateToken(f.ctx, string(r), r, client.TokenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		f.tokens[r] = tok.Secret
	}
	cfg.Client, cfg.Metrics = f.c, f.m
	cfg.Listen = "127.0.0.1:0"
	if cfg.CheckParams == nil {
		cfg.CheckParams = handlers.ValidateParams
	}
	f.base = "http://" + startServer(t, cfg)
	return f
}

// startServer starts a server of cfg and returns its address; it is
// stopped, and its goroutine joined, when the test ends.
func startServer(t *testing.T, cfg api.Config) string {
	t.Helper()
	srv, err := api.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := srv.Run(ctx); err != nil {
			t.Errorf("run: %v", err)
		}
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return srv.Addr()
}

// call is one request of a test.
type call struct {
	method, path string
	role         auth.Role // the token sent ("": none, unless header sets one)
	body         string
	header       map[string]string
	// invalid: the request breaks the document on purpose (bad input),
	// so only the answer is validated.
	invalid bool
}

// answer is a response read whole.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// json decodes the answer's body into v.
func (a answer) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(a.body, v); err != nil {
		t.Fatalf("answer %d %s: %v", a.status, a.body, err)
	}
}

// errorOf is the answer's error object (code and message).
func (a answer) errorOf(t *testing.T) (code, message string) {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string }
	}
	a.json(t, &e)
	return e.Error.Code, e.Error.Message
}

// do sends c and validates the request (unless c.invalid) and the answer
// against docs/openapi.yaml; a path the document lacks is not validated.
func (f *fixture) do(c call) answer {
	f.t.Helper()
	req, err := http.NewRequestWithContext(f.ctx, c.method, f.base+c.path, strings.NewReader(c.body))
	if err != nil {
		f.t.Fatal(err)
	}
	if c.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.role != "" {
		req.Header.Set("Authorization", "Bearer "+f.tokens[c.role])
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", c.method, c.path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	a := answer{status: resp.StatusCode, header: resp.Header, body: body}
	f.validate(c, req, a)
	return a
}

// validate checks c's request (unless c.invalid) and its answer a against
// the document.
func (f *fixture) validate(c call, req *http.Request, a answer) {
	f.t.Helper()
	route, params, err := f.router.FindRoute(req)
	if err != nil {
		return // a path or method the document lacks: the 404 and 405 tests
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, ExcludeRequestBody: req.Method == http.MethodPut}}
	if !c.invalid {
		req.Body = io.NopCloser(strings.NewReader(c.body))
		if err := openapi3filter.ValidateRequest(f.ctx, in); err != nil {
			f.t.Errorf("%s %s: the request breaks %s: %v", c.method, c.path, openAPIPath, err)
		}
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: a.status, Header: a.header,
		Body: io.NopCloser(bytes.NewReader(a.body)), Options: &openapi3filter.Options{IncludeResponseStatus: true}}
	if err := openapi3filter.ValidateResponse(f.ctx, out); err != nil {
		f.t.Errorf("%s %s: the answer %d %s breaks %s: %v", c.method, c.path, a.status, a.body, openAPIPath, err)
	}
}

// trigger starts a run of workflow through the API and returns its id.
func (f *fixture) trigger(workflow, params string) uuid.UUID {
	f.t.Helper()
	a := f.do(call{method: "POST", path: "/v1/workflows/" + workflow + "/runs", role: auth.RoleOperator, body: `{"params": ` + params + `}`})
	if a.status != http.StatusCreated {
		f.t.Fatalf("trigger %s: %d %s", workflow, a.status, a.body)
	}
	var res struct {
		RunID uuid.UUID `json:"run_id"`
	}
	a.json(f.t, &res)
	return res.RunID
}

// count runs a one-integer query on the store's database.
func (f *fixture) count(q string) int {
	f.t.Helper()
	var n int
	if err := f.db.QueryRowContext(f.ctx, q).Scan(&n); err != nil {
		f.t.Fatalf("%s: %v", q, err)
	}
	return n
}

// finishTasks runs every READY task of run with outcome, as a worker
// would, and lets a scheduler pass settle the run.
func (f *fixture) finishTasks(run uuid.UUID, outcome store.Outcome) {
	f.t.Helper()
	req := store.FinishRequest{Outcome: outcome, Result: json.RawMessage(`{"ok": true}`)}
	if outcome != store.OutcomeSucceeded {
		req.Error, req.Permanent = "boom", true
	}
	storetest.FinishReady(f.t, f.s, run, req)
}
