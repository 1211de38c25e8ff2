package auth_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core/auth"
)

// TestANewSecretIsRecognisedAndVerified: a new secret has the prefix, its
// key id and its hash; Verify takes it and refuses any other text; two
// secrets differ.
func TestANewSecretIsRecognisedAndVerified(t *testing.T) {
	t.Parallel()
	s, err := auth.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.Text, auth.SecretPrefix+s.KeyID+"_") || len(s.Text) != 64 {
		t.Fatalf("secret %q (%d characters), key id %q", s.Text, len(s.Text), s.KeyID)
	}
	id, err := auth.KeyIDOf(s.Text)
	if err != nil || id != s.KeyID {
		t.Fatalf("KeyIDOf = %q, %v; want %q", id, err, s.KeyID)
	}
	if !auth.Verify(s.Text, s.Hash) {
		t.Fatal("Verify refuses the secret it was made with")
	}
	other, err := auth.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	if other.Text == s.Text || other.KeyID == s.KeyID || auth.Verify(other.Text, s.Hash) {
		t.Fatal("two secrets are alike, or one verifies against the other's hash")
	}
}

// TestKeyIDOfRefusesWhatIsNotASecret: every text not of NewSecret's shape
// is ErrMalformedSecret, before anything is read.
func TestKeyIDOfRefusesWhatIsNotASecret(t *testing.T) {
	t.Parallel()
	s, err := auth.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimPrefix(s.Text, auth.SecretPrefix+s.KeyID+"_")
	cases := map[string]string{
		"empty":              "",
		"no prefix":          strings.TrimPrefix(s.Text, auth.SecretPrefix),
		"other prefix":       "ghp_" + strings.TrimPrefix(s.Text, auth.SecretPrefix),
		"one character more": s.Text + "A",
		"one character less": s.Text[:len(s.Text)-1],
		"upper-case key id":  auth.SecretPrefix + strings.ToUpper(s.KeyID) + "_" + key,
		"key id not hex":     auth.SecretPrefix + "zz" + s.KeyID[2:] + "_" + key,
		"no underscore":      auth.SecretPrefix + s.KeyID + "-" + key,
		"not base64url":      auth.SecretPrefix + s.KeyID + "_" + "+" + key[1:],
		"NUL":                auth.SecretPrefix + s.KeyID + "_" + "\x00" + key[1:],
	}
	for name, text := range cases {
		if _, err := auth.KeyIDOf(text); !errors.Is(err, auth.ErrMalformedSecret) {
			t.Errorf("%s: KeyIDOf(%q) = %v, want ErrMalformedSecret", name, text, err)
		}
	}
}

// TestRolesAreOrdered: each role allows itself and the roles before it,
// never one after it; an unknown role allows nothing.
func TestRolesAreOrdered(t *testing.T) {
	t.Parallel()
	cases := []struct {
		have, need auth.Role
		want       bool
	}{
		{auth.RoleViewer, auth.RoleViewer, true},
		{auth.RoleViewer, auth.RoleOperator, false},
		{auth.RoleViewer, auth.RoleAdmin, false},
		{auth.RoleOperator, auth.RoleViewer, true},
		{auth.RoleOperator, auth.RoleOperator, true},
		{auth.RoleOperator, auth.RoleAdmin, false},
		{auth.RoleAdmin, auth.RoleViewer, true},
		{auth.RoleAdmin, auth.RoleAdmin, true},
		{"root", auth.RoleViewer, false},
		{"", auth.RoleViewer, false},
	}
	for _, c := range cases {
		if got := c.have.Allows(c.need); got != c.want {
			t.Errorf("%q.Allows(%q) = %v, want %v", c.have, c.need, got, c.want)
		}
	}
	for _, r := range auth.Roles() {
		if got, err := auth.ParseRole(string(r)); err != nil || got != r {
			t.Errorf("ParseRole(%q) = %q, %v", r, got, err)
		}
	}
	if _, err := auth.ParseRole("Admin"); !errors.Is(err, auth.ErrBadToken) {
		t.Errorf("ParseRole(Admin) = %v, want ErrBadToken", err)
	}
}

// TestValidateNameTakesWorkflowLikeNames: names are spelt as workflow
// names; the rest is ErrBadToken naming why.
func TestValidateNameTakesWorkflowLikeNames(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, want string }{
		{"ci", ""},
		{"billing-service.prod_2", ""},
		{strings.Repeat("a", auth.MaxNameLength), ""},
		{"", "missing"},
		{strings.Repeat("a", auth.MaxNameLength+1), "longer than 64"},
		{"CI", "must match"},
		{"-ci", "must match"},
		{"c i", "must match"},
	}
	for _, c := range cases {
		err := auth.ValidateName(c.name)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("ValidateName(%q) = %v", c.name, err)
		case c.want != "" && (!errors.Is(err, auth.ErrBadToken) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("ValidateName(%q) = %v, want ErrBadToken naming %q", c.name, err, c.want)
		}
	}
}
