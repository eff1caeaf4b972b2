package operation

import (
	"encoding/json"
	"fmt"

	"github.com/riverqueue/river"

	"github.com/oncepay/oncepay/internal/outbox"
)

// Args are the job arguments of a kind K, which name its operation by
// tenant and id: the engine's, so that a kind needs no type of its own.
// Its River kind is K's name, and the id's argument "id", unless K names
// them otherwise (jobNamed).
type Args[K Named] struct {
	TenantID string
	ID       string
}

// jobNamed is a kind whose job was named before the engine's Args: its
// River kind and the argument that holds its operation's id, which jobs
// already queued carry ("refund_payment", "refund_id"). Never rename
// either while jobs may be queued.
type jobNamed interface {
	Named
	Job() (kind, idArg string)
}

func jobNames[K Named]() (kind, idArg string) {
	var k K
	if named, ok := any(k).(jobNamed); ok {
		return named.Job()
	}
	return k.Name(), "id"
}

// namedJob is a kind's job arguments that also name the argument holding
// its operation's id: the engine's Args.
type namedJob interface {
	jobOf
	IDArg() string
}

// Kind is the job's River kind.
func (Args[K]) Kind() string {
	kind, _ := jobNames[K]()
	return kind
}

// IDArg is the argument that holds the operation's id.
func (Args[K]) IDArg() string {
	_, arg := jobNames[K]()
	return arg
}

// MarshalJSON writes {"tenant_id": …, "<id arg>": …}, in that order: the
// bytes River's uniqueness hashes, the same as for the jobs queued before.
func (a Args[K]) MarshalJSON() ([]byte, error) {
	tenantID, err := json.Marshal(a.TenantID)
	if err != nil {
		return nil, err
	}
	id, err := json.Marshal(a.ID)
	if err != nil {
		return nil, err
	}
	return fmt.Appendf(nil, `{"tenant_id":%s,%q:%s}`, tenantID, a.IDArg(), id), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (a *Args[K]) UnmarshalJSON(data []byte) error {
	var args map[string]string
	if err := json.Unmarshal(data, &args); err != nil {
		return fmt.Errorf("decode %s job args: %w", a.Kind(), err)
	}
	a.TenantID, a.ID = args["tenant_id"], args[a.IDArg()]
	return nil
}

// InsertOpts makes the job unique per operation while one is live, on the
// payments queue, retried as a charge is (well inside the provider's
// 24-hour key window). Finished states are left out, so an operation
// resumed under its next generation gets a new job.
func (Args[K]) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: outbox.QueuePayments, MaxAttempts: outbox.ChargeMaxAttempts,
		UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: outbox.LiveJobStates()}}
}

// Of names the job's operation.
func (a Args[K]) Of() (tenantID, id string) { return a.TenantID, a.ID }
