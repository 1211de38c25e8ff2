package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// The shape of a secret (see the package doc).
const (
	// SecretPrefix begins every secret.
	SecretPrefix = "ffk_"
	// KeyIDBytes is the length of the key id in bytes (twice as many hex
	// digits).
	KeyIDBytes = 8
	// SecretBytes is the randomness of the secret part, in bytes.
	SecretBytes = 32
)

// secretLen is the length of a secret in characters.
var secretLen = len(SecretPrefix) + 2*KeyIDBytes + 1 + base64.RawURLEncoding.EncodedLen(SecretBytes)

// ErrMalformedSecret: the text is not a secret of this package's shape
// (NewSecret's), so no token can have it.
var ErrMalformedSecret = errors.New("malformed token: want ffk_ followed by a key id and a secret, as ffctl token create prints it")

// Secret is a new token's secret (Text, shown once) with what is stored of
// it: KeyID and Hash.
type Secret struct {
	Text  string
	KeyID string
	Hash  []byte
}

// NewSecret returns a new random secret from crypto/rand. Errors: the
// system's source of randomness failed.
func NewSecret() (Secret, error) {
	id := make([]byte, KeyIDBytes)
	key := make([]byte, SecretBytes)
	if _, err := rand.Read(id); err != nil {
		return Secret{}, fmt.Errorf("new token secret: %w", err)
	}
	if _, err := rand.Read(key); err != nil {
		return Secret{}, fmt.Errorf("new token secret: %w", err)
	}
	keyID := hex.EncodeToString(id)
	text := SecretPrefix + keyID + "_" + base64.RawURLEncoding.EncodeToString(key)
	return Secret{Text: text, KeyID: keyID, Hash: Hash(text)}, nil
}

// KeyIDOf returns the key id of text, a secret as NewSecret makes them,
// after checking its whole shape (it reads nothing). Errors:
// ErrMalformedSecret.
func KeyIDOf(text string) (string, error) {
	rest, ok := strings.CutPrefix(text, SecretPrefix)
	if !ok || len(text) != secretLen {
		return "", ErrMalformedSecret
	}
	keyID, key, ok := strings.Cut(rest, "_")
	if !ok || len(keyID) != 2*KeyIDBytes || strings.ToLower(keyID) != keyID {
		return "", ErrMalformedSecret
	}
	if _, err := hex.DecodeString(keyID); err != nil {
		return "", ErrMalformedSecret
	}
	if b, err := base64.RawURLEncoding.Strict().DecodeString(key); err != nil || len(b) != SecretBytes {
		return "", ErrMalformedSecret
	}
	return keyID, nil
}

// Hash is what is stored of a secret: its SHA-256.
func Hash(text string) []byte {
	h := sha256.Sum256([]byte(text))
	return h[:]
}

// Verify reports whether text is the secret whose Hash is hash, comparing
// the hashes in constant time.
func Verify(text string, hash []byte) bool {
	return subtle.ConstantTimeCompare(Hash(text), hash) == 1
}
