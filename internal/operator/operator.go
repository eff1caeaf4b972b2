// Package operator is the api binary's command line and the operator's
// commands: it parses every command of the binary (the server's too, so
// that one usage text and one parser serve them all) and runs those an
// operator types against the database: tenants, payments, operations,
// reconcile, keys release, ledger check and findings, one file a group.
// The binary opens the database and serves; this package never reads its
// configuration.
package operator

import (
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/idempotency"
)

// Deps is what the operator's commands run with.
type Deps struct {
	// Pool is the database's, on DATABASE_URL.
	Pool *pgxpool.Pool
	// Idempotency is the key store's configuration: the API's retention.
	Idempotency idempotency.Config
	// Getenv reads the provider's settings, for the commands that ask the
	// provider; the database's are the binary's.
	Getenv func(string) string
	// Stdout is where a command prints its answer.
	Stdout io.Writer
}

// call is one operator's command being run: what it runs with, and what
// was asked.
type call struct {
	Deps
	cmd Command
}

// Run runs cmd, an operator's command that Parse returned: a table by
// default, JSON with --json. Its errors start with the command's name.
func Run(ctx context.Context, cmd Command, deps Deps) error {
	c := call{Deps: deps, cmd: cmd}
	var err error
	switch cmd.Name {
	case "tenants create", "tenants ensure":
		err = c.tenantsCreate(ctx)
	case "tenants list":
		err = c.tenantsList(ctx)
	case "tenants set-account":
		err = c.tenantsSetAccount(ctx)
	case "tenants rotate-key":
		err = c.tenantsRotateKey(ctx)
	case "tenants revoke-key":
		err = c.tenantsRevokeKey(ctx)
	case "payments list":
		err = c.paymentsList(ctx)
	case "payments show":
		err = c.paymentsShow(ctx)
	case "operations list":
		err = c.operationsList(ctx)
	case "operations show":
		err = c.operationsShow(ctx)
	case "reconcile":
		err = c.reconcile(ctx)
	case "keys release":
		err = c.keysRelease(ctx)
	case "ledger check":
		err = c.ledgerCheck(ctx)
	case "findings list":
		err = c.findingsList(ctx)
	case "findings resolve":
		err = c.findingsResolve(ctx)
	default:
		return fmt.Errorf("command %q has no implementation", cmd.Name)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", cmd.Name, err)
	}
	return nil
}

// keys is a key store with the API's retention, so a released key's
// retention counts as the API's does.
func (c call) keys() *idempotency.Store {
	return idempotency.NewStore(c.Idempotency)
}
