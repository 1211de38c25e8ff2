// Package sql embeds FlowForge's schema migrations (goose format). It holds
// nothing executable: core/store applies the files with goose.
package sql

import "embed"

// Migrations holds migrations/*.sql, numbered 00001_name.sql upward. Each
// file has a "-- +goose Up" and a "-- +goose Down" section and a
// "-- flowforge:compat-floor N" line: the oldest binary schema version that
// still runs on the schema once the file is applied. Migrations are
// expand-then-contract: an expand migration keeps the previous floor, a
// contract migration raises it (migrations/README.md).
//
//go:embed migrations/*.sql
var Migrations embed.FS

// Dir is the directory inside Migrations that holds the files.
const Dir = "migrations"
