package refunds

import (
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/provider"
)

// JobArgs are the refund job's arguments, which the tests' answers carry.
type JobArgs = args

// GroupedRecorder is the refunds' grouped recorder of final answers, whose
// groups the tests write themselves.
type GroupedRecorder = operation.RecordGrouped[args, Refund, provider.RefundOutcome]

// Answered is a refund's final answer, waiting to be recorded.
type Answered = operation.Answered[args, Refund, provider.RefundOutcome]

// NewGroupedRecorder is the grouped recorder the refunds' worker runs, on
// what the kind supplies it (attempts), with cfg.
func NewGroupedRecorder(env operation.Env, cfg operation.RecordGroupedConfig) *GroupedRecorder {
	each := operation.RecordEach[args, Refund, provider.RefundOutcome]{Pool: env.Pool, Kind: attempts(env)}
	return operation.NewRecordGrouped(each, cfg)
}
