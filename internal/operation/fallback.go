package operation

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// The grouped steps whose groups can fall back, as GroupFallback names
// them to its FellBack hook.
const (
	StartStep  = "start"
	RecordStep = "record"
)

// GroupFallback tells an operator of a group that could not be written
// together, its members then written each alone: one warning and one
// count per group. One now and then is a row held past the group's lock
// wait; many say rows stay held, or the database fails, and every member
// then costs a round trip or a transaction of its own.
type GroupFallback struct {
	// Kind names the kind ("refund") on the warning and to FellBack.
	Kind string
	// Logger takes the warnings; nil logs nothing.
	Logger *slog.Logger
	// FellBack, if set, is called with the step (StartStep, RecordStep)
	// and Kind once for each group that fell back (for metrics). It must
	// not block.
	FellBack func(step, kind string)
}

// report tells of one group of size members of step that fell back after
// took, with the group's error.
func (f GroupFallback) report(ctx context.Context, step string, size int, took time.Duration, err error) {
	if f.Logger != nil {
		what := "answers could not be recorded together; recording each alone"
		if step == StartStep {
			what = "attempts could not be started together; starting each alone"
		}
		f.Logger.WarnContext(ctx, "a group of "+f.Kind+" "+what,
			slog.String("kind", f.Kind), slog.String("step", step), slog.Int("group_size", size), slog.Duration("took", took),
			slog.Any("error", err), slog.String("cause", rootCause(err).Error()))
	}
	if f.FellBack != nil {
		f.FellBack(step, f.Kind)
	}
}

// rootCause is the innermost error err wraps (a PostgreSQL error and its
// SQLSTATE, most often), for grouping log lines by what went wrong.
func rootCause(err error) error {
	for {
		inner := errors.Unwrap(err)
		if inner == nil {
			return err
		}
		err = inner
	}
}
