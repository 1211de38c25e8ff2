package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/flowforge/flowforge/core/auth"
)

// Token is one of the HTTP API's tokens as stored (api_tokens), without
// its secret, which is never stored, and its hash, which is never read but
// by TokenByKeyID. As JSON: {"name", "role", "created_at", "created_by",
// "expires_at", "expired", "revoked_at", "revoked_by", "revoke_reason"},
// the times RFC 3339 and null when unset.
type Token struct {
	Name      string    `db:"name" json:"name"`
	Role      auth.Role `db:"role" json:"role"`
	CreatedAt time.Time `db:"created_at" json:"created_at"`
	CreatedBy string    `db:"created_by" json:"created_by"`
	// ExpiresAt is nil for a token that never expires; Expired says
	// whether it has passed, on the database clock when it was read.
	ExpiresAt *time.Time `db:"expires_at" json:"expires_at"`
	Expired   bool       `db:"expired" json:"expired"`
	// RevokedAt, RevokedBy and RevokeReason are set together by
	// RevokeToken, nil before.
	RevokedAt    *time.Time `db:"revoked_at" json:"revoked_at"`
	RevokedBy    *string    `db:"revoked_by" json:"revoked_by"`
	RevokeReason *string    `db:"revoke_reason" json:"revoke_reason"`
}

// NewToken is what CreateToken stores: the name, role, key id and hash of
// a secret (auth.NewSecret), its lifetime and who made it.
type NewToken struct {
	Name  string
	Role  auth.Role
	KeyID string
	Hash  []byte
	// ExpiresIn is the token's lifetime from its creation (database
	// clock); 0 means it never expires.
	ExpiresIn time.Duration
	Actor     string
}

const tokenColumns = `name, role, created_at, created_by, expires_at, coalesce(expires_at <= now(), false) AS expired,
       revoked_at, revoked_by, revoke_reason`

const qCreateToken = `
INSERT INTO api_tokens (name, key_id, secret_hash, role, created_by, expires_at)
VALUES ($1, $2, $3, $4, $5, CASE WHEN $6::bigint > 0 THEN now() + $6::bigint * interval '1 millisecond' END)
RETURNING ` + tokenColumns

// CreateToken stores t and returns the row. Errors: one wrapping
// auth.ErrBadToken for a name, role or lifetime out of bounds (nothing
// written); ErrConflict when a token of that name exists (revoked ones
// too: a name is never reused); ErrSchemaOutdated on a database without
// api_tokens (schema 15: run `ffctl migrate`); the database's.
func (s *Store) CreateToken(ctx context.Context, t NewToken) (Token, error) {
	if err := auth.ValidateName(t.Name); err != nil {
		return Token{}, err
	}
	if _, err := auth.ParseRole(string(t.Role)); err != nil {
		return Token{}, err
	}
	if t.ExpiresIn < 0 {
		return Token{}, fmt.Errorf("%w: token %s expires in %v: want a positive lifetime, or none", auth.ErrBadToken, t.Name, t.ExpiresIn)
	}
	var out Token
	err := s.db.GetContext(ctx, &out, qCreateToken, t.Name, t.KeyID, t.Hash, string(t.Role), t.Actor, t.ExpiresIn.Milliseconds())
	switch {
	case pgCode(err) == "23505": // unique_violation: the name (or, never in practice, the key id)
		return Token{}, fmt.Errorf("token %s: a token of that name exists (names are never reused, also once revoked): %w", t.Name, ErrConflict)
	case err != nil:
		return Token{}, tokenError("create token "+t.Name, err)
	}
	return out, nil
}

// tokenError wraps err, a statement's on api_tokens (what names it), with
// ErrSchemaOutdated when the table does not exist.
func tokenError(what string, err error) error {
	if pgCode(err) == "42P01" { // undefined_table: a schema older than 15
		return fmt.Errorf("%s: %w: the database has no api_tokens (schema 15): run `ffctl migrate`", what, ErrSchemaOutdated)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// ListTokens returns every token, revoked and expired ones too, by name.
// Errors: ErrSchemaOutdated (see CreateToken), the database's.
func (s *Store) ListTokens(ctx context.Context) ([]Token, error) {
	var out []Token
	if err := s.db.SelectContext(ctx, &out, `SELECT `+tokenColumns+` FROM api_tokens ORDER BY name`); err != nil {
		return nil, tokenError("list tokens", err)
	}
	return out, nil
}

const qRevokeToken = `
UPDATE api_tokens SET revoked_at = now(), revoked_by = $2, revoke_reason = $3
 WHERE name = $1 AND revoked_at IS NULL
RETURNING ` + tokenColumns

// RevokeToken revokes the token name, recording who (actor) and why
// (reason, core.ValidateReason's bounds, checked by the caller) with the
// database's time; the API refuses it from its next request on. Errors:
// ErrNotFound for no such token; ErrConflict for one revoked already
// (naming when and by whom); ErrSchemaOutdated (see CreateToken); the
// database's.
func (s *Store) RevokeToken(ctx context.Context, name, actor, reason string) (Token, error) {
	var out Token
	err := s.db.GetContext(ctx, &out, qRevokeToken, name, actor, reason)
	if !errors.Is(err, sql.ErrNoRows) {
		if err != nil {
			return Token{}, tokenError("revoke token "+name, err)
		}
		return out, nil
	}
	err = s.db.GetContext(ctx, &out, `SELECT `+tokenColumns+` FROM api_tokens WHERE name = $1`, name)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return Token{}, fmt.Errorf("token %s: %w", name, ErrNotFound)
	case err != nil:
		return Token{}, tokenError("revoke token "+name, err)
	}
	return Token{}, fmt.Errorf("token %s was revoked already, at %s by %s: %w", name, out.RevokedAt.UTC().Format(time.RFC3339), *out.RevokedBy, ErrConflict)
}

// StoredToken is a token with its secret's hash, for the check of a
// secret (auth.Verify).
type StoredToken struct {
	Token
	Hash []byte `db:"secret_hash" json:"-"`
}

// TokenByKeyID returns the token whose secret has key id keyID (see
// auth.KeyIDOf), with its hash, whether it has expired (database clock)
// and its revocation, as they are now: nothing is cached. Errors:
// ErrNotFound when no token has it; ErrSchemaOutdated (see CreateToken);
// the database's.
func (s *Store) TokenByKeyID(ctx context.Context, keyID string) (StoredToken, error) {
	var out StoredToken
	err := s.db.GetContext(ctx, &out, `SELECT `+tokenColumns+`, secret_hash FROM api_tokens WHERE key_id = $1`, keyID)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return StoredToken{}, fmt.Errorf("token key %s: %w", keyID, ErrNotFound)
	case err != nil:
		return StoredToken{}, tokenError("read token", err)
	}
	return out, nil
}
