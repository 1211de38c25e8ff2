// Package store is the only package of FlowForge that speaks SQL. It owns
// the schema's migrations (applied with goose from the embedded sql
// package), and every state transition of the task state machine, each as
// ONE conditional statement guarded by the current state and, where it
// applies, the fencing token. Losing such a race returns false, never an
// error; an illegal transition is refused in Go (core.CheckTransition)
// before any SQL runs.
//
// Every compared timestamp is produced by PostgreSQL (now()), never by the
// process clock: leases, retry due times and ages are all computed in SQL.
//
// Driver errors become this package's sentinels at its edge: ErrNotFound,
// ErrConflict, ErrSchemaOutdated, ErrSchemaTooNew.
//
// What is not SQL lives elsewhere: a schedule's fields and their checks in
// core/schedule (schedule.Validate, schedule.ValidateFile), an id prefix,
// a trigger's idempotency key, a pause mode and a run's task keys and
// rendered task params in core (core.ParseIDPrefix,
// core.ValidateIdempotencyKey, core.ParsePauseMode, core.RenderRunTasks).
// The tests of other packages build their fixtures with package storetest.
//
// # Where things are
//
// Each file of the package, what it holds, and the test files that test
// it (doc_test.go checks that the table names every file, and only files
// that exist):
//
//	file               | concern                                                         | tests
//	-------------------+-----------------------------------------------------------------+-----------------------------------------
//	admit.go           | Admit: flow control's admission (concurrency slots, rate starts) | admit_test.go, admit_export_test.go, admit_interleave_test.go, admit_plan_test.go
//	admit_runs.go      | admitRuns: run-level keys' admission and strategies               | admit_runs_test.go
//	advance.go         | Advance: the scheduler's pass (promote, fail_fast, settle)      | advance_test.go, interleave_test.go, upstream_test.go
//	cancel.go          | CancelRun                                                       | cancel_test.go, notify_test.go
//	cancelwake.go      | CancelWake: the cancel payload, encoded and decoded             | cancelwake_test.go, cancel_test.go
//	childruns.go       | a run's child runs (Run.Children), a task's (TaskDetail.ChildRun) | heldshow_test.go, heldshow_plan_test.go, heldshow_export_test.go
//	claim.go           | ClaimMany (READY -> RUNNING, fenced), ClaimedBy read-back       | claim_test.go, claim_duplicates_test.go, batch_test.go
//	dashboard.go       | the dashboard's bounded counts and oldest pending dispatches    | dashboard_test.go, dashboard_export_test.go
//	dead.go            | ListDeadTasks (`dead list`, the DEAD screen)                    | dead_test.go
//	decide.go          | the pass's decision over tasks that are not plain (rules, when)  | language_test.go
//	doc.go             | this package doc and its map                                    | doc_test.go
//	doctor.go          | Diagnose: what no daemon should leave (`ffctl doctor`)          | doctor_test.go
//	doctor_repair.go   | Repair: a finding fixed under a re-check, audited               | doctor_test.go
//	events.go          | SendEvent, ListEvents: an event recorded and delivered once     | held_test.go
//	finalstates.go     | the final run states' SQL literal, checked against core's list  | finalstates_test.go, finalstates_export_test.go
//	finish.go          | FinishMany: an attempt's outcome, the burial of descendants     | finish_test.go, batch_test.go, lease_test.go
//	finish_done.go     | a success's counter join and solo settle (finishPlain)          | join_test.go
//	finish_failed.go   | FinishMany's FAILED rows behind their run locks                 | finish_lock_test.go
//	finish_readback.go | FinishRecorded: a finish whose reply was lost, read back        | finish_readback_test.go, finish_readback_export_test.go
//	foreach.go         | a for_each's expansion, its elements' join, expression inputs   | foreach_test.go
//	handback.go        | NoteWaitingForHandler, ReadyFor (a dispatch handed back)        | pause_test.go (ReadyFor); the hand-back in daemon/worker
//	held.go            | a sleep, a wait, a child run: held RUNNING by the pass, ended   | held_test.go
//	horizon.go         | DBHealth: the xmin horizon and dead tuples of the hot tables    | horizon_test.go
//	idempotency.go     | ClaimIdempotencyKey, ForgetIdempotencyKey, ReuseNote            | idempotency_test.go, idempotency_reuse_test.go
//	idprefix.go        | ResolveID: an id prefix to one run or task id                   | idprefix_test.go, idprefix_export_test.go
//	installation.go    | Installation (the database's id, in every dispatch), LocationOf | installation_test.go, dispatch_payload_test.go
//	json.go            | JSON and StringList, the column types of reads                  | workers_test.go (StringList); every read
//	jump.go            | FindByIDPrefix: the dashboard's jump to a run or task           | jump_test.go
//	language_floor.go  | the compat floor a version using the language raises             | language_test.go
//	limits.go          | ListLimits, SetLimit, LimitEvents (`limits list`, `limits set`)  | limits_test.go
//	lease.go           | Renew, the lock waits a lease allows                            | lease_test.go, interleave_test.go
//	locktrip.go        | one statement, its local settings, one round trip (inOneTrip)  | lease_test.go, claim_test.go, hotpath_plan_test.go, hotpath_export_test.go, onetrip_test.go, onetrip_export_test.go
//	login.go           | IsLoginRefused: a refused login told from an outage             | login_test.go
//	migrate.go         | Migrate, EmbeddedMigrations, the compat floors                  | migrate_test.go, migrate_lockorder_test.go
//	migrate_retry.go   | MigrateRetrying: a migration that waits out a held lock         | migrate_retry_test.go
//	notify.go          | the NOTIFY payloads and Listener                                | notify_test.go, targeted_test.go
//	outbox.go          | LockOutbox and its batch, OutboxStatus                          | outbox_test.go, dispatch_payload_test.go
//	pause.go           | PauseWorkflow, ResumeWorkflow and their reads                   | pause_test.go
//	prune.go           | PruneRuns, PruneOutbox: the retention pruner's batches          | prune_test.go, prune_export_test.go, retention_size_test.go
//	quarantine.go      | the outbox's quarantine: list, retry, drop, history             | quarantine_test.go
//	query.go           | GetRun, GetTask, ListLeases, TaskStateOf                        | every test (fixtures_test.go reads through it); heldshow_test.go, heldshow_plan_test.go (held fields)
//	reach.go           | IsUnreachable: a lost database told from a refusal              | reach_test.go
//	reap.go            | Reap: expired leases to RETRYING or DEAD, outage refunds, the crash rule | reap_test.go, crash_suspect_test.go, lease_test.go, interleave_test.go
//	redispatch.go      | Redispatch: a READY task whose dispatch was lost, sent again    | redispatch_test.go
//	requeue.go         | RequeueMany, Requeue, RequeueTask (`dead requeue`)              | requeue_test.go, upstream_test.go
//	rerun.go           | Rerun (`run rerun`): a run repeated, audited; a run's reruns    | rerun_test.go
//	rollback.go        | RollbackWorkflow, WorkflowEvents: an old version made newest    | rollback_test.go
//	rundelete.go       | DeleteRuns (`run delete`): by id, by filter, audited            | rundelete_test.go
//	runlist.go         | ListRuns, RunFilter (`run list`): params, time window, paging   | runlist_test.go, runlist_export_test.go
//	runwake.go         | RunWake: the run wake-up payload, in Go and in SQL              | runwake_test.go, runwake_export_test.go
//	schedule.go        | Schedule and Tick, the stored schedule's types                  | schedule_test.go
//	schedule_file.go   | ApplyWorkflowFile: a definition and its schedules, one tx       | schedule_file_test.go
//	schedule_read.go   | ListSchedules, GetSchedule, Schedule.Window                     | schedule_read_test.go
//	schedule_tick.go   | FireDueTicks, TriggerScheduleNow                                | schedule_tick_test.go
//	schedule_write.go  | CreateSchedule, ApplySchedule, pause, resume, delete            | schedule_test.go, schedule_write_test.go
//	schemaprint.go     | SchemaFingerprint, its golden and SchemaDrift (doctor's drift)  | schemaprint_test.go
//	session.go         | Options' session bounds, SessionURL                             | session_test.go, session_export_test.go
//	settled.go         | SettledRun: a run a finish or a pass settled (run duration)     | settled_test.go
//	store.go           | Open, Options, the sentinels, inTx                              | store_smoke_test.go
//	suspect.go         | MarkAlone: a crash suspect's attempt runs alone                 | crash_suspect_test.go
//	stream.go          | the transition stream: on/off, status, vacuum, prune            | stream_test.go
//	streambatch.go     | LockStream, StreamMark: a publishing batch numbers its rows     | stream_test.go
//	streamseqs.go      | AssignStreamSeqs: stored numbering (a stalled mark's fallback)  | stream_test.go
//	sweep.go           | SweepCandidates: the runs a sweep must advance                  | sweep_test.go, sweep_plan_test.go, sweep_export_test.go
//	targeted.go        | AdvanceRuns: the targeted pass over named runs                  | targeted_test.go
//	tasklogs.go        | InsertTaskLogs, TaskLogs, TaskLogTail: per-task logs (task_logs) | tasklogs_test.go
//	taskgauges.go      | TaskGauges: the scrape's bounded counts of the active states    | taskgauges_plan_test.go, taskgauges_export_test.go
//	token.go           | CreateToken, ListTokens, RevokeToken, TokenByKeyID: API tokens   | token_test.go
//	traced.go          | TracedPromotion: the promotions of traced runs, for their spans  | traced_test.go
//	trigger.go         | Trigger: a run and its task runs in one statement               | trigger_test.go, trigger_cache_test.go, idempotency_test.go
//	trigger_args.go    | qTrigger's parameters: taskDefs, runKeys (keys, flow keys)      | trigger_test.go, admit_test.go, admit_runs_test.go
//	trigger_many.go    | TriggerMany, CheckRuns (a bulk trigger's batches)               | trigger_many_test.go
//	trigger_tx.go      | Querier, TriggerTx, TriggerManyTx: a trigger in a caller's tx   | trigger_tx_test.go; core/client's tests
//	upstream.go        | the SQL that buries and revives a DEAD task's descendants       | upstream_test.go
//	uuidarray.go       | uuidArray, the uuid[] parameter                                 | uuidarray_test.go
//	version.go         | SchemaWindow, CheckSchema: which binaries a schema admits       | version_test.go
//	workers.go         | RecordPresence, ListWorkers, LiveHandlers                       | workers_test.go
//	workerid.go        | ClaimWorkerID, RenewWorkerID, ReleaseWorkerID: one live process per id | workerid_test.go
//	workflow.go        | ApplyWorkflow, GetWorkflow, ListWorkflows, the definition cache | trigger_test.go, trigger_cache_test.go
//
// Test files of no one file: fixtures_test.go (the fixture every test
// builds on), export_test.go (Claim, Finish, ReapExpired: the single-task
// forms only tests use), interleave_test.go (forced interleavings of
// claim, finish, renew, reap, pass and requeue), batch_test.go (batched
// claims and finishes), store_smoke_test.go (trigger to success),
// explain_test.go (the EXPLAIN reader of the plan tests).
package store
