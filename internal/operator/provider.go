package operator

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/oncepay/oncepay/internal/envconfig"
	"github.com/oncepay/oncepay/internal/kinds"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
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

// reconciler is the worker's payments reconciler.
func (c call) reconciler(logger *slog.Logger) (*payments.Reconciler, error) {
	pc, cfg, err := c.reconcileSetup()
	if err != nil {
		return nil, err
	}
	return payments.NewReconciler(c.Pool, c.keys(), pc, logger, cfg), nil
}

// kindOf is the kind (other than payments, whose commands are their own)
// an id belongs to, from the registry.
func kindOf(id string) operation.Kind {
	if kind, ok := kinds.All().Of(id); ok && kind.Name() != "payment" {
		return kind
	}
	return nil
}

// operatorOf is the kind's operator's reach, with the worker's reconciler.
func (c call) operatorOf(kind operation.Kind, logger *slog.Logger) (operation.Operator, error) {
	pc, cfg, err := c.reconcileSetup()
	if err != nil {
		return nil, err
	}
	return kind.Operator(operation.Env{Pool: c.Pool, Keys: c.keys(), Provider: pc, Logger: logger, Reconcile: cfg}), nil
}
