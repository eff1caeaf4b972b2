package provider_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// TestProviderTextIsNeverKept: a card error carries the intent, its
// client_secret included, and the provider's own words. What oncepay keeps
// of it (the error it logs and stores, the message it shows) has neither;
// the provider's error is still there for errors.As.
func TestProviderTextIsNeverKept(t *testing.T) {
	t.Parallel()
	pc, _ := newClient(t, stripesim.Config{})
	out := pc.CreateIntent(context.Background(), charge("pm_card_visa_chargeDeclinedInsufficientFunds"))
	require.Equal(t, provider.Declined, out.Kind)
	require.NotEmpty(t, out.Intent.ClientSecret, "the card error carried the intent")

	text := out.Err.Error()
	require.NotContains(t, text, "_secret_")
	require.NotContains(t, text, "Your card")
	require.Contains(t, text, "HTTP 402")
	require.Contains(t, text, "decline_code insufficient_funds")
	require.Equal(t, "The card has insufficient funds.", out.Message)
	var se *stripe.Error
	require.True(t, errors.As(out.Err, &se))
	require.True(t, strings.Contains(se.Error(), "_secret_"), "the provider's own error does embed it")
}
