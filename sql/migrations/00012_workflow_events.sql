-- Workflow events (issue 23): the audit of the actions that make a new
-- version of a workflow other than an apply of its file. The one action so
-- far is rollback (`ffctl workflow rollback NAME --to-version N --reason R`):
-- it stored `version`, a new version whose definition is that of
-- `to_version`, when `from_version` was the newest; who, when and why. Like
-- the other audits it has no foreign key: it names a workflow, and it
-- outlives whatever it describes. One row per version at most: a version is
-- created once.
--
-- An expand migration: binaries of schema 2 to 10 keep running on it (a new
-- table changes none of their statements), and this binary runs on schema 9
-- and 10 too: `workflow show` then lists no events, and `workflow rollback`
-- refuses, saying to run `ffctl migrate`. So SchemaVersionMin stays 9.
-- flowforge:compat-floor 2

-- +goose Up
CREATE TABLE workflow_events (
    id            bigserial   PRIMARY KEY,
    workflow_name text        NOT NULL,
    at            timestamptz NOT NULL DEFAULT clock_timestamp(),
    action        text        NOT NULL CHECK (action IN ('rollback')),
    -- version is the version the action created; from_version the newest
    -- before it; to_version the version whose definition it copied.
    version       integer     NOT NULL CHECK (version > 0),
    from_version  integer     NOT NULL CHECK (from_version > 0),
    to_version    integer     NOT NULL CHECK (to_version > 0),
    actor         text        NOT NULL,
    reason        text        NOT NULL,
    UNIQUE (workflow_name, version)
);
CREATE INDEX workflow_events_workflow ON workflow_events (workflow_name, id);

-- +goose Down
DROP TABLE workflow_events;
