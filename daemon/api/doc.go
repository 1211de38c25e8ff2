// Package api is FlowForge's HTTP API (`ffctl daemon api`, or `daemon all
// --api-listen ADDR`): JSON in and out under /v1, for programs in any
// language. Every route goes through core/client, the path of ffctl's own
// commands, so a request gets the CLI's validation, errors and JSON:
//
//	POST /v1/workflows/{name}/runs  operator  trigger: 201 {"run_id", "existing"}; 200 for an Idempotency-Key used before
//	GET  /v1/runs/{id}              viewer    the run and its tasks (`ffctl run show -o json`); any unique id prefix
//	GET  /v1/runs                   viewer    ?workflow=&state=&limit= (`run list`)
//	GET  /v1/runs/{id}/wait         viewer    ?timeout=30s (at most Config.WaitMax): 200 ended, 408 not yet
//	POST /v1/runs/{id}/cancel       operator  {"reason"}: audited
//	GET  /v1/tasks/{id}             viewer    the task with its history (`task show`)
//	GET  /v1/tasks/{id}/logs        viewer    ?attempt=&after_attempt=&after_seq=&limit= a page of its log (`task logs`)
//	POST /v1/tasks/{id}/requeue     operator  {"reason"}: a DEAD task back to PENDING, audited
//	GET  /v1/dead                   viewer    ?workflow=&run=&limit= (`dead list`)
//	GET  /v1/workflows              viewer    each workflow's newest version (`workflow list`)
//	PUT  /v1/workflows/{name}       admin     a workflow file, YAML or JSON (`workflow apply`)
//	POST /v1/events/{name}          operator  {"key", "payload", "id", "lookback"}: 200 {"event", "duplicate", "completed"} (`event send`)
//	GET  /v1/events                 viewer    ?name=&key=&limit= (`event list`)
//
// Sending an event needs operator, as a trigger does: it completes the
// tasks waiting for it (wait_for), which moves their runs on. Listing
// events is a read, a viewer's.
//
// docs/openapi.yaml documents them (a test holds it to Routes and checks
// every body against it). An error is always {"error": {"code",
// "message"}} (the Code constants and their statuses).
//
// A request's path through the server:
//
//	accept --(TLS when configured; ReadHeaderTimeout, ReadTimeout, IdleTimeout)
//	  |
//	source limited? --yes--> 429 + Retry-After (flowforge_api_auth_failures_total{reason="limited"})
//	  |
//	Authorization: Bearer SECRET --missing/refused--> 401, counted by reason, one failure of the source
//	  |  (Client.Authenticate reads the token's row on every request: a revoke holds at once)
//	route --none--> 404, wrong method--> 405
//	  |
//	role allows? --no--> 403
//	  |
//	body: Content-Length over the limit --> 413 before a byte is read;
//	  |   a chunked body past it --> 413 (http.MaxBytesReader); unknown field --> 400 naming it
//	core/client --> the client's error as 400/404/409/503, or the answer
//
// Mutating calls are audited with the token's name ("api:NAME") where
// ffctl's same action writes its audit (a cancel's and a requeue's
// task_events, a workflow file's schedule_events) and logged ("api:
// trigger", "api: cancel", ...). Failed authentications are paced per
// source address by a token bucket (FailedAuthBurstDefault, one more
// every FailedAuthEveryDefault), not by a delay: a source past it is
// refused before its credentials are read.
//
// Faults: the database away makes routes answer 503 "unavailable" (the
// supervisor's readiness reports it) and authentication too (a token
// cannot be checked, so nothing is served); a request in progress when
// the process stops is answered (Run waits up to WaitMax plus
// WriteTimeoutMargin) before the server closes.
package api
