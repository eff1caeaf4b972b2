package operator

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/envconfig"
	"github.com/oncepay/oncepay/internal/tenant"
)

// Command is one invocation of the binary, parsed before anything reads
// the configuration or connects, so that help never needs a database.
type Command struct {
	// Name is the command's words ("serve", "tenants create", "payments
	// list", …) or "help".
	Name string
	// tenant is the tenant name of "tenants create" and "tenants ensure".
	tenant string
	// args are the positional arguments, in the order the command's usage
	// names them.
	args []string
	// opts are the flags.
	opts options
	// help is the text printed by "help", and variables the environment
	// variables the command it describes reads.
	help      string
	variables []string
	// kinds is the registry the command acts on.
	kinds operation.Kinds
}

// options are the flags of every command; each command defines the ones it
// reads.
type options struct {
	json             bool
	status, tenant   string
	since, until     time.Time
	limit            int
	open             bool
	reason, operator string
	note             string
	grace            time.Duration
	stripeAccount    string
	force            bool
}

// spec describes one command: its words, its arguments, its help and its
// flags.
type spec struct {
	name    string
	args    []string
	summary string
	help    string
	flags   func(fs *flag.FlagSet, o *options)
	// check validates the parsed flags (required ones, ranges).
	check func(o *options) error
	// reads is the configuration the command reads; the zero value is the
	// database's, what every operator's command reads.
	reads reads
}

// reads names a command's configuration.
type reads int

const (
	readsDatabase reads = iota
	readsServe
	readsHealthcheck
	// readsProvider: the database's and the provider's, as the worker has
	// them (the commands that look something up at the provider).
	readsProvider
)

// Variables are the environment variables the binary's configurations
// read, which its help lists: the binary's own to say, but for the
// provider's settings, which only the operator's commands read.
type Variables struct {
	// Serve is what "serve" reads, Healthcheck what "healthcheck" reads,
	// and Database what every command that opens the database reads.
	Serve, Healthcheck, Database []string
}

// of lists the environment variables a command that reads r reads.
func (v Variables) of(r reads) []string {
	switch r {
	case readsServe:
		return v.Serve
	case readsHealthcheck:
		return v.Healthcheck
	case readsProvider:
		return slices.Sorted(slices.Values(slices.Concat(v.Database, envconfig.Names(loadProviderConfig))))
	}
	return v.Database
}

