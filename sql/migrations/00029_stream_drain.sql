-- Where the rows left in the transition stream go once it is turned off.
-- `ffctl events off` (store.DisableStream) deleted the setting row and
-- with it the exchange: only a publisher started with --events-exchange
-- published the rows written before, to its own flag, and with every
-- publisher's flag removed first (the procedure docs/operating.md gave)
-- they were never published at all (a new user's trial: 1,000 rows left,
-- the stream's age rising, nothing logged). transition_stream_drain keeps
-- the exchange the stream went to when it was turned off, written in the
-- statement that deletes the setting; every publisher, with the flag or
-- without it, publishes the rows left there while the stream is off.
--
-- Expand: a new table; older binaries never read it (their publishers
-- keep their old rule for the rows left, their flag).
-- flowforge:compat-floor 2

-- +goose Up
CREATE TABLE transition_stream_drain (
    one_row    bool        PRIMARY KEY DEFAULT true CHECK (one_row),
    exchange   text        NOT NULL CHECK (exchange <> ''),
    off_at     timestamptz NOT NULL DEFAULT now(),
    off_by     text        NOT NULL
);

-- +goose Down
DROP TABLE transition_stream_drain;
