package client_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core/auth"
	"github.com/flowforge/flowforge/core/client"
)

// authReason is Authenticate's refusal reason of err ("" for none).
func authReason(err error) string {
	var ae *client.AuthError
	if errors.As(err, &ae) && errors.Is(err, client.ErrUnauthenticated) {
		return ae.Reason
	}
	return ""
}

// TestAuthenticateSaysWhyItRefusesATokenAndARevokeHoldsAtOnce: the secret
// CreateToken printed authenticates as its token; a malformed secret, an
// unknown one, a known key id with another secret, an expired token and a
// revoked one are each refused with their reason; the call right after a
// revoke refuses it (nothing is cached).
func TestAuthenticateSaysWhyItRefusesATokenAndARevokeHoldsAtOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ci, err := f.c.CreateToken(f.ctx, "ci", auth.RoleOperator, client.TokenOptions{ExpiresIn: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if ci.CreatedBy != "test" || ci.ExpiresAt == nil || !strings.HasPrefix(ci.Secret, auth.SecretPrefix) {
		t.Fatalf("created %+v", ci)
	}
	got, err := f.c.Authenticate(f.ctx, ci.Secret)
	if err != nil || got.Name != "ci" || got.Role != auth.RoleOperator {
		t.Fatalf("Authenticate = %+v, %v", got, err)
	}
	old, err := f.c.CreateToken(f.ctx, "old", auth.RoleViewer, client.TokenOptions{ExpiresIn: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	f.exec(`UPDATE api_tokens SET expires_at = now() - interval '1 second' WHERE name = 'old'`)
	stranger, _ := auth.NewSecret()
	keyID, _ := auth.KeyIDOf(ci.Secret)
	forged, _ := auth.NewSecret()
	forgedText := auth.SecretPrefix + keyID + forged.Text[len(auth.SecretPrefix)+len(keyID):]
	cases := []struct{ name, secret, want string }{
		{"malformed", "hunter2", client.AuthMalformed},
		{"unknown", stranger.Text, client.AuthUnknown},
		{"another secret of a known key id", forgedText, client.AuthUnknown},
		{"expired", old.Secret, client.AuthExpired},
	}
	for _, c := range cases {
		if _, err := f.c.Authenticate(f.ctx, c.secret); authReason(err) != c.want {
			t.Errorf("%s: Authenticate = %v, want refused as %s", c.name, err, c.want)
		}
	}
	if _, err := f.c.RevokeToken(f.ctx, "ci", client.ActionOptions{Reason: "rotated"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.Authenticate(f.ctx, ci.Secret); authReason(err) != client.AuthRevoked {
		t.Fatalf("right after the revoke: %v, want refused as revoked", err)
	}
	list, err := f.c.ListTokens(f.ctx)
	if err != nil || len(list) != 2 || list[0].Name != "ci" || *list[0].RevokedBy != "test" || *list[0].RevokeReason != "rotated" {
		t.Fatalf("list %+v, %v", list, err)
	}
}

// TestTokenCallsRefuseBadInputWithTheClientsErrors: a bad name, role or
// lifetime and a reason that is missing are ErrInvalidInput; a name taken
// is ErrConflict; a revoke of no token is ErrNotFound, of a revoked one
// ErrConflict.
func TestTokenCallsRefuseBadInputWithTheClientsErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if _, err := f.c.CreateToken(f.ctx, "ci", auth.RoleAdmin, client.TokenOptions{}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"bad name", second(f.c.CreateToken(f.ctx, "CI", auth.RoleViewer, client.TokenOptions{})), client.ErrInvalidInput},
		{"bad role", second(f.c.CreateToken(f.ctx, "x", "root", client.TokenOptions{})), client.ErrInvalidInput},
		{"negative lifetime", second(f.c.CreateToken(f.ctx, "x", auth.RoleViewer, client.TokenOptions{ExpiresIn: -time.Second})), client.ErrInvalidInput},
		{"name taken", second(f.c.CreateToken(f.ctx, "ci", auth.RoleViewer, client.TokenOptions{})), client.ErrConflict},
		{"no reason", second(f.c.RevokeToken(f.ctx, "ci", client.ActionOptions{})), client.ErrInvalidInput},
		{"no such token", second(f.c.RevokeToken(f.ctx, "nobody", client.ActionOptions{Reason: "r"})), client.ErrNotFound},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	if _, err := f.c.RevokeToken(f.ctx, "ci", client.ActionOptions{Reason: "r"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.RevokeToken(f.ctx, "ci", client.ActionOptions{Reason: "r"}); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("second revoke: %v, want ErrConflict", err)
	}
}

// second is the error of a call's two results.
func second[T any](_ T, err error) error { return err }