// commandTable is the command table, in the order of the usage text, its
// help naming the kinds of registry.
func commandTable(registry operation.Kinds) []spec {
	return []spec{
		{name: "serve", reads: readsServe, summary: "serve HTTP on LISTEN_ADDR (the default command)", help: `Serves the HTTP API on LISTEN_ADDR until SIGINT or SIGTERM, then drains
in-flight requests for up to SHUTDOWN_TIMEOUT.`},
		{name: "healthcheck", reads: readsHealthcheck, summary: "exit 0 if the API on LISTEN_ADDR is ready, 1 if not", help: `Asks the API serving on LISTEN_ADDR (this machine's, for a wildcard address
such as 0.0.0.0) for /readyz and exits 0 if it answers 200 within 3s, 1 if not:
the health check of an image without curl. It opens no database connection
of its own; /readyz answers whether the server's pool reaches the database.`},
		{name: "migrate", summary: "apply all migrations (River's and oncepay's) and exit", help: `Applies River's and oncepay's migrations to DATABASE_URL and exits. Safe to run
again: a database that is up to date is left as it is.`},
		{name: "tenants create", args: []string{"NAME"}, summary: "create a tenant and print its API key once, as JSON", help: `Creates a tenant named NAME (1 to 200 characters, unique) with one API key, and
prints {"tenant_id": ..., "api_key": ...} as JSON. The key is shown only this
once: only its hash is stored. Fails if a tenant with that name exists.

With --stripe-account, every provider call made for the tenant acts on that
Stripe connected account (the Stripe-Account header), where other accounts'
customers, intents and refunds do not exist. One account belongs to one tenant.`, flags: func(fs *flag.FlagSet, o *options) {
			fs.StringVar(&o.stripeAccount, "stripe-account", "", "the tenant's Stripe connected account (acct_…); none: the platform's own")
		}, check: func(o *options) error {
			if o.stripeAccount == "" {
				return nil
			}
			return tenant.ValidStripeAccount(o.stripeAccount)
		}},
		{name: "tenants ensure", args: []string{"NAME"}, summary: "create the tenant if needed, print a new API key", help: `Creates the tenant NAME if it does not exist, then issues a new API key for it
and prints {"tenant_id": ..., "api_key": ...} as JSON. Keys issued before stay
valid. Meant for scripts and one-shot setup steps that may run more than once.`},
		{name: "tenants list", summary: "list the tenants and their API keys (no secrets)", help: `Lists every tenant with its API keys: each key's id (an API key reads
opk_<id>_<secret>), when it was issued, when it expires (after a rotation) or
was revoked, and whether it authenticates now.`, flags: jsonFlag},
		{name: "tenants rotate-key", args: []string{"TENANT"}, summary: "issue a new API key; the old ones end after --grace", help: `Issues a new API key for TENANT (its id or its name) and prints it once. Every
key valid before keeps working for the grace period, then stops: time to
redeploy the clients with the new key. A key already due to end sooner keeps
its earlier end. --grace 0 ends the old keys at once.`, flags: func(fs *flag.FlagSet, o *options) {
			jsonFlag(fs, o)
			fs.DurationVar(&o.grace, "grace", tenant.DefaultGrace, "how long the keys valid before the rotation stay valid (e.g. 1h, 72h)")
		}, check: func(o *options) error {
			if o.grace < 0 {
				return errors.New("--grace cannot be negative")
			}
			return nil
		}},
		{name: "tenants set-account", args: []string{"TENANT", "ACCOUNT"}, summary: "set or change the tenant's Stripe connected account", help: `Gives TENANT (its id or its name) the Stripe connected account ACCOUNT
(acct_…): its new payments, and their refunds, captures and cancels, are made
on that account. "none" takes the account away: new payments are made on the
platform's own account, where a customer belongs to the first tenant that paid
with it. Payments made before keep the account they were made on. One account
belongs to one tenant.

Every operation acts on the account it was made on, so an account that another
tenant's operations can still act on is refused, naming that tenant and its
operations: those in flight or awaiting reconciliation, failed unsent with a
key a retry may resume, payments that can still be captured or refunded, and
payouts pending or in transit. Its refunds, captures, cancels and resumed sends
would then move the new holder's money, and the account's events settle them.
--force gives the account even so, with --operator and --reason, and prints the
operations it overrode; they keep acting on the account.`, flags: func(fs *flag.FlagSet, o *options) {
			jsonFlag(fs, o)
			fs.BoolVar(&o.force, "force", false, "give the account even though another tenant's operations can still act on it")
			fs.StringVar(&o.reason, "reason", "", "why, with what you checked (required with --force)")
			fs.StringVar(&o.operator, "operator", "", "who says so (required with --force)")
		}, check: func(o *options) error {
			if !o.force {
				if o.reason != "" || o.operator != "" {
					return errors.New("--reason and --operator go with --force")
				}
				return nil
			}
			return requireFlags("operator", "reason")(o)
		}},
		{name: "tenants revoke-key", args: []string{"TENANT", "KEY"}, summary: "end one API key at once", help: `Revokes one API key of TENANT (its id or its name) at once: the next request
with it is answered 401. KEY is the key's id, as "api tenants list" shows it,
or the whole key (opk_<id>_<secret>), as found in a leak. Revoking a revoked
key changes nothing.`, flags: jsonFlag},
		{name: "payments list", summary: "list payments of every tenant, newest first", help: `Lists payments of every tenant, newest first, with their state, amount,
failure code and reconciliation schedule.`, flags: func(fs *flag.FlagSet, o *options) {
			jsonFlag(fs, o)
			fs.StringVar(&o.status, "status", "", "only payments in this state: "+paymentStates())
			fs.StringVar(&o.tenant, "tenant", "", "only this tenant's payments (its id or its name)")
			fs.Func("since", "only payments created since then: a duration back from now (26h) or a time (2006-01-02, RFC 3339)", timeFlag(&o.since))
			fs.IntVar(&o.limit, "limit", 50, "at most this many payments (1 to 1000)")
		}, check: func(o *options) error {
			if o.status != "" && !payments.Status(o.status).Valid() {
				return fmt.Errorf("--status %q is not a payment state; the states are %s", o.status, paymentStates())
			}
			if o.limit < 1 || o.limit > 1000 {
				return errors.New("--limit must be 1 to 1000")
			}
			return nil
		}},
		{name: "payments show", args: []string{"ID"}, summary: "everything known of one payment", help: `Shows one payment: its state, its idempotency key and the key's state (and any
release of it), what we know of its provider calls (intent, provider key,
generation, attempt times, reconciliation schedule), its River jobs with the
errors of their attempts, the provider's events about it and its ledger
findings. It only reads.`, flags: jsonFlag},
		{name: "operations list", args: []string{"KIND"}, summary: "list one kind's operations of every tenant, newest first", help: `Lists the operations of KIND (every registered kind: ` + strings.Join(registry.Names(), ", ") + `)
of every tenant, newest first, with their state, their
payment (for a kind that has one), their key and why they failed.`, flags: func(fs *flag.FlagSet, o *options) {
			jsonFlag(fs, o)
			fs.StringVar(&o.status, "status", "", "only operations in this state")
			fs.IntVar(&o.limit, "limit", 50, "at most this many operations (1 to 1000)")
		}, check: func(o *options) error {
			if o.limit < 1 || o.limit > 1000 {
				return errors.New("--limit must be 1 to 1000")
			}
			return nil
		}},
		{name: "operations show", args: []string{"ID"}, summary: "one operation of any kind: its state, its key, its jobs", help: `Shows one operation of any kind by its id (` + registry.Described() + `):
its state as an operator sees it, its idempotency key and the key's state, and
its River jobs with the errors of their attempts. It only reads.`, flags: jsonFlag},
		{name: "reconcile", reads: readsProvider, args: []string{"ID"}, summary: "look an operation of any kind (" + strings.Join(registry.Names(), ", ") + ") up at the provider now and settle it", help: `Looks operation ID up at the provider now and settles it with its kind's
own code; it never sends anything (never charges, refunds or pays out). The
kinds, by their ids: ` + registry.Described() + `.

One in requires_reconciliation is reconciled as its reconciler's next run
would, whatever its schedule (also one left to an operator): a payment's
charge found by its intent's metadata, a refund among the intent's refunds, a
capture or a cancel by reading the payment's intent, a payout by reading it.
Any other whose provider object is known has the object read and is settled
from it as the object's event would settle it: a waiting one becomes final,
and a final one the provider contradicts is left as it is, with a ledger
finding. One that names no object yet is left as it is (verdict "unchanged",
exit 0).

Needs STRIPE_SECRET_KEY and STRIPE_API_BASE as the worker has them, and reads
RECONCILE_SETTLE like it: "never made" is proven only once no request can
still be in flight, by the deadline the worker stamped on the row
with each attempt.`, flags: jsonFlag},
		{name: "keys release", reads: readsProvider, args: []string{"TENANT", "KEY"}, summary: "release a key stuck unknown, once the provider proves nothing was made", help: `Releases idempotency key KEY of TENANT (its id or its name), stuck "unknown".
Your word alone never releases a key: a charge can exist at the provider that
we never heard of, and a released key lets the client's retry charge again.
So the key's operation, of any kind (` + strings.Join(registry.Names(), ", ") + `), is first
looked up at the provider by its own reconciler:

  - the provider proves nothing was made: the operation becomes failed
    (provider_not_reached) and the key failed_retryable, and the release is
    recorded with --reason and --operator; the client's retry with the same
    key sends it under its next generation;
  - the provider made it, final: the operation is settled from it and the
    key completed (verdict "settled"); nothing is released;
  - it is still pending, or the provider cannot be asked or cannot tell
    yet: refused, saying why; nothing changes.

Refused
for a key in any other state. Needs the provider's settings as for "api reconcile".`, flags: func(fs *flag.FlagSet, o *options) {
			jsonFlag(fs, o)
			fs.StringVar(&o.reason, "reason", "", "why, with what you checked (required)")
			fs.StringVar(&o.operator, "operator", "", "who releases it (required)")
		}, check: requireFlags("reason", "operator")},
		{name: "ledger check", reads: readsProvider, summary: "compare the provider's objects with ours: " + withLedgerCheck(registry), help: `Lists the provider's objects created in a window, of every kind that has a
ledger check (` + withLedgerCheck(registry) + `), and compares them with ours; every
disagreement is recorded as a ledger finding (one open finding per
disagreement) and printed. It only
reads at the provider: it never charges, refunds or cancels. The worker runs
the same check every LEDGER_CHECK_INTERVAL over LEDGER_CHECK_WINDOW.

Needs STRIPE_SECRET_KEY and STRIPE_API_BASE as the worker has them.

Exit status: 0 when the books agree, 3 when it found disagreements (new or
already open), 1 when the check could not be made (configuration, database,
provider).`, flags: func(fs *flag.FlagSet, o *options) {
			jsonFlag(fs, o)
			fs.Func("since", "start of the window: a duration back from now or a time (default 26h)", timeFlag(&o.since))
			fs.Func("until", "end of the window: a duration back from now or a time (default now)", timeFlag(&o.until))
		}, check: func(o *options) error {
			if o.until.IsZero() {
				o.until = time.Now()
			}
			if o.since.IsZero() {
				o.since = o.until.Add(-26 * time.Hour)
			}
			if !o.since.Before(o.until) {
				return errors.New("--since must be before --until")
			}
			return nil
		}},
		{name: "findings list", summary: "list ledger findings, newest first", help: `Lists ledger findings (disagreements between our payments or refunds and the
provider's), newest first, with their evidence in --json.`, flags: func(fs *flag.FlagSet, o *options) {
			jsonFlag(fs, o)
			fs.BoolVar(&o.open, "open", false, "only findings not yet resolved")
			fs.IntVar(&o.limit, "limit", 100, "at most this many findings (1 to 1000)")
		}, check: func(o *options) error {
			if o.limit < 1 || o.limit > 1000 {
				return errors.New("--limit must be 1 to 1000")
			}
			return nil
		}},
		{name: "findings resolve", args: []string{"ID"}, summary: "close a finding with how it was resolved", help: `Marks finding ID resolved, with a note saying what was done and who did it.
It changes nothing else: the refund or the corrected row is your doing.`, flags: func(fs *flag.FlagSet, o *options) {
			jsonFlag(fs, o)
			fs.StringVar(&o.note, "note", "", "what was done (required)")
			fs.StringVar(&o.operator, "operator", "", "who resolved it (required)")
		}, check: requireFlags("note", "operator")},
	}
}

