// Package core holds FlowForge's domain: the task and run state machines,
// the table of legal transitions, retry policy (exponential backoff with full
// jitter), DAG validation, workflow definitions, run-state derivation, the
// dispatch message (Dispatch, DecodeDispatch) and the handler contract.
//
// Nothing in this package speaks SQL or AMQP: core/store is the only package
// that speaks SQL and core/broker the only one that speaks AMQP. Everything
// here is pure and unit-tested without services.
package core
