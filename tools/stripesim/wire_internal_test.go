package stripesim

import (
	"testing"

	"github.com/stretchr/testify/require"
	stripe "github.com/stripe/stripe-go/v76"
)

func TestValidAPIVersion(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		version string
		valid   bool
	}{
		{stripe.APIVersion, true},
		{"2020-08-27", true},
		{"2024-09-30.acacia", true},
		{"2023-10-16; checkout_server_update_beta=v1", true},
		{"2023-10-16;a_beta=v1;b_beta=v2", true},
		{"2019-2-19", false},
		{"2019-02-30", false},
		{"19-02-19", false},
		{"latest", false},
		{"2024-09-30.", false},
		{"2024-09-30.Acacia", false},
		{"2023-10-16 accounts_upgrade=true", false},
		{"2023-10-16; beta", false},
		{"2023-10-16; beta=1", false},
		{"2023-10-16; =v1", false},
	} {
		t.Run(tc.version, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.valid, validAPIVersion(tc.version))
		})
	}
}