func jsonFlag(fs *flag.FlagSet, o *options) {
	fs.BoolVar(&o.json, "json", false, "print JSON instead of a table")
}

func requireFlags(names ...string) func(o *options) error {
	return func(o *options) error {
		values := map[string]string{"reason": o.reason, "operator": o.operator, "note": o.note}
		for _, name := range names {
			if strings.TrimSpace(values[name]) == "" {
				return fmt.Errorf("--%s is required", name)
			}
		}
		return nil
	}
}

// timeFlag parses a duration back from now (26h), a date or an RFC 3339
// time.
func timeFlag(t *time.Time) func(string) error {
	return func(s string) error {
		if d, err := time.ParseDuration(s); err == nil {
			*t = time.Now().Add(-d)
			return nil
		}
		for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02"} {
			if v, err := time.Parse(layout, s); err == nil {
				*t = v
				return nil
			}
		}
		return fmt.Errorf("%q is neither a duration (26h) nor a time (2006-01-02, RFC 3339)", s)
	}
}

func (s spec) synopsis() string {
	return strings.TrimSpace("api " + s.name + " " + strings.Join(s.args, " "))
}

// usage is the overview printed by "api help".
func usage(commands []spec) string {
	var b strings.Builder
	b.WriteString("usage:\n")
	for _, s := range commands {
		syn := s.synopsis()
		if s.name == "serve" {
			syn = "api [serve]"
		}
		fmt.Fprintf(&b, "  %-34s %s\n", syn, s.summary)
	}
	b.WriteString(`
Every command reads its configuration from the environment (docs/configuration.md);
add --help to a command for its own help and flags. Flags may come before or
after the arguments.`)
	return b.String()
}

