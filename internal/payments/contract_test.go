package payments

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/platform/money"
	"github.com/oncepay/oncepay/internal/provider"
)

// TestProviderRequestsAreValidForStripe sends the worker's provider requests
// to stripe-mock, which validates every request against Stripe's published
// OpenAPI spec and rejects unknown or malformed parameters with a 400. It
// answers from fixtures (no state, no idempotency), so only acceptance is
// asserted here; behaviour is tested against the simulator.
func TestProviderRequestsAreValidForStripe(t *testing.T) {
	t.Parallel()
	pc := provider.New(provider.Config{SecretKey: "sk_test_123", APIBase: startStripeMock(t)})
	ctx := context.Background()

	customer, description := "cus_123", "Order A-17"
	full := Payment{
		Lifecycle: operation.Lifecycle{ID: "pay_01J0000000000000000000000", TenantID: "ten_01J0000000000000000000000",
			ProviderKeyGeneration: 2, ProviderIdempotencyKey: "oncepay-pay_01J0000000000000000000000-abc"},
		Money: money.Money{Amount: 2000, Currency: "usd"}, PaymentMethod: "pm_card_visa", Customer: &customer, Description: &description,
		Metadata: map[string]string{"order_id": "A-17"},
	}
	minimal := Payment{
		Lifecycle: operation.Lifecycle{ID: "pay_01J0000000000000000000001", TenantID: "ten_01J0000000000000000000000",
			ProviderKeyGeneration: 1, ProviderIdempotencyKey: "oncepay-pay_01J0000000000000000000001-abc"},
		Money: money.Money{Amount: 1, Currency: "eur"}, PaymentMethod: "pm_card_visa",
	}

	for name, p := range map[string]Payment{"AllFields": full, "RequiredFieldsOnly": minimal} {
		created := pc.CreateIntent(ctx, chargeOf(p))
		require.NoError(t, created.Err, "%s: stripe-mock rejected our create request", name)
		require.NotEmpty(t, created.IntentID())

		read := pc.RetrieveIntent(ctx, created.IntentID())
		require.NoError(t, read.Err, "%s: stripe-mock rejected our retrieve request", name)
		require.Equal(t, created.IntentID(), read.IntentID())

		// stripe-mock answers from fixtures: a cancel "succeeds" with its
		// fixture's status, so only that the request was accepted counts.
		canceled := pc.CancelIntent(ctx, created.IntentID(), cancelKey(p))
		var se *stripe.Error
		require.False(t, errors.As(canceled.Err, &se), "%s: stripe-mock rejected our cancel request: %v", name, canceled.Err)

		now := time.Now()
		_, err := pc.FindIntents(ctx, provider.Find{
			MetadataKey: MetadataPaymentID, MetadataValue: p.ID, CreatedFrom: now.Add(-time.Hour), CreatedTo: now, Scan: true, MaxPages: 1,
		})
		if !errors.Is(err, provider.ErrScanTooLarge) {
			require.NoError(t, err, "%s: stripe-mock rejected our search or list request", name)
		}
	}
}

// startStripeMock runs stripe-mock (a tool dependency in go.mod) on free
// loopback ports. Both listeners are bound explicitly: left alone, its HTTPS
// listener binds every interface.
func startStripeMock(t *testing.T) string {
	t.Helper()
	// Built rather than run through `go tool`, which would leave the real
	// process behind when the go command is killed. The build cache makes
	// this quick after the first time.
	bin := filepath.Join(t.TempDir(), "stripe-mock")
	build := exec.Command("go", "build", "-o", bin, "github.com/stripe/stripe-mock")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "build stripe-mock: %s", out)

	httpPort, httpsPort := freePort(t), freePort(t)
	var log bytes.Buffer
	cmd := exec.Command(bin, "-http-addr", fmt.Sprintf("127.0.0.1:%d", httpPort), "-https-addr", fmt.Sprintf("127.0.0.1:%d", httpsPort))
	cmd.Stdout, cmd.Stderr = &log, &log
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("stripe-mock output:\n%s", log.String())
		}
	})

	base := fmt.Sprintf("http://127.0.0.1:%d", httpPort)
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/payment_intents/pi_123", nil)
		req.Header.Set("Authorization", "Bearer sk_test_123")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			return base
		}
		if time.Now().After(deadline) {
			t.Fatalf("stripe-mock did not start: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
