package operation_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/operation"
)

func TestProviderKey(t *testing.T) {
	t.Parallel()
	key := operation.ProviderKey("payment", "ten_1", "client-key-0000001", "pay_1", 1)
	require.Equal(t, key, operation.ProviderKey("payment", "ten_1", "client-key-0000001", "pay_1", 1), "stable across attempts")
	require.True(t, strings.HasPrefix(key, "oncepay-pay_1-"), "the operation's id leads it: %s", key)
	for name, other := range map[string]string{
		"Kind":       operation.ProviderKey("refund", "ten_1", "client-key-0000001", "pay_1", 1),
		"Tenant":     operation.ProviderKey("payment", "ten_2", "client-key-0000001", "pay_1", 1),
		"ClientKey":  operation.ProviderKey("payment", "ten_1", "client-key-0000002", "pay_1", 1),
		"Operation":  operation.ProviderKey("payment", "ten_1", "client-key-0000001", "pay_2", 1),
		"Generation": operation.ProviderKey("payment", "ten_1", "client-key-0000001", "pay_1", 2),
		// Parts are separated: moving a byte from one to the next is
		// another key.
		"Boundaries": operation.ProviderKey("payment", "ten_1c", "lient-key-0000001", "pay_1", 1),
	} {
		require.NotEqual(t, key, other, name)
	}
	longest := operation.ProviderKey("capture", "ten_"+strings.Repeat("x", 26), strings.Repeat("k", 255), "cap_"+strings.Repeat("y", 26), 1000)
	require.LessOrEqual(t, len(longest), 255, "the provider's limit")
}

// TestRequestRef: the ref, and the provider keys derived from it, are the
// same for the same request of the same tenant (a retry whose rows were
// lost computes them again), and differ by every input.
func TestRequestRef(t *testing.T) {
	t.Parallel()
	body := [32]byte{1}
	ref := operation.RequestRef("payment", "ten_1", "client-key-0000001", body)
	require.Equal(t, ref, operation.RequestRef("payment", "ten_1", "client-key-0000001", body), "stable: nothing random")
	require.Regexp(t, `^ref_[A-Za-z0-9_-]{32}$`, ref)
	for name, other := range map[string]string{
		"Kind":        operation.RequestRef("refund", "ten_1", "client-key-0000001", body),
		"Tenant":      operation.RequestRef("payment", "ten_2", "client-key-0000001", body),
		"ClientKey":   operation.RequestRef("payment", "ten_1", "client-key-0000002", body),
		"Fingerprint": operation.RequestRef("payment", "ten_1", "client-key-0000001", [32]byte{2}),
		"Boundaries":  operation.RequestRef("payment", "ten_1c", "lient-key-0000001", body),
	} {
		require.NotEqual(t, ref, other, name)
	}
	require.NotEqual(t, operation.RefKey(ref, 1), operation.RefKey(ref, 2), "a generation has a key of its own")
	require.LessOrEqual(t, len(operation.RefKey(ref, 1000)+"-cancel"), 255, "the provider's limit")
}

// TestOldRowsKeepTheirDerivation: an operation made before refs (no ref on
// its row) derives its next generation's key as its first was derived,
// from its id; one made since, from its ref.
func TestOldRowsKeepTheirDerivation(t *testing.T) {
	t.Parallel()
	table := operation.Table{Operation: "payment"}
	old := operation.Entry{TenantID: "ten_1", ID: "pay_1", IdempotencyKey: "client-key-0000001", Generation: 1}
	require.Equal(t, operation.ProviderKey("payment", "ten_1", "client-key-0000001", "pay_1", 2), table.NextProviderKey(old, 2))
	made := old
	made.Ref = operation.RequestRef("payment", "ten_1", "client-key-0000001", [32]byte{1})
	require.Equal(t, operation.RefKey(made.Ref, 2), table.NextProviderKey(made, 2))
}

// TestAKeyIsKeptUntilSpent: a resumed generation keeps its key, sent or
// not, as long as the provider holds no answer under it that a retry
// cannot move past; once it does (a stored error, a key held for other
// parameters), the next generation takes a new key, which no stored
// answer can reach.
func TestAKeyIsKeptUntilSpent(t *testing.T) {
	t.Parallel()
	table := operation.Table{Operation: "payment"}
	ref := operation.RequestRef("payment", "ten_1", "client-key-0000001", [32]byte{1})
	e := operation.Entry{TenantID: "ten_1", ID: "pay_1", IdempotencyKey: "client-key-0000001", Generation: 1, Ref: ref, ProviderKey: operation.RefKey(ref, 1)}
	require.Equal(t, operation.RefKey(ref, 1), table.NextProviderKey(e, 2), "never sent: kept")
	sent := time.Now()
	e.FirstAttemptAt = &sent
	require.Equal(t, operation.RefKey(ref, 1), table.NextProviderKey(e, 2), "sent, never answered for good: kept")
	spent := sent.Add(time.Second)
	e.KeySpentAt = &spent
	require.Equal(t, operation.RefKey(ref, 2), table.NextProviderKey(e, 2), "spent: a new key")
}

// TestEarlierObjects: an object made for the same request by an operation
// whose rows were lost (same ref, another id), or by the operation itself
// under an earlier generation (proven never made by a proof a lost commit
// broke), is the operation's to adopt; one of another request is not.
func TestEarlierObjects(t *testing.T) {
	t.Parallel()
	table := operation.Table{Operation: "refund"}
	ref := operation.RequestRef("refund", "ten_1", "client-key-0000001", [32]byte{1})
	op := operation.Entry{TenantID: "ten_1", ID: "re_new", Generation: 1, Ref: ref}
	meta := func(id, generation, ref string) map[string]string {
		return map[string]string{"refund_id": id, "refund_generation": generation, operation.MetadataRef: ref, operation.MetadataTenantID: "ten_1"}
	}
	require.True(t, table.MadeFor(meta("re_new", "1", ref), op), "its own")
	require.True(t, table.MadeFor(meta("re_lost", "2", ref), op), "its lost rows', whatever their generation")
	require.True(t, table.Earlier(meta("re_lost", "1", ref), op))
	require.False(t, table.Earlier(meta("re_new", "1", ref), op), "its own is not earlier")
	op.Generation = 2
	require.True(t, table.MadeFor(meta("re_new", "1", ref), op), "its own earlier generation's: the request's one execution")
	require.True(t, table.Earlier(meta("re_new", "1", ref), op))
	require.True(t, table.Earlier(map[string]string{"refund_id": "re_new"}, op), "made before generations: the first's")
	require.False(t, table.Earlier(meta("re_new", "2", ref), op), "its current generation's is not earlier")
	require.False(t, table.MadeFor(meta("re_lost", "1", "ref_other"), op), "another request's")
	op.Ref = ""
	require.False(t, table.MadeFor(meta("re_lost", "1", ""), op), "an operation without a ref adopts nothing")
	key, value := table.FoundBy(op)
	require.Equal(t, []string{"refund_id", "re_new"}, []string{key, value})
}
