package payments

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestChargeJobKeepsItsNames: a charge job is the engine's Args under the
// River kind and arguments charge jobs had before, so that a job queued by
// an older release is still worked, and River's uniqueness (which hashes
// the encoded arguments) still matches it.
func TestChargeJobKeepsItsNames(t *testing.T) {
	t.Parallel()
	job := args{TenantID: "ten_1", ID: "pay_1"}
	require.Equal(t, "charge_payment", job.Kind())
	encoded, err := json.Marshal(job)
	require.NoError(t, err)
	require.Equal(t, `{"tenant_id":"ten_1","payment_id":"pay_1"}`, string(encoded), "what an older release queued")
	var decoded args
	require.NoError(t, json.Unmarshal([]byte(`{"tenant_id":"ten_1","payment_id":"pay_1"}`), &decoded))
	require.Equal(t, job, decoded)
}
