package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/tools/stripesim"
)

// started is a run in progress.
type started struct {
	baseURL string
	cancel  context.CancelFunc
	done    chan error
}

// start runs the simulator on a free port and waits for the log line that
// reports the bound address.
func start(t *testing.T, env map[string]string) *started {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	env["STRIPESIM_ADDR"] = "127.0.0.1:0"

	stdout, logs := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"stripesim"}, func(k string) string { return env[k] }, logs)
		_ = logs.Close()
	}()
	addrc := make(chan string, 1)
	go func() {
		// Keep reading to the end, so that logging never blocks the server.
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var line struct {
				Addr string `json:"addr"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Addr != "" {
				select {
				case addrc <- line.Addr:
				default:
				}
			}
		}
	}()

	select {
	case addr := <-addrc:
		return &started{baseURL: "http://" + addr, cancel: cancel, done: done}
	case err := <-done:
		t.Fatalf("run returned before listening: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("no log line with the address")
	}
	return nil
}

func (s *started) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-s.done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("run did not return after cancellation")
		return nil
	}
}

func TestRun(t *testing.T) {
	t.Parallel()

	t.Run("ServesThenShutsDown", func(t *testing.T) {
		t.Parallel()
		s := start(t, map[string]string{})

		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.baseURL+"/v1/payment_intents",
			strings.NewReader("amount=1000&currency=usd&payment_method=pm_card_visa&confirm=true&metadata[payment_id]=pay_1"))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer sk_test_run")
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		require.NoError(t, res.Body.Close())
		require.Equal(t, http.StatusOK, res.StatusCode, string(body))

		l, err := stripesim.AdminClient{BaseURL: s.baseURL}.Ledger(t.Context())
		require.NoError(t, err)
		require.Len(t, l.IntentsWithMetadata("payment_id", "pay_1"), 1)

		s.cancel()
		require.NoError(t, s.wait(t))
	})

	t.Run("HeldResponseDoesNotDelayShutdown", func(t *testing.T) {
		t.Parallel()
		s := start(t, map[string]string{"STRIPESIM_SHUTDOWN_TIMEOUT": "3s"})
		admin := stripesim.AdminClient{BaseURL: s.baseURL}
		require.NoError(t, admin.InjectFault(t.Context(), stripesim.Fault{Mode: stripesim.FaultHoldAfter, Count: 1}))

		held := make(chan error, 1)
		go func() {
			req, err := http.NewRequestWithContext(context.WithoutCancel(t.Context()), http.MethodGet, s.baseURL+"/v1/payment_intents/pi_x", nil)
			if err != nil {
				held <- err
				return
			}
			req.Header.Set("Authorization", "Bearer sk_test_run")
			res, err := http.DefaultClient.Do(req)
			if err == nil {
				_ = res.Body.Close()
			}
			held <- err
		}()
		require.Eventually(t, func() bool {
			faults, err := admin.Faults(t.Context())
			return err == nil && len(faults) == 0
		}, 5*time.Second, 10*time.Millisecond, "the held request took the fault")

		began := time.Now()
		s.cancel()
		require.NoError(t, s.wait(t))
		require.Less(t, time.Since(began), 2*time.Second, "shutdown released the hold instead of waiting for MaxHold")
		require.Error(t, <-held, "the held request got no response")
	})

	t.Run("BadConfigurationNamesTheVariable", func(t *testing.T) {
		t.Parallel()
		err := run(t.Context(), nil, func(k string) string {
			return map[string]string{"STRIPESIM_MAX_HOLD": "soon", "STRIPESIM_SEED": "-1"}[k]
		}, io.Discard)
		require.ErrorContains(t, err, "STRIPESIM_MAX_HOLD")
		require.ErrorContains(t, err, "STRIPESIM_SEED")
	})

	t.Run("WebhookURLNeedsASecret", func(t *testing.T) {
		t.Parallel()
		err := run(t.Context(), nil, func(k string) string {
			return map[string]string{"STRIPESIM_WEBHOOK_URL": "http://127.0.0.1:8080/v1/webhooks/stripe"}[k]
		}, io.Discard)
		require.ErrorContains(t, err, "STRIPESIM_WEBHOOK_SECRET")
	})
}
