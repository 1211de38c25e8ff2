package api_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/auth"
	"github.com/flowforge/flowforge/daemon/api"
)

// written counts what a refused request must not have written: runs,
// task runs, history rows, workflow versions, events.
func (f *fixture) written() int {
	f.t.Helper()
	return f.count(`SELECT (SELECT count(*) FROM workflow_runs) + (SELECT count(*) FROM task_runs) + (SELECT count(*) FROM task_events) + (SELECT count(*) FROM workflows) + (SELECT count(*) FROM events)`)
}

// TestBadInputGetsTheCLIsAnswersAndWritesNothing: each bad request is
// answered with its status, its code and a message saying what is wrong
// (the CLI's, where ffctl refuses the same), and nothing is written.
func TestBadInputGetsTheCLIsAnswersAndWritesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, api.Config{}, oneTask)
	run := f.trigger("one", `{}`).String()
	big := `{"params": {"blob": "` + strings.Repeat("x", core.MaxParamsBytes) + `"}}`
	trig := "/v1/workflows/one/runs"
	ev := "/v1/events/order.approved"
	cases := []struct {
		name   string
		c      call
		status int
		code   string
		text   string
	}{
		{"malformed run id", call{method: "GET", path: "/v1/runs/xyz", role: auth.RoleViewer}, 400, api.CodeInvalidInput, `malformed run id "xyz"`},
		{"short prefix", call{method: "GET", path: "/v1/runs/0b7c6", role: auth.RoleViewer}, 400, api.CodeInvalidInput, "at least 6 hex digits"},
		{"nil uuid", call{method: "GET", path: "/v1/runs/00000000-0000-0000-0000-000000000000", role: auth.RoleViewer}, 400, api.CodeInvalidInput, "the nil UUID"},
		{"unknown run", call{method: "GET", path: "/v1/runs/0b7c6d2e", role: auth.RoleViewer}, 404, api.CodeNotFound, "not found"},
		{"malformed task id to requeue", call{method: "POST", path: "/v1/tasks/nope/requeue", role: auth.RoleOperator, body: `{"reason": "r"}`}, 400, api.CodeInvalidInput, `malformed task id "nope"`},
		{"a run id for a task", call{method: "GET", path: "/v1/tasks/" + run, role: auth.RoleViewer}, 400, api.CodeInvalidInput, "run"},
		{"unknown workflow", call{method: "POST", path: "/v1/workflows/nope/runs", role: auth.RoleOperator, body: `{}`}, 404, api.CodeNotFound, "nope"},
		{"bad workflow name", call{method: "POST", path: "/v1/workflows/No%20Way/runs", role: auth.RoleOperator, body: `{}`}, 400, api.CodeInvalidInput, "must match"},
		{"params an array", call{method: "POST", path: trig, role: auth.RoleOperator, body: `{"params": [1, 2]}`}, 400, api.CodeInvalidParams, "want a JSON object, got an array"},
		{"params a string", call{method: "POST", path: trig, role: auth.RoleOperator, body: `{"params": "day=1"}`}, 400, api.CodeInvalidParams, "want a JSON object"},
		{"params with NUL", call{method: "POST", path: trig, role: auth.RoleOperator, body: `{"params": {"a": "x\u0000y"}}`}, 400, api.CodeInvalidParams, "NUL"},
		{"params over the limit", call{method: "POST", path: trig, role: auth.RoleOperator, body: big}, 400, api.CodeInvalidParams, "1048576"},
		{"a key twice in params", call{method: "POST", path: trig, role: auth.RoleOperator, body: `{"params": {"a": 1, "a": 2}}`}, 400, api.CodeInvalidParams, "key $.a appears twice"},
		{"unknown field", call{method: "POST", path: trig, role: auth.RoleOperator, body: `{"params": {}, "parms": {}}`}, 400, api.CodeInvalidInput, `unknown field "parms"`},
		{"field of the wrong type", call{method: "POST", path: trig, role: auth.RoleOperator, body: `{"version": "2"}`}, 400, api.CodeInvalidInput, `field "version": want a whole number, got JSON string`},
		{"not JSON", call{method: "POST", path: trig, role: auth.RoleOperator, body: `{"params": `}, 400, api.CodeInvalidInput, "not JSON"},
		{"body an array", call{method: "POST", path: trig, role: auth.RoleOperator, body: `[]`}, 400, api.CodeInvalidInput, "want a JSON object, got array"},
		{"two objects", call{method: "POST", path: trig, role: auth.RoleOperator, body: `{} {}`}, 400, api.CodeInvalidInput, "more than one JSON value"},
		{"not JSON media type", call{method: "POST", path: trig, role: auth.RoleOperator, body: `{}`, header: map[string]string{"Content-Type": "text/plain"}}, 415, api.CodeUnsupportedMedia, "want application/json"},
		{"negative version", call{method: "POST", path: trig, role: auth.RoleOperator, body: `{"version": -1}`}, 400, api.CodeInvalidInput, "versions are numbered from 1"},
		{"empty idempotency key", call{method: "POST", path: trig, role: auth.RoleOperator, body: `{}`, header: map[string]string{"Idempotency-Key": " "}}, 400, api.CodeInvalidInput, "Idempotency-Key is empty"},
		{"idempotency key too long", call{method: "POST", path: trig, role: auth.RoleOperator, body: `{}`, header: map[string]string{"Idempotency-Key": strings.Repeat("k", 513)}}, 400, api.CodeInvalidParams, "512"},
		{"cancel without a reason", call{method: "POST", path: "/v1/runs/" + run + "/cancel", role: auth.RoleOperator, body: `{}`}, 400, api.CodeInvalidInput, "reason"},
		{"cancel with a NUL reason", call{method: "POST", path: "/v1/runs/" + run + "/cancel", role: auth.RoleOperator, body: `{"reason": "a\u0000"}`}, 400, api.CodeInvalidInput, "NUL"},
		{"unknown query parameter", call{method: "GET", path: "/v1/runs?stat=FAILED", role: auth.RoleViewer}, 400, api.CodeInvalidInput, `query parameter "stat": unknown`},
		{"a query parameter on a trigger", call{method: "POST", path: trig + "?foo=1", role: auth.RoleOperator, body: `{}`}, 400, api.CodeInvalidInput, `query parameter "foo": unknown (this route takes none)`},
		{"a query parameter on a cancel", call{method: "POST", path: "/v1/runs/" + run + "/cancel?force=1", role: auth.RoleOperator, body: `{"reason": "r"}`}, 400, api.CodeInvalidInput, `query parameter "force": unknown (this route takes none)`},
		{"bad state", call{method: "GET", path: "/v1/runs?state=DONE", role: auth.RoleViewer}, 400, api.CodeInvalidInput, `run state "DONE"`},
		{"empty filter", call{method: "GET", path: "/v1/dead?workflow=", role: auth.RoleViewer}, 400, api.CodeInvalidInput, "is empty"},
		{"limit not a number", call{method: "GET", path: "/v1/runs?limit=ten", role: auth.RoleViewer}, 400, api.CodeInvalidInput, `limit "ten"`},
		{"limit too large", call{method: "GET", path: "/v1/workflows?limit=10001", role: auth.RoleViewer}, 400, api.CodeInvalidInput, "10000"},
		{"wait too long", call{method: "GET", path: "/v1/runs/" + run + "/wait?timeout=1h", role: auth.RoleViewer}, 400, api.CodeInvalidInput, "from 1ms to 1m0s"},
		{"wait not a duration", call{method: "GET", path: "/v1/runs/" + run + "/wait?timeout=soon", role: auth.RoleViewer}, 400, api.CodeInvalidInput, `timeout "soon"`},
		{"no such route", call{method: "GET", path: "/v1/nothing", role: auth.RoleViewer}, 404, api.CodeNotFound, "no route GET /v1/nothing"},
		{"wrong method", call{method: "DELETE", path: "/v1/runs/" + run, role: auth.RoleAdmin}, 405, api.CodeMethodNotAllowed, "takes GET"},
		{"apply not YAML", call{method: "PUT", path: "/v1/workflows/w", role: auth.RoleAdmin, body: "name: ["}, 400, api.CodeInvalidInput, "workflow file:"},
		{"apply contradicting options", call{method: "PUT", path: "/v1/workflows/w?strict=true&allow_unknown_handler=1", role: auth.RoleAdmin, body: oneTask}, 400, api.CodeInvalidInput, "contradict"},
		{"a bad event name", call{method: "POST", path: "/v1/events/Order%20Approved", role: auth.RoleOperator, body: `{}`}, 400, api.CodeInvalidInput, `invalid event: event name "Order Approved" must match`},
		{"an event key with NUL", call{method: "POST", path: ev, role: auth.RoleOperator, body: `{"key": "4\u00002"}`}, 400, api.CodeInvalidInput, "invalid event: the key must be UTF-8 without NUL"},
		{"an event key too long", call{method: "POST", path: ev, role: auth.RoleOperator, body: `{"key": "` + strings.Repeat("k", 513) + `"}`}, 400, api.CodeInvalidInput, "the key is 513 bytes, longer than the limit of 512"},
		{"an event key a number", call{method: "POST", path: ev, role: auth.RoleOperator, body: `{"key": 42}`}, 400, api.CodeInvalidInput, `field "key": want a string, got JSON number`},
		{"an event id too long", call{method: "POST", path: ev, role: auth.RoleOperator, body: `{"id": "` + strings.Repeat("i", 257) + `"}`}, 400, api.CodeInvalidInput, "the id is 257 bytes, longer than the limit of 256"},
		{"an event payload an array", call{method: "POST", path: ev, role: auth.RoleOperator, body: `{"payload": [1]}`}, 400, api.CodeInvalidParams, "event payload: invalid params: want a JSON object, got an array"},
		{"an event payload with NUL", call{method: "POST", path: ev, role: auth.RoleOperator, body: `{"payload": {"by": "a\u0000"}}`}, 400, api.CodeInvalidParams, "$.by contains a NUL character"},
		{"an event payload null", call{method: "POST", path: ev, role: auth.RoleOperator, body: `{"payload": null}`}, 400, api.CodeInvalidParams, "want a JSON object, got null"},
		{"an unknown event field", call{method: "POST", path: ev, role: auth.RoleOperator, body: `{"keys": "42"}`}, 400, api.CodeInvalidInput, `unknown field "keys"`},
		{"an unparseable lookback", call{method: "POST", path: ev, role: auth.RoleOperator, body: `{"lookback": "soon"}`}, 400, api.CodeInvalidInput, `lookback: unparseable duration "soon"`},
		{"a zero lookback", call{method: "POST", path: ev, role: auth.RoleOperator, body: `{"lookback": "0s"}`}, 400, api.CodeInvalidInput, `lookback "0s": must be positive and at most 366d`},
		{"a lookback past a year", call{method: "POST", path: ev, role: auth.RoleOperator, body: `{"lookback": "400d"}`}, 400, api.CodeInvalidInput, `lookback "400d": must be positive and at most 366d`},
		{"a query parameter on an event", call{method: "POST", path: ev + "?key=42", role: auth.RoleOperator, body: `{}`}, 400, api.CodeInvalidInput, `query parameter "key": unknown (this route takes none)`},
		{"a bad event name filter", call{method: "GET", path: "/v1/events?name=A", role: auth.RoleViewer}, 400, api.CodeInvalidInput, `event name "A" must match`},
		{"an event list limit too large", call{method: "GET", path: "/v1/events?limit=1001", role: auth.RoleViewer}, 400, api.CodeInvalidInput, "event list limit 1001: want 1 to 1000"},
		{"an unknown event filter", call{method: "GET", path: "/v1/events?nam=x", role: auth.RoleViewer}, 400, api.CodeInvalidInput, `query parameter "nam": unknown (this route takes name, key, limit)`},
	}
	before := f.written()
	for _, c := range cases {
		c.c.invalid = true
		a := f.do(c.c)
		code, msg := a.errorOf(t)
		if a.status != c.status || code != c.code || !strings.Contains(msg, c.text) {
			t.Errorf("%s: %d %s %q, want %d %s naming %q", c.name, a.status, code, msg, c.status, c.code, c.text)
		}
	}
	if after := f.written(); after != before {
		t.Fatalf("refused requests wrote %d rows", after-before)
	}
}

