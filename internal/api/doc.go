// Package api assembles the HTTP API: one routes function that shows every
// endpoint, the middleware around them, health checks and the documentation
// pages that problem types and the idempotency policy link to.
package api
