package outbox

import (
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
)

func TestRetryPolicyBacksOffToItsCap(t *testing.T) {
	t.Parallel()
	p := RetryPolicy{Base: time.Second, Max: time.Minute}
	within := func(attempt int, want time.Duration) {
		t.Helper()
		got := time.Until(p.NextRetry(&rivertype.JobRow{Attempt: attempt}))
		require.InDelta(t, float64(want), float64(got), float64(want)/10+float64(50*time.Millisecond), "attempt %d: %s", attempt, got)
	}
	within(1, time.Second)
	within(2, 2*time.Second)
	within(5, 16*time.Second)
	within(7, time.Minute)
	within(100, time.Minute)
}

func TestWorkerConfigRejectsRescueBeforeTimeout(t *testing.T) {
	t.Parallel()
	_, err := NewWorkerClient(nil, WorkerConfig{JobTimeout: time.Minute, RescueStuckJobsAfter: 30 * time.Second})
	require.ErrorContains(t, err, "must exceed")
}
