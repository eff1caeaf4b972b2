package operation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// lastAttempt is how a worker's job hands its operation over when the job
// can run no more.
type lastAttempt struct {
	// Action names the worker's call ("charge", "refund") and Operation
	// what it acts on ("payment", "refund"), for logs and the reason shown.
	Action, Operation string
	// RecordTimeout bounds the hand-over, which runs after the attempt's
	// own deadline may have passed.
	RecordTimeout time.Duration
	// HandOver moves the operation to requires_reconciliation and its key
	// to unknown, with reason.
	HandOver func(ctx context.Context, reason string) error
}

// Run runs one attempt of job. On the job's last attempt every failure (a
// database error while recording, a panic, not only a provider error)
// hands the operation to reconciliation: River discards a job whose last
// attempt fails, and a discarded job would leave its operation in flight
// with nothing looking at it again but the sweeper. River's snooze and
// cancel are decisions, not failures, and pass through.
func (l lastAttempt) Run(ctx context.Context, job *rivertype.JobRow, log *slog.Logger, attempt func() error) (err error) {
	if job.Attempt < job.MaxAttempts {
		return attempt()
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s worker panicked: %v", l.Action, r)
			log.ErrorContext(ctx, l.Action+" worker panicked", slog.Any("panic", r), slog.String("stack", string(debug.Stack())))
		}
		if err == nil || isJobControl(err) {
			return
		}
		log.ErrorContext(ctx, "last "+l.Action+" attempt failed; handing the "+l.Operation+" to reconciliation", slog.Any("error", err))
		recordCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.RecordTimeout)
		defer cancel()
		if herr := l.HandOver(recordCtx, "the "+l.Action+" job's last attempt failed: "+err.Error()); herr != nil {
			// The sweeper finds the operation once River discards the job.
			log.ErrorContext(ctx, "could not hand the "+l.Operation+" to reconciliation", slog.Any("error", herr))
			return
		}
		err = nil
	}()
	return attempt()
}

// isJobControl reports whether err is River's snooze or cancel, which are
// decisions, not failures.
func isJobControl(err error) bool {
	var snooze *river.JobSnoozeError
	var cancel *river.JobCancelError
	return errors.As(err, &snooze) || errors.As(err, &cancel)
}
