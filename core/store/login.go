package store

// IsLoginRefused reports whether err, from Open or a first statement,
// says that the server answered and refused this login: SQLSTATE 28P01
// (invalid_password: a wrong password), 28000
// (invalid_authorization_specification: no such role, or no pg_hba.conf
// entry admits it) or 3D000 (invalid_catalog_name: no such database).
// Retrying does not help until the configuration changes, so a daemon at
// start exits with the server's reason instead of waiting as for an
// outage. A server that does not answer (IsUnreachable) is never a
// refusal. nil: false.
func IsLoginRefused(err error) bool {
	switch pgCode(err) {
	case "28P01", "28000", "3D000":
		return true
	}
	return false
}
