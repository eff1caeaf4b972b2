package tenant

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

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

// ErrAccountInUse is returned when a connected account would pass to a
// tenant while operations of another tenant can still act on it: their
// refunds, captures, cancels and resumed sends would move the new holder's
// money. An AccountInUseError says whose and how many.
var ErrAccountInUse = errors.New("another tenant's operations still act on the Stripe account")

// AccountUse is how many operations of one kind a tenant has that can
// still act on an account: in flight, awaiting reconciliation, resumable
// by a retry, or still able to move money there (a payment that can be
// refunded or captured, a payout on its way).
type AccountUse struct {
	TenantID   string `json:"tenant_id"`
	TenantName string `json:"tenant_name"`
	Operation  string `json:"operation"`
	Count      int    `json:"count"`
}

// AccountUses lists, in tx, the uses of account by tenants other than
// tenantID. The kinds' registry supplies it (operation.Kinds.AccountUses):
// this package knows tenants, not the tables of their operations.
type AccountUses func(ctx context.Context, tx pgx.Tx, account, tenantID string) ([]AccountUse, error)

// AccountInUseError refuses to give Account to a tenant while Uses, other
// tenants' operations, can still act on it.
type AccountInUseError struct {
	Account string
	Uses    []AccountUse
}

func (e *AccountInUseError) Error() string {
	return fmt.Sprintf("%s: %v: %s", e.Account, ErrAccountInUse, DescribeUses(e.Uses))
}

func (e *AccountInUseError) Unwrap() error { return ErrAccountInUse }

// DescribeUses says whose operations uses are: "tenant ten_1 (acme): 2
// payments, 1 payout; …".
func DescribeUses(uses []AccountUse) string {
	var b strings.Builder
	for i, u := range uses {
		switch {
		case i == 0:
		case u.TenantID == uses[i-1].TenantID:
			b.WriteString(", ")
		default:
			b.WriteString("; ")
		}
		if i == 0 || u.TenantID != uses[i-1].TenantID {
			fmt.Fprintf(&b, "tenant %s (%s): ", u.TenantID, u.TenantName)
		}
		noun := u.Operation
		if u.Count != 1 {
			noun += "s"
		}
		fmt.Fprintf(&b, "%d %s", u.Count, noun)
	}
	return b.String()
}

// CreateOnAccount is Create for a tenant whose provider calls act on the
// connected account account (Stripe-Account), in the same transaction: the
// tenant never exists without it. An account that another tenant's
// operations still act on (uses) is refused, AccountInUseError.
func CreateOnAccount(ctx context.Context, db Beginner, name, account string, uses AccountUses) (Created, error) {
	if err := ValidStripeAccount(account); err != nil {
		return Created{}, err
	}
	return create(ctx, db, name, false, account, Reassign{Uses: uses})
}

// Reassign is how SetStripeAccount treats an account that other tenants'
// operations can still act on: Uses finds them, and the account is refused
// (AccountInUseError) unless Force: an operator's word that the new
// holder's balance may pay for them.
type Reassign struct {
	Uses  AccountUses
	Force bool
}

// AccountSet is what SetStripeAccount did: Overridden are the other
// tenants' operations that still act on the account given with Force.
type AccountSet struct {
	TenantID   string       `json:"tenant_id"`
	Account    string       `json:"stripe_account"`
	Overridden []AccountUse `json:"overridden"`
}

// SetStripeAccount gives the tenant named by ref (its id or its name) the
// connected account account, or takes its account away ("": the platform's
// own). Every operation keeps the account it was made on: a payment's
// intent, refunds, captures and cancels live there, and a payout's money
// left from there. So an account that another tenant's operations can
// still act on is not given away unless r.Force: the new holder's balance
// would pay for the other tenant's later refunds, and its events settle
// the other tenant's operations.
func SetStripeAccount(ctx context.Context, db Beginner, ref, account string, r Reassign) (AccountSet, error) {
	if account != "" {
		if err := ValidStripeAccount(account); err != nil {
			return AccountSet{}, err
		}
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return AccountSet{}, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	tenantID, err := lockTenant(ctx, tx, ref)
	if err != nil {
		return AccountSet{}, err
	}
	overridden, err := setAccount(ctx, tx, tenantID, account, r)
	if err != nil {
		return AccountSet{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return AccountSet{}, fmt.Errorf("commit: %w", err)
	}
	return AccountSet{TenantID: tenantID, Account: account, Overridden: overridden}, nil
}

// setAccount gives tenantID account, refused while another tenant's
// operations can still act on it unless r.Force; it returns those it
// overrode. The uses are read after the update, so that they include what
// the account's former holder committed before giving the account up:
// that tenant's move locked its row (lockTenant's FOR UPDATE) after every
// operation whose insert had read its account, and this update waited on
// the unique index for that move to commit.
func setAccount(ctx context.Context, tx pgx.Tx, tenantID, account string, r Reassign) ([]AccountUse, error) {
	_, err := tx.Exec(ctx, `UPDATE tenants SET stripe_account = nullif($2, '') WHERE id = $1`, tenantID, account)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return nil, fmt.Errorf("%s: %w", account, ErrAccountTaken)
	}
	if err != nil {
		return nil, fmt.Errorf("set the tenant's Stripe account: %w", err)
	}
	// The platform's own account is every account-less tenant's at once:
	// only a connected account changes hands.
	if account == "" {
		return nil, nil
	}
	if r.Uses == nil {
		return nil, errors.New("set the tenant's Stripe account: no way to find the operations acting on it")
	}
	uses, err := r.Uses(ctx, tx, account, tenantID)
	if err != nil {
		return nil, fmt.Errorf("find the operations acting on %s: %w", account, err)
	}
	if len(uses) == 0 {
		return nil, nil
	}
	if err := nameTenants(ctx, tx, uses); err != nil {
		return nil, err
	}
	if !r.Force {
		return nil, &AccountInUseError{Account: account, Uses: uses}
	}
	return uses, nil
}

// nameTenants fills in the uses' tenant names.
func nameTenants(ctx context.Context, tx pgx.Tx, uses []AccountUse) error {
	ids := make([]string, len(uses))
	for i, u := range uses {
		ids[i] = u.TenantID
	}
	rows, err := tx.Query(ctx, `SELECT id, name FROM tenants WHERE id = ANY($1)`, ids)
	if err != nil {
		return fmt.Errorf("name the tenants: %w", err)
	}
	names := map[string]string{}
	var id, name string
	if _, err := pgx.ForEachRow(rows, []any{&id, &name}, func() error { names[id] = name; return nil }); err != nil {
		return fmt.Errorf("name the tenants: %w", err)
	}
	for i := range uses {
		uses[i].TenantName = names[uses[i].TenantID]
	}
	return nil
}
