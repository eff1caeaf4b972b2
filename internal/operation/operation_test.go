package operation_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/operation"
)

// TestLastAttempt: only a job's last attempt hands its operation over, and
// then for any failure, a panic included, but never for River's snooze or
// cancel; a hand-over that works turns the failure into success (the job
// is done: reconciliation has the operation), one that fails keeps it.
func TestLastAttempt(t *testing.T) {
	t.Parallel()
	var reasons []string
	handOverErr := error(nil)
	last := operation.LastAttempt{Action: "charge", Operation: "payment", RecordTimeout: time.Second,
		HandOver: func(ctx context.Context, reason string) error {
			_, hasDeadline := ctx.Deadline()
			require.True(t, hasDeadline, "the hand-over is bounded")
			reasons = append(reasons, reason)
			return handOverErr
		}}
	log := slog.New(slog.DiscardHandler)
	run := func(attempt int, work func() error) error {
		return last.Run(context.Background(), &rivertype.JobRow{Attempt: attempt, MaxAttempts: 3}, log, work)
	}
	boom := errors.New("boom")

	require.ErrorIs(t, run(2, func() error { return boom }), boom, "not the last attempt: River retries")
	require.Empty(t, reasons)

	require.NoError(t, run(3, func() error { return boom }))
	require.Equal(t, []string{"the charge job's last attempt failed: boom"}, reasons)

	require.NoError(t, run(3, func() error { panic("bad state") }))
	require.Len(t, reasons, 2)
	require.Contains(t, reasons[1], "charge worker panicked: bad state")

	snooze := river.JobSnooze(time.Second)
	require.ErrorIs(t, run(3, func() error { return snooze }), snooze, "a snooze is a decision")
	require.NoError(t, run(3, func() error { return nil }))
	require.Len(t, reasons, 2)

	handOverErr = errors.New("database down")
	require.ErrorIs(t, run(3, func() error { return boom }), boom, "a failed hand-over leaves the job failed; the sweeper finds it")
}

func TestBackoffAndVerdict(t *testing.T) {
	t.Parallel()
	require.Equal(t, 15*time.Second, operation.Backoff(15*time.Second, time.Hour, 0))
	require.Equal(t, 60*time.Second, operation.Backoff(15*time.Second, time.Hour, 2))
	require.Equal(t, time.Hour, operation.Backoff(15*time.Second, time.Hour, 20))
	require.Equal(t, time.Hour, operation.Backoff(15*time.Second, time.Hour, 200), "no overflow")
	require.Equal(t, "settled", operation.ReconcileResult{Settled: 1}.Verdict())
	require.Equal(t, "not_reached", operation.ReconcileResult{NotReached: 1}.Verdict())
	require.Equal(t, "left_to_operator", operation.ReconcileResult{LeftToOperator: 1}.Verdict())
	require.Equal(t, "undetermined", operation.ReconcileResult{Failed: 1}.Verdict())
}
