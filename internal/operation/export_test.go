package operation

// Names the engine keeps to itself, for its tests.
type (
	LastAttempt = lastAttempt
	SentClock   = attemptClock
)

var Backoff = backoff
