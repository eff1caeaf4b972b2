// Package console is the operator's web view of the books, served by the
// worker on its admin listener (never the public port): payments with
// filters, a payment's timeline (its key, its jobs' attempts, each provider
// call, the webhooks received, its refunds, captures and cancels, its
// reconciliation and findings), the open ledger findings, and the alerts
// that hold now. It only reads: every action stays in the api commands,
// where it is recorded with its operator and reason.
package console

import (
	"embed"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/tenant"
)

// Path is where the console is mounted.
const Path = "/console/"

// Config is what the console reads.
type Config struct {
	Pool *pgxpool.Pool
	// Keys reads the payments' idempotency keys.
	Keys *idempotency.Store
	// Metrics is gathered for the alerts page: the worker's own registry,
	// with the gauges its alert rules read.
	Metrics prometheus.Gatherer
	Logger  *slog.Logger
	// QueueUI is where River's UI is served on the same listener
	// (/riverui); the pages link jobs and queues into it. Empty: no links.
	QueueUI string
	// Kinds are the operation kinds the pages list and show: the registry.
	Kinds operation.Kinds
}

//go:embed templates/*.html
var templateFiles embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"ts":      formatTime,
	"tsp":     formatTimePtr,
	"str":     formatString,
	"amount":  formatAmount,
	"runbook": runbookLink,
}).ParseFS(templateFiles, "templates/*.html"))

// Handler serves the console under Path.
func Handler(cfg Config) http.Handler {
	c := &server{cfg: cfg}
	c.runbookHTML, c.runbookErr = renderRunbook()
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Path+"{$}", c.payments)
	mux.HandleFunc("GET "+Path+"payments/{id}", c.payment)
	mux.HandleFunc("GET "+Path+"operations", c.operations)
	mux.HandleFunc("GET "+Path+"operations/{id}", c.operation)
	mux.HandleFunc("GET "+Path+"findings", c.findings)
	mux.HandleFunc("GET "+Path+"alerts", c.alerts)
	mux.HandleFunc("GET "+Path+"runbook", c.runbook)
	return mux
}

type server struct {
	cfg Config
	// runbookHTML is docs/operations.md, rendered once.
	runbookHTML template.HTML
	runbookErr  error
}

// render writes a page with the shared layout; a template error after the
// header is written can only be logged.
func (c *server) render(w http.ResponseWriter, r *http.Request, status int, name string, data map[string]any) {
	data["QueueUI"] = c.cfg.QueueUI
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	// Operator pages hold customer data: never cached on the way.
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if err := pages.ExecuteTemplate(w, name, data); err != nil {
		c.cfg.Logger.ErrorContext(r.Context(), "console: render page", slog.String("page", name), slog.Any("error", err))
	}
}

func (c *server) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	if status >= 500 {
		c.cfg.Logger.ErrorContext(r.Context(), "console: read failed", slog.String("path", r.URL.Path), slog.Any("error", err))
	}
	c.render(w, r, status, "error.html", map[string]any{"Title": http.StatusText(status), "Message": err.Error()})
}

// paymentFilter is the payments page's form.
type paymentFilter struct {
	Status, Tenant, Since string
}

// sinceChoices are the age filters offered.
var sinceChoices = []string{"1h", "24h", "168h"}

func (c *server) payments(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	form := paymentFilter{Status: q.Get("status"), Tenant: q.Get("tenant"), Since: q.Get("since")}
	f := payments.ListFilter{Status: payments.Status(form.Status), Limit: 100}
	if form.Status != "" && !payments.Status(form.Status).Valid() {
		c.fail(w, r, http.StatusBadRequest, fmt.Errorf("status %q is not a payment state", form.Status))
		return
	}
	if form.Since != "" {
		d, err := time.ParseDuration(form.Since)
		if err != nil || d <= 0 {
			c.fail(w, r, http.StatusBadRequest, fmt.Errorf("since %q is not a duration such as 24h", form.Since))
			return
		}
		f.Since = time.Now().Add(-d)
	}
	if form.Tenant != "" {
		id, err := tenant.Lookup(r.Context(), c.cfg.Pool, form.Tenant)
		if errors.Is(err, tenant.ErrNotFound) {
			c.fail(w, r, http.StatusNotFound, err)
			return
		}
		if err != nil {
			c.fail(w, r, http.StatusServiceUnavailable, err)
			return
		}
		f.TenantID = id
	}
	list, err := payments.ListAll(r.Context(), c.cfg.Pool, f)
	if err != nil {
		c.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	c.render(w, r, http.StatusOK, "payments.html", map[string]any{
		"Title": "Payments", "Payments": list, "Filter": form, "Statuses": payments.Statuses(), "Since": sinceChoices,
	})
}

func (c *server) payment(w http.ResponseWriter, r *http.Request) {
	d, err := payments.Show(r.Context(), c.cfg.Pool, c.cfg.Keys, r.PathValue("id"))
	if errors.Is(err, payments.ErrNotFound) {
		c.fail(w, r, http.StatusNotFound, fmt.Errorf("no payment %q", r.PathValue("id")))
		return
	}
	if err != nil {
		c.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	ops, err := OperationsOf(r.Context(), c.cfg.Pool, c.cfg.Kinds, d.Payment)
	if err == nil {
		err = AddOperationJobs(r.Context(), c.cfg.Pool, &d, ops)
	}
	if err != nil {
		c.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	c.render(w, r, http.StatusOK, "payment.html", map[string]any{
		"Title": "Payment " + d.Payment.ID, "Payment": d.Payment, "Detail": d, "Operations": ops,
		"Account": AccountName(d.Payment.ProviderAccount), "Timeline": timeline(d, ops),
	})
}

func (c *server) findings(w http.ResponseWriter, r *http.Request) {
	open, err := ledger.Open(r.Context(), c.cfg.Pool)
	if err != nil {
		c.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	c.render(w, r, http.StatusOK, "findings.html", map[string]any{"Title": "Open ledger findings", "Findings": open})
}

func (c *server) alerts(w http.ResponseWriter, r *http.Request) {
	families, err := c.cfg.Metrics.Gather()
	if err != nil {
		c.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	c.render(w, r, http.StatusOK, "alerts.html", map[string]any{"Title": "Alerts", "Alerts": evaluate(families)})
}

// AccountName names the provider account a payment was made on, as an
// operator reads it.
func AccountName(account *string) string {
	if account == nil {
		return "the platform's own"
	}
	return *account
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

func formatTimePtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return formatTime(*t)
}

func formatString(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return *s
}

// formatAmount writes an amount in the currency's smallest unit as a
// decimal with two places, the common case; the raw amount is the title.
func formatAmount(amount int64, currency string) string {
	sign := ""
	if amount < 0 {
		sign, amount = "-", -amount
	}
	return sign + strconv.FormatInt(amount/100, 10) + "." + fmt.Sprintf("%02d", amount%100) + " " + strings.ToUpper(currency)
}
