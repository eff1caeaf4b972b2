package operation

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// failedAttemptsKey is the job metadata key under which the engine's
// worker keeps its failed attempts' times (FailedAttempt).
const failedAttemptsKey = "oncepay_failed_attempts"

// FailedAttempt is when one failed attempt of a job began and ended, by
// the database's clock: the clock that stamps the provider calls. River
// dates an attempt's error by the worker's clock at the attempt's start,
// so a failure read from it sorts before the call that failed (and, with
// a worker's clock ahead of the database's, after the next one).
type FailedAttempt struct {
	Attempt   int       `json:"attempt"`
	StartedAt time.Time `json:"started_at"`
	FailedAt  time.Time `json:"failed_at"`
}

// dbClock reads the database's clock during an attempt without asking
// it again: a moment it stamped, plus the time the worker measured since
// (its monotonic clock, unmoved by any wall clock's difference).
type dbClock struct {
	stamp time.Time
	read  time.Time
}

// now is the database's time now, by the latest stamp.
func (c dbClock) now() time.Time { return c.stamp.Add(time.Since(c.read)) }

// noteFailedAttempt keeps in job's metadata when its attempt began (River's
// attempted_at, the database's) and failed (clock.now()), beside the
// earlier attempts' notes, which River merges in as it records the error.
func noteFailedAttempt(ctx context.Context, job *rivertype.JobRow, clock dbClock) error {
	failed, err := failedAttempts(job.Metadata)
	if err != nil {
		return err
	}
	started := clock.stamp
	if job.AttemptedAt != nil {
		started = *job.AttemptedAt
	}
	failed = append(failed, FailedAttempt{Attempt: job.Attempt, StartedAt: started.UTC(), FailedAt: clock.now().UTC()})
	return river.MetadataSet(ctx, failedAttemptsKey, failed)
}

// failedAttempts reads the failed attempts noted in a job's metadata; none
// for a job of another worker, or noted before the engine kept them.
func failedAttempts(metadata []byte) ([]FailedAttempt, error) {
	var meta map[string]json.RawMessage
	if len(metadata) == 0 {
		return nil, nil
	}
	if err := json.Unmarshal(metadata, &meta); err != nil {
		return nil, fmt.Errorf("read job metadata: %w", err)
	}
	var failed []FailedAttempt
	if raw, ok := meta[failedAttemptsKey]; ok {
		if err := json.Unmarshal(raw, &failed); err != nil {
			return nil, fmt.Errorf("read job metadata %s: %w", failedAttemptsKey, err)
		}
	}
	return failed, nil
}
