package api

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/flowforge/flowforge/core/auth"
	"github.com/flowforge/flowforge/core/client"
)

// tokenKey is the context key of the request's token.
type tokenKey struct{}

// tokenOf is the token the request was authenticated with.
func tokenOf(ctx context.Context) client.Token {
	t, _ := ctx.Value(tokenKey{}).(client.Token)
	return t
}

// actorOf is the audit name of the request's token: "api:NAME".
func actorOf(ctx context.Context) string { return auth.Actor(tokenOf(ctx).Name) }

// authenticate runs next with the request's token in its context, or
// answers the refusal: 429 (with Retry-After) for a source that failed
// too often, before its credentials are looked at; 401 for no
// "Authorization: Bearer SECRET" header or a secret Client.Authenticate
// refuses (malformed, unknown, revoked, expired), counted by reason and
// taken from the source's allowance. Under InsecureNoAuth every request
// is anonymous's.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.InsecureNoAuth {
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tokenKey{}, anonymous())))
			return
		}
		source := sourceOf(r)
		if ok, wait := s.limiter.allowed(source, time.Now()); !ok {
			s.m.AuthFailures.WithLabelValues("limited").Inc()
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
			s.writeError(w, r, &apiError{status: http.StatusTooManyRequests, code: CodeTooManyRequests,
				message: fmt.Sprintf("too many failed authentications from %s: try again in %s", source, wait.Round(time.Second))})
			return
		}
		t, err := s.tokenOfRequest(r)
		if reason := refusalReason(err); reason != "" {
			s.m.AuthFailures.WithLabelValues(reason).Inc()
			s.limiter.failed(source, time.Now())
			w.Header().Set("WWW-Authenticate", `Bearer realm="flowforge"`)
		}
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tokenKey{}, t)))
	})
}

// noCredentials is the refusal of a request without a bearer token.
func noCredentials() error {
	return &apiError{status: http.StatusUnauthorized, code: CodeUnauthenticated,
		message: "missing credentials: send the header Authorization: Bearer TOKEN (ffctl token create makes a token)"}
}

// tokenOfRequest reads the bearer token of r's Authorization header and
// authenticates it. Errors: noCredentials; Authenticate's.
func (s *Server) tokenOfRequest(r *http.Request) (client.Token, error) {
	h := r.Header.Values("Authorization")
	if len(h) != 1 {
		return client.Token{}, noCredentials()
	}
	scheme, secret, ok := strings.Cut(h[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(secret) == "" {
		return client.Token{}, noCredentials()
	}
	return s.cfg.Client.Authenticate(r.Context(), strings.TrimSpace(secret))
}

// refusalReason is the metric label of an authentication's refusal: an
// *AuthError's reason, "missing" for noCredentials, "" for no refusal
// (nil, or the database's error).
func refusalReason(err error) string {
	var ae *client.AuthError
	var mine *apiError
	switch {
	case errors.As(err, &ae):
		return ae.Reason
	case errors.As(err, &mine) && mine.code == CodeUnauthenticated:
		return "missing"
	}
	return ""
}

// sourceOf is the address whose failures are paced together: the remote
// IP address (behind a proxy, the proxy's: forwarded headers are not
// trusted).
func sourceOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// require answers 403 unless the request's token allows role need;
// otherwise it runs h.
func require(need auth.Role, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t := tokenOf(r.Context())
		if !t.Role.Allows(need) {
			writeJSON(w, http.StatusForbidden, errorBody{Error: errorObject{Code: CodeForbidden,
				Message: fmt.Sprintf("token %s has role %s; this needs %s", t.Name, t.Role, need)}})
			return
		}
		h(w, r)
	}
}
