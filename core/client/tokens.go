package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/auth"
	"github.com/flowforge/flowforge/core/store"
)

// Token is one of the HTTP API's tokens without its secret (store.Token:
// name, role, creation, expiry, revocation), the object `ffctl token list
// -o json` prints.
type Token = store.Token

// CreatedToken is a new token and its secret, which is shown this once:
// only its hash is stored.
type CreatedToken struct {
	Token
	Secret string `json:"secret"`
}

// TokenOptions are CreateToken's: ExpiresIn, the token's lifetime (0:
// never expires), and Actor, recorded as its creator (empty: the
// Client's).
type TokenOptions struct {
	ExpiresIn time.Duration
	Actor     string
}

// CreateToken makes a token named name (auth.ValidateName) of role with a
// new secret (auth.NewSecret) and stores its hash. Errors:
// ErrInvalidInput for a bad name, role or lifetime; ErrConflict when the
// name is taken (also by a revoked token); the store's
// (store.ErrSchemaOutdated before `ffctl migrate`).
func (c *Client) CreateToken(ctx context.Context, name string, role auth.Role, opts TokenOptions) (CreatedToken, error) {
	sec, err := auth.NewSecret()
	if err != nil {
		return CreatedToken{}, err
	}
	t, err := c.s.CreateToken(ctx, store.NewToken{Name: name, Role: role, KeyID: sec.KeyID, Hash: sec.Hash,
		ExpiresIn: opts.ExpiresIn, Actor: c.actorOr(opts.Actor)})
	if err != nil {
		return CreatedToken{}, mapError(err)
	}
	return CreatedToken{Token: t, Secret: sec.Text}, nil
}

// ListTokens returns every token, revoked and expired ones too, by name.
// Errors: the store's.
func (c *Client) ListTokens(ctx context.Context) ([]Token, error) {
	ts, err := c.s.ListTokens(ctx)
	return ts, mapError(err)
}

// RevokeToken revokes the token name, audited with opts.Reason and
// opts.Actor in its row; the API refuses it from its next request on.
// Errors: ErrInvalidInput for a bad reason; ErrNotFound; ErrConflict for
// a token revoked already; the store's.
func (c *Client) RevokeToken(ctx context.Context, name string, opts ActionOptions) (Token, error) {
	if err := core.ValidateReason(opts.Reason); err != nil {
		return Token{}, mapError(err)
	}
	t, err := c.s.RevokeToken(ctx, name, c.actorOr(opts.Actor), opts.Reason)
	return t, mapError(err)
}

// ErrUnauthenticated is matched by every refusal of Authenticate: an
// *AuthError says why.
var ErrUnauthenticated = errors.New("unauthenticated")

// Why Authenticate refused a secret: AuthError.Reason, and the label of
// the API's failed-authentication metric.
const (
	AuthMalformed = "malformed" // not a secret of auth's shape
	AuthUnknown   = "unknown"   // no token has its key id, or the hash differs
	AuthRevoked   = "revoked"
	AuthExpired   = "expired"
)

// AuthError is Authenticate's refusal of a secret: Reason is one of
// AuthMalformed, AuthUnknown, AuthRevoked and AuthExpired. It matches
// ErrUnauthenticated.
type AuthError struct {
	Reason string
}

func (e *AuthError) Error() string {
	switch e.Reason {
	case AuthRevoked:
		return "the token was revoked"
	case AuthExpired:
		return "the token has expired"
	case AuthMalformed:
		return auth.ErrMalformedSecret.Error()
	}
	return "no such token"
}

// Is makes an *AuthError match ErrUnauthenticated.
func (e *AuthError) Is(target error) bool { return target == ErrUnauthenticated }

// Authenticate returns the token whose secret is secret, read from the
// database on every call (nothing is cached, so a revoke or an expiry
// holds from the next call on): its shape is checked first (no read for a
// malformed one), then its row is found by key id and its hash compared in
// constant time. Errors: an *AuthError (ErrUnauthenticated) for a secret
// that is malformed, unknown, revoked or expired; the store's (the
// database unreachable, or store.ErrSchemaOutdated).
func (c *Client) Authenticate(ctx context.Context, secret string) (Token, error) {
	keyID, err := auth.KeyIDOf(secret)
	if err != nil {
		return Token{}, &AuthError{Reason: AuthMalformed}
	}
	t, err := c.s.TokenByKeyID(ctx, keyID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		auth.Verify(secret, nil) // the same work as a known key id's
		return Token{}, &AuthError{Reason: AuthUnknown}
	case err != nil:
		return Token{}, fmt.Errorf("authenticate: %w", mapError(err))
	case !auth.Verify(secret, t.Hash):
		return Token{}, &AuthError{Reason: AuthUnknown}
	case t.RevokedAt != nil:
		return Token{}, &AuthError{Reason: AuthRevoked}
	case t.Expired:
		return Token{}, &AuthError{Reason: AuthExpired}
	}
	return t.Token, nil
}
