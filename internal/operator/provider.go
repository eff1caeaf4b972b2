package operator

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/platform/envconfig"
	"github.com/oncepay/oncepay/internal/provider"
)

// providerConfig is what the commands that call the provider read, with
// the worker's names and defaults.
type providerConfig struct {
	SecretKey       string
	APIBase         string
	ReconcileSettle time.Duration
}

// loadProviderConfig reads the provider's settings under the worker's names.
func loadProviderConfig(getenv func(string) string) (providerConfig, error) {
	env := envconfig.New(getenv)
	cfg := providerConfig{
		SecretKey:       env.Required("STRIPE_SECRET_KEY", "the worker's Stripe secret key (sk_test_… for test mode or the simulator)"),
		APIBase:         env.URL("STRIPE_API_BASE"),
		ReconcileSettle: env.Duration("RECONCILE_SETTLE", time.Minute, 0, time.Hour),
	}
	return cfg, env.Err()
}

// provider is the client of the provider the worker calls, with its settings.
func (c call) provider() (*provider.Client, providerConfig, error) {
	cfg, err := loadProviderConfig(c.Getenv)
	if err != nil {
		return nil, cfg, fmt.Errorf("configuration: %w (set it as the worker has it; against a stack of make up, paste the "+
			"\"export DATABASE_URL=… STRIPE_API_BASE=… STRIPE_SECRET_KEY=…\" line it printed)", err)
	}
	return provider.New(provider.Config{SecretKey: cfg.SecretKey, APIBase: cfg.APIBase}), cfg, nil
}

// reconcileSetup is what a reconciler run from the command line needs:
// the provider, and the settle time. "Never sent" is proven only once no
// request can still be in flight, by the deadline each attempt's worker
// stamped on the row, not by a timeout read from this shell.
func (c call) reconcileSetup() (*provider.Client, operation.ReconcileConfig, error) {
	pc, pcfg, err := c.provider()
	return pc, operation.ReconcileConfig{Settle: pcfg.ReconcileSettle}, err
}

// kindOf is the kind an operation's id belongs to, from the registry; an
// error that lists the kinds' prefixes for an id of none.
func (c call) kindOf(id string) (operation.Kind, error) {
	kind, ok := c.cmd.kinds.Of(id)
	if !ok {
		return nil, fmt.Errorf("%q is no operation's id: ids start with a kind's prefix: %s", id, c.cmd.kinds.Described())
	}
	return kind, nil
}

// providerEnv is what a kind's reconciler needs from this shell: the
// provider the worker calls, with its settings.
func (c call) providerEnv(logger *slog.Logger) (operation.Env, error) {
	pc, cfg, err := c.reconcileSetup()
	return operation.Env{Pool: c.Pool, Keys: c.keys(), Provider: pc, Logger: logger, Reconcile: cfg}, err
}
