package main

import (
	"strconv"
	"strings"
	"time"

	"github.com/oncepay/oncepay/internal/platform/envconfig"
)

// config is the simulator's configuration, read from the environment.
type config struct {
	// Addr (STRIPESIM_ADDR) is where HTTP is served; port 0 picks a free
	// port, which the "stripesim listening" log line reports. Defaults to
	// 127.0.0.1:12111 (stripe-mock uses 12111 too, so existing setups fit).
	Addr string
	// MaxHold (STRIPESIM_MAX_HOLD) bounds a hold_after fault. Defaults to 60s.
	MaxHold time.Duration
	// ProcessingRetrievals (STRIPESIM_PROCESSING_RETRIEVALS) is how many
	// retrievals a processing intent stays processing. Defaults to 2.
	ProcessingRetrievals int
	// SearchIndexDelay (STRIPESIM_SEARCH_INDEX_DELAY) is how long after its
	// creation an intent appears in search results, like Stripe's lagging
	// search index. 0 makes search immediate. Defaults to 2s.
	SearchIndexDelay time.Duration
	// PayoutTransitDelay (STRIPESIM_PAYOUT_TRANSIT_DELAY) is how long a
	// payout stays pending, cancelable, before it is in transit; then
	// PayoutPaidDelay (STRIPESIM_PAYOUT_PAID_DELAY) later it is paid.
	// Default to 1s and 2s.
	PayoutTransitDelay, PayoutPaidDelay time.Duration
	// Seed (STRIPESIM_SEED) seeds the source behind probabilistic faults, for
	// reproducible runs. Defaults to random.
	Seed uint64
	// ShutdownTimeout (STRIPESIM_SHUTDOWN_TIMEOUT) is how long in-flight
	// requests get to finish on SIGTERM. Defaults to 5s.
	ShutdownTimeout time.Duration
	// WebhookURL (STRIPESIM_WEBHOOK_URL) receives every event, signed, as
	// Stripe posts to a webhook endpoint. Empty sends none.
	WebhookURL string
	// WebhookSecret (STRIPESIM_WEBHOOK_SECRET) signs the deliveries; the
	// receiver's STRIPE_WEBHOOK_SECRET must equal it. Required with
	// STRIPESIM_WEBHOOK_URL.
	WebhookSecret string
	// WebhookEvents (STRIPESIM_WEBHOOK_EVENTS, comma-separated) are the
	// event types sent, as a Stripe endpoint's enabled events ("*" ends a
	// prefix). Empty sends every event.
	WebhookEvents []string
	// WebhookRetryBase (STRIPESIM_WEBHOOK_RETRY_BASE) is the wait after a
	// failed delivery, doubling per attempt. Defaults to 500ms.
	WebhookRetryBase time.Duration
	// StateFile (STRIPESIM_STATE_FILE) keeps the simulator's objects, keys
	// and events across restarts: loaded at start if it exists, saved each
	// second something changed and at shutdown. Empty keeps nothing.
	StateFile string
	// LogLevel (LOG_LEVEL) is debug, info, warn or error. Defaults to info.
	LogLevel string
}

// loadConfig reads and validates the configuration; errors name the
// variable at fault.
func loadConfig(getenv func(string) string) (config, error) {
	env := envconfig.New(getenv)
	cfg := config{
		Addr:                 env.String("STRIPESIM_ADDR", "127.0.0.1:12111"),
		MaxHold:              env.Duration("STRIPESIM_MAX_HOLD", 60*time.Second, time.Millisecond, time.Hour),
		ProcessingRetrievals: env.Int("STRIPESIM_PROCESSING_RETRIEVALS", 2, 1, 1000),
		SearchIndexDelay:     env.Duration("STRIPESIM_SEARCH_INDEX_DELAY", 2*time.Second, 0, 10*time.Minute),
		ShutdownTimeout:      env.Duration("STRIPESIM_SHUTDOWN_TIMEOUT", 5*time.Second, time.Millisecond, time.Hour),
		PayoutTransitDelay:   env.Duration("STRIPESIM_PAYOUT_TRANSIT_DELAY", time.Second, time.Millisecond, 24*time.Hour),
		PayoutPaidDelay:      env.Duration("STRIPESIM_PAYOUT_PAID_DELAY", 2*time.Second, time.Millisecond, 24*time.Hour),
		WebhookURL:           env.URL("STRIPESIM_WEBHOOK_URL"),
		WebhookSecret:        env.String("STRIPESIM_WEBHOOK_SECRET", ""),
		WebhookEvents:        eventTypes(getenv("STRIPESIM_WEBHOOK_EVENTS")),
		WebhookRetryBase:     env.Duration("STRIPESIM_WEBHOOK_RETRY_BASE", 500*time.Millisecond, time.Millisecond, time.Hour),
		StateFile:            env.String("STRIPESIM_STATE_FILE", ""),
		LogLevel:             env.OneOf("LOG_LEVEL", "info", "debug", "info", "warn", "error"),
	}
	if cfg.WebhookURL != "" && cfg.WebhookSecret == "" {
		env.Fail("STRIPESIM_WEBHOOK_SECRET", "is required with STRIPESIM_WEBHOOK_URL: unsigned webhooks must not be accepted")
	}
	if v := getenv("STRIPESIM_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			env.Fail("STRIPESIM_SEED", "%q must be a positive integer", v)
		}
		cfg.Seed = n
	}
	return cfg, env.Err()
}

// eventTypes splits a comma-separated list of event types, blanks dropped.
func eventTypes(list string) []string {
	var types []string
	for typ := range strings.SplitSeq(list, ",") {
		if typ = strings.TrimSpace(typ); typ != "" {
			types = append(types, typ)
		}
	}
	return types
}
