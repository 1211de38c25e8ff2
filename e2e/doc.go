// Package e2e holds FlowForge's end-to-end tests: they build the real ffctl,
// start its daemons as separate processes against real PostgreSQL and
// RabbitMQ (shared ones for tests that do not break them, private instances
// from e2e/harness for those that do), break things for real, and check the
// outcome through the CLI and the database. FAILURE_MODEL.md lists every
// failure mode with the tests that prove it.
package e2e
