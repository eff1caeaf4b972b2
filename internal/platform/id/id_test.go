package id

import (
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestNewIsTimeOrderedAndValid(t *testing.T) {
	t.Parallel()
	base := time.UnixMilli(1_700_000_000_000)
	var ids []string
	for i := range 50 {
		ids = append(ids, "pay_"+encode(base.Add(time.Duration(i)*time.Millisecond)))
	}
	require.True(t, sort.StringsAreSorted(ids), "later milliseconds sort later")
	for _, s := range ids {
		require.True(t, Valid("pay", s), s)
	}
	seen := map[string]bool{}
	for range 1000 {
		s := New("pay")
		require.False(t, seen[s], "collision")
		seen[s] = true
	}
}

func TestValid(t *testing.T) {
	t.Parallel()
	good := New("pay")
	for _, bad := range []string{"", "pay_", "pay_123", "ten" + good[3:], good + "0", good[:len(good)-1] + "U", good[:len(good)-1] + "a", "pay-" + good[4:]} {
		require.False(t, Valid("pay", bad), bad)
	}
}
