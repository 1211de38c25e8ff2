-- The transition stream's pages keep half their room for the seq (issue
-- 28's overhead). A stream row is written once by its transition's
-- trigger, updated once when the publisher numbers it
-- (store.AssignStreamSeqs), and deleted once the broker confirms it. The
-- update is HOT only when the new version fits on the row's own page: on
-- pages the inserts had filled, most did not, so PostgreSQL wrote the
-- whole row again on another page and a new primary-key entry for it (W2
-- with the stream: 3 of a run's 5 numberings, 8,700 WAL bytes a run against
-- 5,200 without the stream). With fillfactor 50 the inserts leave each
-- page half empty and every numbering fits beside its row (7,900 bytes a
-- run). The table holds only the backlog, so doubling its pages costs
-- little.
--
-- Expand: a storage parameter; ALTER TABLE ... SET (fillfactor) takes
-- SHARE UPDATE EXCLUSIVE, which the triggers' inserts do not wait for.
-- It applies to pages filled from now on.
-- flowforge:compat-floor 2

-- +goose Up
ALTER TABLE transition_stream SET (fillfactor = 50);

-- +goose Down
ALTER TABLE transition_stream RESET (fillfactor);