// fullHelp is one command's help, with its flags.
func (s spec) fullHelp() string {
	syn := s.synopsis()
	if s.name == "serve" {
		syn = "api [serve]"
	}
	text := "usage: " + syn
	if s.flags != nil {
		text += " [flags]"
	}
	text += "\n\n" + s.help
	if s.flags != nil {
		fs := flag.NewFlagSet(s.name, flag.ContinueOnError)
		var o options
		s.flags(fs, &o)
		var b bytes.Buffer
		fs.SetOutput(&b)
		fs.PrintDefaults()
		text += "\n\nflags:\n" + b.String()
	}
	return strings.TrimRight(text, "\n")
}

// groupUsage lists the commands of a group ("keys", "tenants"): those
// whose name starts with the group's word. ok is false for a word that
// names no group.
func groupUsage(commands []spec, group string) (string, bool) {
	var b strings.Builder
	for _, s := range commands {
		if strings.HasPrefix(s.name, group+" ") {
			fmt.Fprintf(&b, "  %-34s %s\n", s.synopsis(), s.summary)
		}
	}
	if b.Len() == 0 {
		return "", false
	}
	return "usage:\n" + b.String() + "\nadd --help to a command for its own help and flags.", true
}

func lookupSpec(commands []spec, name string) (spec, bool) {
	for _, s := range commands {
		if s.name == name {
			return s, true
		}
	}
	return spec{}, false
}

