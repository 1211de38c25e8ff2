// Package auth holds what the HTTP API's tokens are, apart from where they
// are stored: a token's name, its role, its secret and the secret's hash.
//
// A secret is SecretPrefix, a key id of KeyIDBytes random bytes in hex, an
// underscore and SecretBytes random bytes in base64url (crypto/rand):
//
//	ffk_3f1f8e2b7a10c4d5_KIkJS7NGrnBB5WINhXbhKh3b...   (64 characters)
//
// The key id names the token's row without being secret (the store looks
// the row up by it); the hash of the whole secret (SHA-256: the secret has
// 256 bits of randomness, so a slow hash adds nothing) is all that is
// stored, and Verify compares it in constant time. The prefix makes a
// leaked secret recognisable to secret scanners and to a reader.
//
// Roles are ordered: RoleViewer reads, RoleOperator also triggers, cancels,
// requeues and sends events, RoleAdmin also applies workflows
// (Role.Allows).
package auth
