package api_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flowforge/flowforge/core/auth"
	"github.com/flowforge/flowforge/core/client"
	"github.com/flowforge/flowforge/daemon"
	"github.com/flowforge/flowforge/daemon/api"
	"github.com/flowforge/flowforge/daemon/metrics"
)

// TestEachRoleMayDoWhatItsRoleAllows: every route answers 403 (code
// forbidden, naming the role needed) to a token whose role is below the
// route's, and lets the others through.
func TestEachRoleMayDoWhatItsRoleAllows(t *testing.T) {
	t.Parallel()
	f := newFixture(t, api.Config{}, oneTask)
	run := f.trigger("one", `{}`).String()
	paths := map[string]string{"{name}": "one", "{id}": run}
	for _, rt := range api.Routes() {
		path := rt.Pattern
		for k, v := range paths {
			path = strings.ReplaceAll(path, k, v)
		}
		if strings.HasSuffix(path, "/wait") {
			path += "?timeout=1ms"
		}
		for _, role := range auth.Roles() {
			a := f.do(call{method: rt.Method, path: path, role: role, invalid: true})
			forbidden := a.status == http.StatusForbidden
			if want := !role.Allows(rt.Need); forbidden != want {
				t.Errorf("%s %s as %s: %d %s, want forbidden=%v", rt.Method, path, role, a.status, a.body, want)
			}
			if !forbidden {
				continue
			}
			if code, msg := a.errorOf(t); code != api.CodeForbidden || !strings.Contains(msg, "this needs "+string(rt.Need)) {
				t.Errorf("%s %s as %s: %s %q", rt.Method, path, role, code, msg)
			}
		}
	}
}

