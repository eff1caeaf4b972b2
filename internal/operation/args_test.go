package operation_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/operation"
)

type plainKind struct{}

func (plainKind) Name() string { return "payout" }

type renamedKind struct{}

func (renamedKind) Name() string              { return "refund" }
func (renamedKind) Job() (kind, idArg string) { return "refund_payment", "refund_id" }

// TestArgsAreTheQueuedJobsBytes: the engine's job arguments encode to the
// bytes the kinds' own types encoded to before it, so that River's
// uniqueness, which hashes them, still sees the jobs queued before an
// upgrade, and those jobs decode into the engine's.
func TestArgsAreTheQueuedJobsBytes(t *testing.T) {
	tenantID := `ten_<"quoted"> & more` // what JSON escapes, escaped alike
	before, err := json.Marshal(struct {
		TenantID string `json:"tenant_id"`
		RefundID string `json:"refund_id"`
	}{tenantID, "rfd_01"})
	require.NoError(t, err)
	renamed := operation.Args[renamedKind]{TenantID: tenantID, ID: "rfd_01"}
	encoded, err := json.Marshal(renamed)
	require.NoError(t, err)
	require.Equal(t, string(before), string(encoded))
	require.Equal(t, "refund_payment", renamed.Kind())
	require.Equal(t, "refund_id", renamed.IDArg())

	var queued operation.Args[renamedKind]
	require.NoError(t, json.Unmarshal(before, &queued))
	require.Equal(t, renamed, queued)

	plain := operation.Args[plainKind]{TenantID: tenantID, ID: "pyo_01"}
	before, err = json.Marshal(struct {
		TenantID string `json:"tenant_id"`
		ID       string `json:"id"`
	}{tenantID, "pyo_01"})
	require.NoError(t, err)
	encoded, err = json.Marshal(plain)
	require.NoError(t, err)
	require.Equal(t, string(before), string(encoded))
	require.Equal(t, "payout", plain.Kind())

	require.Error(t, json.Unmarshal([]byte(`{"tenant_id": 7}`), &queued), "arguments that are not ours are an error, not a zero job")
}
