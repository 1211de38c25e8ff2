-- The HTTP API's tokens (issue 25): `ffctl token create NAME --role R`
-- makes one and prints its secret once; only the secret's SHA-256 is
-- stored (secret_hash), found by its key id, the part of the secret that is
-- not secret (core/auth). A token is never deleted: `ffctl token revoke`
-- stamps revoked_at with who and why, so the row is its own audit, and a
-- name is never reused (the audit names one token). expires_at NULL: never.
-- The API reads the row on every request, so a revoke or an expiry holds
-- from the next request on.
--
-- An expand migration: a new table no older binary reads. This binary runs
-- on schema 14 too (SchemaVersionMin stays 14): there `ffctl token ...` and
-- `ffctl daemon api` say to run `ffctl migrate`.
-- flowforge:compat-floor 2

-- +goose Up
CREATE TABLE api_tokens (
    name          text        PRIMARY KEY,
    key_id        text        NOT NULL UNIQUE,
    secret_hash   bytea       NOT NULL CHECK (length(secret_hash) = 32),
    role          text        NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    created_by    text        NOT NULL,
    expires_at    timestamptz,
    revoked_at    timestamptz,
    revoked_by    text,
    revoke_reason text,
    CHECK ((revoked_at IS NULL) = (revoked_by IS NULL) AND (revoked_at IS NULL) = (revoke_reason IS NULL))
);

-- +goose Down
DROP TABLE api_tokens;
