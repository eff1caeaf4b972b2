package operation

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// Job is one River job of an operation, with the errors of its attempts,
// as an operator sees it.
type Job struct {
	ID          int64      `db:"id" json:"id"`
	Kind        string     `db:"kind" json:"kind"`
	State       string     `db:"state" json:"state"`
	Attempt     int        `db:"attempt" json:"attempt"`
	MaxAttempts int        `db:"max_attempts" json:"max_attempts"`
	CreatedAt   time.Time  `db:"created_at" json:"created_at"`
	ScheduledAt time.Time  `db:"scheduled_at" json:"scheduled_at"`
	AttemptedAt *time.Time `db:"attempted_at" json:"attempted_at"`
	FinalizedAt *time.Time `db:"finalized_at" json:"finalized_at"`
	Errors      []jobError `db:"errors" json:"errors"`
	// Failed are the times of its failed attempts, as the engine's worker
	// noted them (none for another worker's job): by the database's clock,
	// which River's errors are not dated by.
	Failed []FailedAttempt `db:"failed_attempts" json:"failed_attempts,omitempty"`
}

// jobError is one failed attempt of a job, as River recorded it.
type jobError struct {
	At      time.Time `json:"at"`
	Attempt int       `json:"attempt"`
	Error   string    `json:"error"`
}

// JobsOf reads the jobs of operations, oldest first, each operation named
// by its own job arguments (a kind's args name its operation: tenant and
// id): a job is one of them when it is of the args' kind and its arguments
// hold theirs. Nobody outside the kind needs to know how its arguments
// name the operation. It reads River's own table, for the operator.
func JobsOf(ctx context.Context, db Querier, of ...river.JobArgs) ([]Job, error) {
	if len(of) == 0 {
		return nil, nil
	}
	var conds []string
	var params []any
	for _, args := range of {
		encoded, err := json.Marshal(args)
		if err != nil {
			return nil, fmt.Errorf("encode %s job args: %w", args.Kind(), err)
		}
		conds = append(conds, fmt.Sprintf("(kind = $%d AND args @> $%d::jsonb)", len(params)+1, len(params)+2))
		params = append(params, args.Kind(), string(encoded))
	}
	rows, err := db.Query(ctx, `
		SELECT id, kind, state::text AS state, attempt, max_attempts, created_at, scheduled_at, attempted_at, finalized_at,
			coalesce(to_jsonb(errors), '[]') AS errors, coalesce(metadata->'`+failedAttemptsKey+`', '[]') AS failed_attempts
		FROM river_job WHERE `+strings.Join(conds, " OR ")+` ORDER BY id`, params...)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, pgx.RowToStructByName[Job])
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return jobs, nil
}
