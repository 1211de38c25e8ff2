-- The installation's id (issue 23): one row, created with the schema, that
-- names this database's FlowForge installation. Every dispatch message
-- carries it (core.Dispatch.Installation, written by the store's
-- dispatchPayloadSQL), so a worker of another installation that shares the
-- RabbitMQ queue sends the message back to the queue instead of acking it as
-- a lost claim (e2e/FAILURE_MODEL.md, mode 89); `ffctl status` and the
-- dashboard's header show it.
--
-- The row is inserted here, so every migrated database has exactly one;
-- one_row (always true, unique) keeps it at one. gen_random_uuid() is built
-- into PostgreSQL 13 and newer (no extension), as task_runs' ids already
-- need. A dump restored elsewhere keeps its id: it is the same installation.
--
-- An expand migration: binaries of schema 2 to 10 keep running on it (they
-- never read the table, and workers ignore the message's new field), so
-- the floor stays 2. This binary's payload SQL reads the table, so
-- SchemaVersionMin is 11.
-- flowforge:compat-floor 2

-- +goose Up
CREATE TABLE installation (
    id         uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    created_at timestamptz NOT NULL DEFAULT now(),
    one_row    boolean     NOT NULL DEFAULT true UNIQUE CHECK (one_row)
);
INSERT INTO installation DEFAULT VALUES;

-- +goose Down
DROP TABLE installation;