// TestRefusedCredentialsAre401CountedByReasonAndARevokeHoldsAtOnce: no
// header, another scheme, a malformed, an unknown, an expired and a
// revoked token are 401 (code unauthenticated, WWW-Authenticate set),
// each counted under its reason; the request right after a revoke is
// refused.
func TestRefusedCredentialsAre401CountedByReasonAndARevokeHoldsAtOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, api.Config{FailedAuthBurst: 100})
	ci, err := f.c.CreateToken(f.ctx, "ci", auth.RoleViewer, client.TokenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old, err := f.c.CreateToken(f.ctx, "old", auth.RoleViewer, client.TokenOptions{ExpiresIn: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.ExecContext(f.ctx, `UPDATE api_tokens SET expires_at = now() - interval '1 second' WHERE name = 'old'`); err != nil {
		t.Fatal(err)
	}
	stranger, _ := auth.NewSecret()
	if a := f.do(call{method: "GET", path: "/v1/workflows", header: map[string]string{"Authorization": "Bearer " + ci.Secret}}); a.status != http.StatusOK {
		t.Fatalf("the new token: %d %s", a.status, a.body)
	}
	cases := []struct{ name, header, reason, message string }{
		{"no header", "", "missing", "missing credentials"},
		{"basic", "Basic dXNlcjpwYXNz", "missing", "missing credentials"},
		{"malformed", "Bearer hunter2", "malformed", "malformed token"},
		{"unknown", "Bearer " + stranger.Text, "unknown", "no such token"},
		{"expired", "Bearer " + old.Secret, "expired", "the token has expired"},
	}
	for _, c := range cases {
		h := map[string]string{}
		if c.header != "" {
			h["Authorization"] = c.header
		}
		before := testutil.ToFloat64(f.m.API().AuthFailures.WithLabelValues(c.reason))
		a := f.do(call{method: "GET", path: "/v1/workflows", header: h})
		code, msg := a.errorOf(t)
		if a.status != http.StatusUnauthorized || code != api.CodeUnauthenticated || !strings.Contains(msg, c.message) || a.header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: %d %s", c.name, a.status, a.body)
		}
		if got := testutil.ToFloat64(f.m.API().AuthFailures.WithLabelValues(c.reason)) - before; got != 1 {
			t.Errorf("%s: counted %v times under %s, want once", c.name, got, c.reason)
		}
	}
	if _, err := f.c.RevokeToken(f.ctx, "ci", client.ActionOptions{Reason: "leaked"}); err != nil {
		t.Fatal(err)
	}
	a := f.do(call{method: "GET", path: "/v1/workflows", header: map[string]string{"Authorization": "Bearer " + ci.Secret}})
	if _, msg := a.errorOf(t); a.status != http.StatusUnauthorized || msg != "the token was revoked" {
		t.Fatalf("the request right after the revoke: %d %s", a.status, a.body)
	}
}

// TestASourceThatFailsTooOftenIsRefusedUntilItEarnsATry: past its burst
// of failures a source is answered 429 with Retry-After, even with a good
// token (a guess is not confirmed), counted as limited; once the pace
// has earned it a try, a good token passes again.
func TestASourceThatFailsTooOftenIsRefusedUntilItEarnsATry(t *testing.T) {
	t.Parallel()
	const every = 400 * time.Millisecond
	f := newFixture(t, api.Config{FailedAuthBurst: 3, FailedAuthEvery: every})
	bad := map[string]string{"Authorization": "Bearer hunter2"}
	for i := range 3 {
		if a := f.do(call{method: "GET", path: "/v1/workflows", header: bad}); a.status != http.StatusUnauthorized {
			t.Fatalf("failure %d: %d %s", i+1, a.status, a.body)
		}
	}
	a := f.do(call{method: "GET", path: "/v1/workflows", role: auth.RoleViewer})
	if code, _ := a.errorOf(t); a.status != http.StatusTooManyRequests || code != api.CodeTooManyRequests || a.header.Get("Retry-After") != "1" {
		t.Fatalf("a good token from a limited source: %d %s (Retry-After %q)", a.status, a.body, a.header.Get("Retry-After"))
	}
	if n := testutil.ToFloat64(f.m.API().AuthFailures.WithLabelValues("limited")); n != 1 {
		t.Fatalf("limited counted %v times, want 1", n)
	}
	deadline := time.Now().Add(5 * every)
	for {
		a = f.do(call{method: "GET", path: "/v1/workflows", role: auth.RoleViewer})
		if a.status == http.StatusOK {
			break
		}
		if a.status != http.StatusTooManyRequests || time.Now().After(deadline) {
			t.Fatalf("after the pace earned a try: %d %s", a.status, a.body)
		}
		time.Sleep(every / 4) // polling the limiter's refill, whose pace is the test's
	}
}

// TestConfigRefusesAnonymousAccessBeyondLoopback: --insecure-no-auth is
// refused on an address that is not loopback (a *daemon.SettingError
// naming the flag), taken on 127.0.0.1, ::1 and localhost, where every
// route is served as api:anonymous; a certificate without its key is
// refused.
func TestConfigRefusesAnonymousAccessBeyondLoopback(t *testing.T) {
	t.Parallel()
	c := client.FromStore(nil, client.Options{})
	cases := []struct {
		cfg  api.Config
		want string
	}{
		{api.Config{Client: c, Listen: "0.0.0.0:8090", InsecureNoAuth: true}, "--insecure-no-auth"},
		{api.Config{Client: c, Listen: ":8090", InsecureNoAuth: true}, "--insecure-no-auth"},
		{api.Config{Client: c, Listen: "10.1.2.3:8090", InsecureNoAuth: true}, "--insecure-no-auth"},
		{api.Config{Client: c, TLSCert: "cert.pem"}, "--tls-cert and --tls-key"},
		{api.Config{Client: c, Listen: "nonsense"}, "--listen"},
		{api.Config{Client: c, WaitMax: -time.Second}, "WaitMax"},
		{api.Config{Client: c, Listen: "127.0.0.1:8090", InsecureNoAuth: true}, ""},
		{api.Config{Client: c, Listen: "[::1]:8090", InsecureNoAuth: true}, ""},
		{api.Config{Client: c, Listen: "localhost:8090", InsecureNoAuth: true}, ""},
		{api.Config{Client: c, Listen: "0.0.0.0:8090"}, ""},
	}
	for _, tc := range cases {
		err := tc.cfg.Validate()
		var se *daemon.SettingError
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.cfg, err)
		case tc.want != "" && (!errors.As(err, &se) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("Listen %q: %v, want a SettingError naming %s", tc.cfg.Listen, err, tc.want)
		}
	}
	f := newFixture(t, api.Config{InsecureNoAuth: true}, oneTask)
	run := f.trigger("one", `{}`)
	a := f.do(call{method: "POST", path: "/v1/runs/" + run.String() + "/cancel", body: `{"reason": "anonymous"}`})
	if a.status != http.StatusOK || f.count(`SELECT count(*) FROM task_events WHERE actor = 'api:anonymous'`) != 1 {
		t.Fatalf("anonymous cancel: %d %s", a.status, a.body)
	}
}

// TestEveryRefusalReasonIsExportedFromTheStart: the reasons the metric is
// exported with at 0 are those the server counts: the client's refusal
// reasons, missing and limited.
func TestEveryRefusalReasonIsExportedFromTheStart(t *testing.T) {
	t.Parallel()
	want := []string{"missing", client.AuthMalformed, client.AuthUnknown, client.AuthRevoked, client.AuthExpired, "limited"}
	m := metrics.New()
	if got := testutil.CollectAndCount(m.API().AuthFailures); got != len(want) {
		t.Fatalf("%d series exported, want %d", got, len(want))
	}
	for i, r := range metrics.AuthFailureReasons() {
		if r != want[i] {
			t.Errorf("reason %d is %q, want %q", i, r, want[i])
		}
	}
}