// match finds the command named by the leading words (the longest name
// that matches), and returns it with the words after its name.
func match(commands []spec, words []string) (spec, []string, bool) {
	if len(words) == 0 {
		s, _ := lookupSpec(commands, "serve")
		return s, nil, true
	}
	for _, n := range []int{2, 1} {
		if len(words) < n {
			continue
		}
		if s, ok := lookupSpec(commands, strings.Join(words[:n], " ")); ok {
			return s, words[n:], true
		}
	}
	return spec{}, nil, false
}

// Names are every command's words, in the order of the usage text.
func Names() []string {
	commands := commandTable(nil)
	names := make([]string, len(commands))
	for i, s := range commands {
		names[i] = s.name
	}
	return names
}

func isHelpFlag(w string) bool { return w == "-h" || w == "-help" || w == "--help" }

// Parse reads args (the program name first), its help listing vars and
// the kinds of registry, which the command then acts on. Flags and
// positional arguments may be interleaved.
func Parse(args []string, vars Variables, registry operation.Kinds) (Command, error) {
	commands := commandTable(registry)
	usage := func() string { return usage(commands) }
	words := args[1:]
	if len(words) == 1 && words[0] == "help" {
		return Command{Name: "help", help: usage(), variables: vars.of(readsServe)}, nil
	}
	s, rest, ok := match(commands, words)
	group, isGroup := "", false
	if !ok && len(words) > 0 {
		group, isGroup = groupUsage(commands, words[0])
	}
	for _, w := range words {
		if isHelpFlag(w) {
			switch {
			case ok:
				return Command{Name: "help", help: s.fullHelp(), variables: vars.of(s.reads)}, nil
			case isGroup:
				return Command{Name: "help", help: group, variables: vars.of(readsServe)}, nil
			}
			return Command{Name: "help", help: usage(), variables: vars.of(readsServe)}, nil
		}
	}
	switch {
	case !ok && isGroup && len(words) == 1:
		return Command{}, fmt.Errorf("%s: which command?\n%s", words[0], group)
	case !ok && isGroup:
		return Command{}, fmt.Errorf("unknown command %q\n%s", strings.Join(words, " "), group)
	case !ok:
		return Command{}, fmt.Errorf("unknown command %q\n%s", strings.Join(words, " "), usage())
	}
	fail := func(format string, a ...any) (Command, error) {
		return Command{}, fmt.Errorf("%s: %s\n%s", s.name, fmt.Sprintf(format, a...), s.fullHelp())
	}
	fs := flag.NewFlagSet(s.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var opts options
	if s.flags != nil {
		s.flags(fs, &opts)
	}
	var positional []string
	for {
		if err := fs.Parse(rest); err != nil {
			return fail("%v", err)
		}
		rest = fs.Args()
		if len(rest) == 0 {
			break
		}
		positional = append(positional, rest[0])
		rest = rest[1:]
	}
	switch {
	case len(positional) < len(s.args):
		return fail("missing %s", strings.Join(s.args[len(positional):], " "))
	case len(positional) > len(s.args):
		return fail("unexpected argument %q", positional[len(s.args)])
	}
	if s.check != nil {
		if err := s.check(&opts); err != nil {
			return fail("%v", err)
		}
	}
	cmd := Command{Name: s.name, args: positional, opts: opts, kinds: registry}
	if s.name == "tenants create" || s.name == "tenants ensure" {
		cmd.tenant = positional[0]
	}
	return cmd, nil
}

// WriteHelp prints the text of a "help" command, with the environment
// variables of the command it describes.
func (c Command) WriteHelp(w io.Writer) error {
	_, err := fmt.Fprintf(w, "%s\n\nEnvironment variables read (docs/configuration.md describes each):\n  %s\n",
		c.help, strings.Join(c.variables, "\n  "))
	return err
}

// paymentStates names every payment state, as the API answers them.
func paymentStates() string {
	names := make([]string, 0, len(payments.Statuses()))
	for _, s := range payments.Statuses() {
		names = append(names, string(s))
	}
	return strings.Join(names, ", ")
}

// withLedgerCheck names the kinds that have a ledger check, from the
// registry.
func withLedgerCheck(registry operation.Kinds) string {
	env := operation.Env{Logger: slog.New(slog.DiscardHandler)}
	var names []string
	for _, k := range registry {
		if k.Ledger(env) != nil {
			names = append(names, k.Name()+"s")
		}
	}
	return strings.Join(names, ", ")
}
