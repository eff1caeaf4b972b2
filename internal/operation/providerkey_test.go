package operation_test

import (
	"strings"
	"testing"

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
