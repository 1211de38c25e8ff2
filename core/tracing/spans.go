package tracing

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Span names, one per step of a task's path.
const (
	SpanTrigger = "flowforge.trigger" // a run created (ffctl, the API, the client)
	SpanPromote = "flowforge.promote" // the scheduler makes a task READY
	SpanPublish = "flowforge.publish" // the publisher sends one dispatch and has its confirm
	SpanClaim   = "flowforge.claim"   // a worker claims the task (from the message's arrival)
	SpanHandler = "flowforge.handler" // the handler runs
	SpanFinish  = "flowforge.finish"  // the worker records the outcome
)

// Attribute keys of every span (where the recording process knows them).
const (
	AttrRunID     = attribute.Key("flowforge.run_id")
	AttrTaskRunID = attribute.Key("flowforge.task_run_id")
	AttrTask      = attribute.Key("flowforge.task")
	AttrWorkflow  = attribute.Key("flowforge.workflow")
	AttrAttempt   = attribute.Key("flowforge.attempt")
	AttrHandler   = attribute.Key("flowforge.handler")
	// AttrClaimLost says why a claim ran nothing (stale, duplicate,
	// cancelled, paused, an error).
	AttrClaimLost = attribute.Key("flowforge.claim_lost")
	// AttrState is the state a finish recorded (SUCCEEDED, RETRYING,
	// DEAD, CANCELLED).
	AttrState = attribute.Key("flowforge.state")
	// AttrRunExisting is true on a trigger whose idempotency key named
	// an existing run: no run was created (that run keeps its own trace).
	AttrRunExisting = attribute.Key("flowforge.run_existing")
	// AttrOutboxID is a publish's outbox row (its id, the message id).
	AttrOutboxID = attribute.Key("flowforge.outbox_id")
	// AttrPublishAttempts counts a publish's tries of its row, this one
	// included.
	AttrPublishAttempts = attribute.Key("flowforge.publish_attempts")
	// AttrPublishOutcome is what the broker answered a publish (confirmed,
	// nacked, returned, timed_out, ...: broker.Outcome).
	AttrPublishOutcome = attribute.Key("flowforge.publish_outcome")
	// AttrFencingToken is the fencing token of the dispatch or the claim.
	AttrFencingToken = attribute.Key("flowforge.fencing_token")
)

// InstrumentationName is the name of FlowForge's tracers.
const InstrumentationName = "github.com/flowforge/flowforge"

// Tracer returns FlowForge's tracer of tp.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	return tp.Tracer(InstrumentationName)
}
