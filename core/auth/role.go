package auth

import (
	"errors"
	"fmt"
	"regexp"
)

// Role is what a token may do. Each role may do what the roles before it
// in Roles may.
type Role string

// The roles, least first.
const (
	// RoleViewer reads runs, tasks, DEAD tasks, workflows and events.
	RoleViewer Role = "viewer"
	// RoleOperator also triggers runs, cancels them, requeues DEAD tasks
	// and sends events (an event completes the tasks waiting for it, which
	// moves their runs on as a trigger does).
	RoleOperator Role = "operator"
	// RoleAdmin also applies workflow files.
	RoleAdmin Role = "admin"
)

// Roles returns every role, least first.
func Roles() []Role { return []Role{RoleViewer, RoleOperator, RoleAdmin} }

// rank is r's place in Roles, -1 for an unknown role.
func (r Role) rank() int {
	for i, x := range Roles() {
		if x == r {
			return i
		}
	}
	return -1
}

// Valid reports whether r is one of Roles.
func (r Role) Valid() bool { return r.rank() >= 0 }

// Allows reports whether a token of role r may do what needs role need: r
// is need or comes after it in Roles. An unknown r allows nothing.
func (r Role) Allows(need Role) bool { return r.Valid() && r.rank() >= need.rank() }

// ErrBadToken is wrapped by the refusals of a token's name, role or expiry
// given to create one.
var ErrBadToken = errors.New("invalid token")

// ParseRole returns the role s names. Errors (ErrBadToken): any other text.
func ParseRole(s string) (Role, error) {
	r := Role(s)
	if !r.Valid() {
		return "", fmt.Errorf("%w: role %q: want viewer, operator or admin", ErrBadToken, s)
	}
	return r, nil
}

// MaxNameLength bounds a token's name.
const MaxNameLength = 64

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

// ValidateName checks a token's name: [a-z0-9][a-z0-9._-]*, at most
// MaxNameLength characters, as workflow names are spelt. Errors wrap
// ErrBadToken.
func ValidateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: the token name is missing", ErrBadToken)
	case len(name) > MaxNameLength:
		return fmt.Errorf("%w: token name %q is longer than %d characters", ErrBadToken, name, MaxNameLength)
	case !nameRE.MatchString(name):
		return fmt.Errorf("%w: token name %q must match [a-z0-9][a-z0-9._-]*", ErrBadToken, name)
	}
	return nil
}

// Actor is the audit name of the API's calls made with the token name:
// "api:NAME" (ActorAnonymous without authentication).
func Actor(name string) string { return "api:" + name }

// ActorAnonymous is the audit name of the API's calls when it runs with
// --insecure-no-auth.
const ActorAnonymous = "api:anonymous"
