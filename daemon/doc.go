// Package daemon groups FlowForge's long-running processes: the scheduler
// (promotion, retries, lease reaping, run states), the publisher (outbox to
// RabbitMQ with publisher confirms) and the worker (claim, heartbeat, run,
// fenced finish), plus their health/metrics HTTP server. Each lives in its
// own sub-package with a Config, New, and Run(ctx); package supervisor runs
// one process of them (a role, or all three), and its Config's Validate,
// with each daemon Config's, is where the settings' bounds are checked
// (SettingError).
package daemon
