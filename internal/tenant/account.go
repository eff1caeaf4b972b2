package tenant

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A tenant may have a Stripe connected account of its own. Every provider
// call for its payments then carries Stripe-Account, and the provider keeps
// its objects (intents, refunds, customers) apart from every other
// account's. Tenants without one share the platform's account, where the
// service keeps customers apart itself (the first tenant to use one owns it).

// ErrAccountTaken is returned when a connected account is another tenant's:
// two tenants on one account would see each other's objects.
var ErrAccountTaken = errors.New("the Stripe account belongs to another tenant")

var stripeAccountPattern = regexp.MustCompile(`^acct_[A-Za-z0-9]{1,255}$`)

// ValidStripeAccount checks the form of a connected account id (acct_…).
func ValidStripeAccount(account string) error {
	if !stripeAccountPattern.MatchString(account) {
		return fmt.Errorf("%q is not a Stripe connected account id (acct_ and letters or digits)", account)
	}
	return nil
}

// CreateOnAccount is Create for a tenant whose provider calls act on the
// connected account account (Stripe-Account), in the same transaction: the
// tenant never exists without it.
func CreateOnAccount(ctx context.Context, db Beginner, name, account string) (Created, error) {
	if err := ValidStripeAccount(account); err != nil {
		return Created{}, err
	}
	return create(ctx, db, name, false, account)
}

// SetStripeAccount gives the tenant named by ref (its id or its name) the
// connected account account, or takes its account away ("": the platform's
// own). Payments made before keep the account they were made on: their
// intents, refunds, captures and cancels live there.
func SetStripeAccount(ctx context.Context, db Beginner, ref, account string) (string, error) {
	if account != "" {
		if err := ValidStripeAccount(account); err != nil {
			return "", err
		}
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return "", fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	tenantID, err := lockTenant(ctx, tx, ref)
	if err != nil {
		return "", err
	}
	if err := setAccount(ctx, tx, tenantID, account); err != nil {
		return "", err
	}
	if err := tx.Commit(ctx); err != nil {
		return "", fmt.Errorf("commit: %w", err)
	}
	return tenantID, nil
}

func setAccount(ctx context.Context, tx pgx.Tx, tenantID, account string) error {
	_, err := tx.Exec(ctx, `UPDATE tenants SET stripe_account = nullif($2, '') WHERE id = $1`, tenantID, account)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return fmt.Errorf("%s: %w", account, ErrAccountTaken)
	}
	if err != nil {
		return fmt.Errorf("set the tenant's Stripe account: %w", err)
	}
	return nil
}
