package store_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core/auth"
	"github.com/flowforge/flowforge/core/store"
)

// newToken stores a token of role named name with a fresh secret and
// returns the secret.
func (f *fixture) newToken(name string, role auth.Role, expiresIn time.Duration) auth.Secret {
	f.t.Helper()
	sec, err := auth.NewSecret()
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.s.CreateToken(f.ctx, store.NewToken{Name: name, Role: role, KeyID: sec.KeyID, Hash: sec.Hash, ExpiresIn: expiresIn, Actor: "cli:alice@h"}); err != nil {
		f.t.Fatalf("create token %s: %v", name, err)
	}
	return sec
}

// TestATokenIsFoundByItsKeyIDUntilRevoked: a created token is found by its
// secret's key id with the hash (never the secret) and its role; a name
// taken is ErrConflict; a revoke records who and why, is seen by the next
// read, and a second revoke is ErrConflict naming the first.
func TestATokenIsFoundByItsKeyIDUntilRevoked(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sec := f.newToken("ci", auth.RoleOperator, 0)
	got, err := f.s.TokenByKeyID(f.ctx, sec.KeyID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "ci" || got.Role != auth.RoleOperator || got.CreatedBy != "cli:alice@h" || got.ExpiresAt != nil || got.Expired || got.RevokedAt != nil {
		t.Fatalf("token %+v", got.Token)
	}
	if !auth.Verify(sec.Text, got.Hash) {
		t.Fatal("the stored hash does not verify the secret")
	}
	var stored int
	if err := f.db.QueryRowContext(f.ctx, `SELECT count(*) FROM api_tokens t WHERE strpos(t::text, $1) > 0`, strings.TrimPrefix(sec.Text, auth.SecretPrefix+sec.KeyID)).Scan(&stored); err != nil || stored != 0 {
		t.Fatalf("the secret itself is stored (%d rows, %v)", stored, err)
	}
	other, _ := auth.NewSecret()
	if _, err := f.s.CreateToken(f.ctx, store.NewToken{Name: "ci", Role: auth.RoleViewer, KeyID: other.KeyID, Hash: other.Hash, Actor: "a"}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second token named ci: %v, want ErrConflict", err)
	}
	if _, err := f.s.TokenByKeyID(f.ctx, other.KeyID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown key id: %v, want ErrNotFound", err)
	}

	rev, err := f.s.RevokeToken(f.ctx, "ci", "cli:bob@h", "leaked in a log")
	if err != nil {
		t.Fatal(err)
	}
	if rev.RevokedAt == nil || *rev.RevokedBy != "cli:bob@h" || *rev.RevokeReason != "leaked in a log" {
		t.Fatalf("revoked token %+v", rev)
	}
	got, err = f.s.TokenByKeyID(f.ctx, sec.KeyID)
	if err != nil || got.RevokedAt == nil {
		t.Fatalf("after the revoke the read says revoked_at %v (%v)", got.RevokedAt, err)
	}
	_, err = f.s.RevokeToken(f.ctx, "ci", "cli:bob@h", "again")
	if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "revoked already") || !strings.Contains(err.Error(), "cli:bob@h") {
		t.Fatalf("second revoke: %v", err)
	}
	if _, err := f.s.RevokeToken(f.ctx, "nobody", "a", "r"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("revoke of no token: %v, want ErrNotFound", err)
	}
}

// TestATokenExpiresOnTheDatabaseClock: expires_at is the database's now()
// plus the lifetime, and Expired turns true once the database clock has
// passed it (moved here by moving expires_at back).
func TestATokenExpiresOnTheDatabaseClock(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sec := f.newToken("short", auth.RoleViewer, 90*24*time.Hour)
	got, err := f.s.TokenByKeyID(f.ctx, sec.KeyID)
	if err != nil {
		t.Fatal(err)
	}
	now, err := f.s.Now(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.ExpiresAt == nil || got.Expired || got.ExpiresAt.Sub(now) < 89*24*time.Hour || got.ExpiresAt.Sub(now) > 90*24*time.Hour {
		t.Fatalf("expires_at %v (now %v), expired %v", got.ExpiresAt, now, got.Expired)
	}
	f.sql(`UPDATE api_tokens SET expires_at = now() - interval '1 second' WHERE name = 'short'`)
	if got, err = f.s.TokenByKeyID(f.ctx, sec.KeyID); err != nil || !got.Expired {
		t.Fatalf("after expires_at passed: expired %v (%v)", got.Expired, err)
	}
	list, err := f.s.ListTokens(f.ctx)
	if err != nil || len(list) != 1 || !list[0].Expired {
		t.Fatalf("list: %+v (%v)", list, err)
	}
}

// TestCreateTokenRefusesBadInputWritingNothing: a bad name, role or
// lifetime is auth.ErrBadToken and stores nothing.
func TestCreateTokenRefusesBadInputWritingNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sec, _ := auth.NewSecret()
	cases := []store.NewToken{
		{Name: "Bad Name", Role: auth.RoleViewer},
		{Name: "ok", Role: "root"},
		{Name: "ok", Role: auth.RoleViewer, ExpiresIn: -time.Hour},
	}
	for _, c := range cases {
		c.KeyID, c.Hash, c.Actor = sec.KeyID, sec.Hash, "a"
		if _, err := f.s.CreateToken(f.ctx, c); !errors.Is(err, auth.ErrBadToken) {
			t.Errorf("CreateToken(%+v) = %v, want auth.ErrBadToken", c, err)
		}
	}
	if list, err := f.s.ListTokens(f.ctx); err != nil || len(list) != 0 {
		t.Fatalf("tokens stored: %+v (%v)", list, err)
	}
}
