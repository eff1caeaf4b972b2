package operation

import (
	"cmp"
	"time"
)

// WorkerConfig tunes the engine's Worker, the same for every kind. Zero
// values take the defaults.
type WorkerConfig struct {
	// JobTimeout bounds one provider attempt. Defaults to 30s; at most
	// MaxJobTimeout.
	JobTimeout time.Duration
	// ProviderKeyMargin is the age of an operation's first provider attempt
	// after which the provider is no longer called for it: the provider
	// forgets idempotency keys after 24 hours, and a call after that could
	// act a second time. Such operations go to reconciliation. Defaults to
	// 23h.
	ProviderKeyMargin time.Duration
	// PollInterval is how long the job waits before reading again a
	// provider object that is pending (processing, or waiting for the
	// customer). Defaults to 2s.
	PollInterval time.Duration
	// MaxPollDuration bounds polling, counted from the first provider
	// attempt; past it the operation goes to reconciliation. Defaults to 1h.
	MaxPollDuration time.Duration
	// RecordTimeout bounds the writes that record a provider answer. They
	// run after the job's own deadline when the provider call used it up,
	// and once more on a last attempt whose recording failed (to hand the
	// operation to reconciliation). Defaults to 10s.
	RecordTimeout time.Duration
	// Ungrouped turns the grouped starts and records off: every attempt
	// is started and recorded alone (StartEach, RecordEach), in round
	// trips of its own.
	Ungrouped bool
}

// WithDefaults returns the configuration with zero values defaulted.
func (c WorkerConfig) WithDefaults() WorkerConfig {
	c.JobTimeout = cmp.Or(c.JobTimeout, 30*time.Second)
	c.ProviderKeyMargin = cmp.Or(c.ProviderKeyMargin, 23*time.Hour)
	c.PollInterval = cmp.Or(c.PollInterval, 2*time.Second)
	c.MaxPollDuration = cmp.Or(c.MaxPollDuration, time.Hour)
	c.RecordTimeout = cmp.Or(c.RecordTimeout, 10*time.Second)
	return c
}

// MaxAttemptDuration is how long one attempt can run, recording included:
// River must not rescue a job as stuck before then, or two attempts of one
// job would run at once.
func (c WorkerConfig) MaxAttemptDuration() time.Duration {
	c = c.WithDefaults()
	return c.JobTimeout + 2*c.RecordTimeout
}

// ProviderCallTimeout bounds one provider call: the job timeout less a
// fifth (at most 5s) left for recording the answer.
func (c WorkerConfig) ProviderCallTimeout() time.Duration {
	c = c.WithDefaults()
	return c.JobTimeout - min(c.JobTimeout/5, 5*time.Second)
}

// timings are the worker's clocks taken from c, defaults applied.
func (c WorkerConfig) timings() timings {
	c = c.WithDefaults()
	return timings{JobTimeout: c.JobTimeout, CallTimeout: c.ProviderCallTimeout(), RecordTimeout: c.RecordTimeout,
		KeyMargin: c.ProviderKeyMargin, PollInterval: c.PollInterval, MaxPollDuration: c.MaxPollDuration}
}