// TestAHugeBodyIsRefusedBeforeItIsRead: a body whose Content-Length says
// 100 MB is answered 413 with nothing sent of it; a chunked body that
// runs past the limit is cut off there (http.MaxBytesReader) and
// answered 413. Nothing is written.
func TestAHugeBodyIsRefusedBeforeItIsRead(t *testing.T) {
	t.Parallel()
	f := newFixture(t, api.Config{BodyMax: 64 << 10}, oneTask)
	before := f.written()
	addr := strings.TrimPrefix(f.base, "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/workflows/one/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", f.tokens[auth.RoleOperator], 100<<20)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer before the body was sent: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), `"too_large"`) {
		t.Fatalf("100 MB by Content-Length: %d %s", resp.StatusCode, body)
	}

	req, _ := http.NewRequestWithContext(f.ctx, "POST", f.base+"/v1/workflows/one/runs", io.MultiReader(strings.NewReader(`{"params": {"a": "`), strings.NewReader(strings.Repeat("x", 1<<20)), strings.NewReader(`"}}`)))
	req.Header.Set("Authorization", "Bearer "+f.tokens[auth.RoleOperator])
	req.ContentLength = -1 // chunked
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "larger than 65536 bytes") {
		t.Fatalf("a chunked body past the limit: %d %s", resp.StatusCode, body)
	}
	if f.written() != before {
		t.Fatal("a refused body wrote rows")
	}
}

// TestASlowClientIsCutOff: a client that sends half its headers and
// stalls has its connection closed once ReadHeaderTimeout has passed.
func TestASlowClientIsCutOff(t *testing.T) {
	t.Parallel()
	f := newFixture(t, api.Config{ReadHeaderTimeout: 300 * time.Millisecond})
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	fmt.Fprintf(conn, "GET /v1/workflows HTTP/1.1\r\nHost: x\r\n")
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.ReadAll(conn) // returns when the server closes the connection
	if err != nil {
		t.Fatalf("the connection was not closed by the server: %v", err)
	}
	if waited := time.Since(start); waited < 250*time.Millisecond || waited > 5*time.Second {
		t.Fatalf("closed after %v, want soon after 300ms", waited)
	}
}
