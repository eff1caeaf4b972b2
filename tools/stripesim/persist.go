package stripesim

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"
)

// A simulator that outlives its process: the local stack keeps its state in
// a file (stripesim's STRIPESIM_STATE_FILE), so that a restarted stack's
// provider still has the intents, refunds, payouts, keys and events its
// books name;
// the ledger check would otherwise find every earlier payment missing.
// Faults, undelivered webhooks and requests in flight are not kept: they
// belong to the process that had them.

// savedState is the state as JSON.
type savedState struct {
	Version    int               `json:"version"`
	Seq        int64             `json:"seq"`
	ClockAhead time.Duration     `json:"clock_ahead"`
	Intents    []savedIntent     `json:"intents"`
	Charges    []savedCharge     `json:"charges"`
	Refunds    []savedRefund     `json:"refunds"`
	Payouts    []savedPayout     `json:"payouts"`
	Keys       []savedKey        `json:"keys"`
	Events     []savedEvent      `json:"events"`
	Customers  map[string]string `json:"customers"`
	Funded     []savedFunding    `json:"funded"`
}

// savedFunding is what POST /_sim/balance added to one balance.
type savedFunding struct {
	Account, Currency string
	Amount            int64
}

// stateVersion changes whenever savedState does: a file of another version
// is refused, not half read. Version 2 added payouts and refunds' Released,
// version 3 the funding; an older file, written before they existed, has
// none and is read whole, so it is still accepted.
const stateVersion = 3

// oldestStateVersion is the oldest version LoadState reads.
const oldestStateVersion = 1

type savedIntent struct {
	ID, ClientSecret     string
	Seq, Created         int64
	CreatedAt            time.Time
	Account              string
	IdempotencyKey       string
	Amount               int64
	Currency, Customer   string
	Description          string
	ReceiptEmail         string
	PaymentMethod        string
	PaymentMethodTypes   []string
	AutomaticMethods     *automaticPaymentMethodsJSON
	Metadata             map[string]string
	Status, LatestCharge string
	LastError            *apiError
	CanceledAt           int64
	CancellationReason   string
	ProcessingRetrievals int
	CaptureMethod        string
	AuthorizedAt         time.Time
	AmountReceived       int64
	Captures             int
}

type savedCharge struct {
	ID, IntentID, Account       string
	Seq, Created                int64
	IdempotencyKey              string
	Amount, AmountRefunded      int64
	Currency, Customer          string
	Description                 string
	Metadata                    map[string]string
	PaymentMethod               string
	Status                      string
	FailureCode, FailureMessage string
	Uncaptured                  bool
}

type savedRefund struct {
	ID, ChargeID, IntentID, Account string
	Seq, Created                    int64
	IdempotencyKey                  string
	Amount                          int64
	Currency                        string
	Metadata                        map[string]string
	Reason                          string
	Released                        bool
}

type savedPayout struct {
	ID, Account                 string
	Seq, Created                int64
	CreatedAt                   time.Time
	IdempotencyKey              string
	Amount                      int64
	Currency, Description       string
	Metadata                    map[string]string
	StatementDescriptor         string
	Status                      string
	FailureCode, FailureMessage string
	Reversal                    string
}

type savedKey struct {
	APIKey, Account, Key string
	Seq                  int64
	Method, Path         string
	Fingerprint          string
	Released             bool
	Status               int
	Body                 []byte
	Rejected             bool
	RequestID            string
	Executions           int
	Rejections           int
	Replays              int
	Conflicts            int
	Mismatches           int
}

type savedEvent struct {
	ID                        string
	Seq, Created              int64
	Account, Type, APIVersion string
	Object                    json.RawMessage
	RequestID, IdempotencyKey string
	Stamped                   bool
}

// SaveState writes the simulator's objects, keys and events to w as JSON.
// Balances are not written: LoadState sums them from the objects.
func (s *Server) SaveState(w io.Writer) error {
	s.mu.Lock()
	saved := s.st.saved()
	saved.ClockAhead = s.clockAhead
	s.mu.Unlock()
	enc := json.NewEncoder(w)
	if err := enc.Encode(saved); err != nil {
		return fmt.Errorf("stripesim: save state: %w", err)
	}
	return nil
}

// LoadState replaces the simulator's objects, keys and events with those
// SaveState wrote to r. Faults are left as they are.
func (s *Server) LoadState(r io.Reader) error {
	var saved savedState
	if err := json.NewDecoder(r).Decode(&saved); err != nil {
		return fmt.Errorf("stripesim: load state: %w", err)
	}
	if saved.Version < oldestStateVersion || saved.Version > stateVersion {
		return fmt.Errorf("stripesim: load state: version %d, this simulator reads %d to %d", saved.Version, oldestStateVersion, stateVersion)
	}
	st := restore(saved)
	s.mu.Lock()
	defer s.mu.Unlock()
	st.faults, st.webhookFaults = s.st.faults, s.st.webhookFaults
	s.st, s.clockAhead = st, saved.ClockAhead
	// Payouts that were on their way move on in this process.
	s.watchPayouts()
	return nil
}

// Changes counts the changes to the state: a saver compares it with the
// count it last saved at.
func (s *Server) Changes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.seq + int64(len(s.st.keys))
}

// saved copies the state. Called with Server.mu held.
func (st *state) saved() savedState {
	out := savedState{Version: stateVersion, Seq: st.seq, Customers: maps.Clone(st.customers)}
	for k, n := range st.funded {
		out.Funded = append(out.Funded, savedFunding{Account: k.account, Currency: k.currency, Amount: n})
	}
	slices.SortFunc(out.Funded, func(a, b savedFunding) int {
		return cmp.Or(cmp.Compare(a.Account, b.Account), cmp.Compare(a.Currency, b.Currency))
	})
	for _, in := range sortedBySeq(st.intents, func(in *intent) int64 { return in.seq }) {
		out.Intents = append(out.Intents, savedIntent{
			ID: in.id, ClientSecret: in.clientSecret, Seq: in.seq, Created: in.created, CreatedAt: in.createdAt, Account: in.account,
			IdempotencyKey: in.idempotencyKey, Amount: in.amount, Currency: in.currency, Customer: in.customer, Description: in.description,
			ReceiptEmail: in.receiptEmail, PaymentMethod: in.paymentMethod, PaymentMethodTypes: in.paymentMethodTypes,
			AutomaticMethods: in.automaticMethods, Metadata: in.metadata, Status: in.status, LatestCharge: in.latestCharge,
			LastError: in.lastError, CanceledAt: in.canceledAt, CancellationReason: in.cancellationReason,
			ProcessingRetrievals: in.processingRetrievals, CaptureMethod: in.captureMethod, AuthorizedAt: in.authorizedAt,
			AmountReceived: in.amountReceived, Captures: in.captures,
		})
	}
	for _, ch := range sortedBySeq(st.charges, func(ch *charge) int64 { return ch.seq }) {
		out.Charges = append(out.Charges, savedCharge{
			ID: ch.id, IntentID: ch.intentID, Account: ch.account, Seq: ch.seq, Created: ch.created, IdempotencyKey: ch.idempotencyKey,
			Amount: ch.amount, AmountRefunded: ch.amountRefunded, Currency: ch.currency, Customer: ch.customer, Description: ch.description,
			Metadata: ch.metadata, PaymentMethod: ch.paymentMethod, Status: ch.status, FailureCode: ch.failureCode,
			FailureMessage: ch.failureMessage, Uncaptured: ch.uncaptured,
		})
	}
	for _, re := range sortedBySeq(st.refunds, func(re *refund) int64 { return re.seq }) {
		out.Refunds = append(out.Refunds, savedRefund{
			ID: re.id, ChargeID: re.chargeID, IntentID: re.intentID, Account: re.account, Seq: re.seq, Created: re.created,
			IdempotencyKey: re.idempotencyKey, Amount: re.amount, Currency: re.currency, Metadata: re.metadata, Reason: re.reason,
			Released: re.released,
		})
	}
	for _, po := range sortedBySeq(st.payouts, func(po *payout) int64 { return po.seq }) {
		out.Payouts = append(out.Payouts, savedPayout{
			ID: po.id, Account: po.account, Seq: po.seq, Created: po.created, CreatedAt: po.createdAt, IdempotencyKey: po.idempotencyKey,
			Amount: po.amount, Currency: po.currency, Description: po.description, Metadata: po.metadata,
			StatementDescriptor: po.descriptor, Status: po.status, FailureCode: po.failureCode, FailureMessage: po.failureMessage,
			Reversal: po.reversal,
		})
	}
	for _, k := range sortedBySeq(st.keys, func(k *keyEntry) int64 { return k.seq }) {
		if k.state == keyExecuting {
			continue // its request belongs to this process; a retry executes afresh
		}
		out.Keys = append(out.Keys, savedKey{
			APIKey: k.scope.apiKey, Account: k.scope.account, Key: k.scope.key, Seq: k.seq, Method: k.method, Path: k.path,
			Fingerprint: k.fingerprint, Released: k.state == keyReleased, Status: k.resp.status, Body: k.resp.body,
			Rejected: k.resp.rejected, RequestID: k.requestID, Executions: k.executions, Rejections: k.rejections,
			Replays: k.replays, Conflicts: k.conflicts, Mismatches: k.mismatches,
		})
	}
	for _, e := range st.events {
		out.Events = append(out.Events, savedEvent{
			ID: e.id, Seq: e.seq, Created: e.created, Account: e.account, Type: e.typ, APIVersion: e.apiVersion, Object: e.object,
			RequestID: e.requestID, IdempotencyKey: e.idempotencyKey, Stamped: e.stamped,
		})
	}
	return out
}

// restore makes a state from a saved one.
func restore(saved savedState) *state {
	st := newState()
	st.seq = saved.Seq
	if saved.Customers != nil {
		st.customers = saved.Customers
	}
	for _, in := range saved.Intents {
		restored := &intent{
			id: in.ID, clientSecret: in.ClientSecret, seq: in.Seq, created: in.Created, createdAt: in.CreatedAt, account: in.Account,
			idempotencyKey: in.IdempotencyKey, amount: in.Amount, currency: in.Currency, customer: in.Customer, description: in.Description,
			receiptEmail: in.ReceiptEmail, paymentMethod: in.PaymentMethod, paymentMethodTypes: in.PaymentMethodTypes,
			automaticMethods: in.AutomaticMethods, metadata: in.Metadata, status: in.Status, latestCharge: in.LatestCharge,
			lastError: in.LastError, canceledAt: in.CanceledAt, cancellationReason: in.CancellationReason,
			processingRetrievals: in.ProcessingRetrievals, captureMethod: in.CaptureMethod, authorizedAt: in.AuthorizedAt,
			amountReceived: in.AmountReceived, captures: in.Captures,
		}
		st.intents[in.ID] = restored
		if restored.status == statusRequiresCapture {
			st.authorized[in.ID] = restored
		}
	}
	for _, ch := range saved.Charges {
		card, _ := lookupTestCard(ch.PaymentMethod)
		st.charges[ch.ID] = &charge{
			id: ch.ID, intentID: ch.IntentID, account: ch.Account, seq: ch.Seq, created: ch.Created, idempotencyKey: ch.IdempotencyKey,
			amount: ch.Amount, amountRefunded: ch.AmountRefunded, currency: ch.Currency, customer: ch.Customer, description: ch.Description,
			metadata: ch.Metadata, paymentMethod: ch.PaymentMethod, card: card, status: ch.Status, failureCode: ch.FailureCode,
			failureMessage: ch.FailureMessage, uncaptured: ch.Uncaptured,
		}
	}
	for _, re := range saved.Refunds {
		st.refunds[re.ID] = &refund{
			id: re.ID, chargeID: re.ChargeID, intentID: re.IntentID, account: re.Account, seq: re.Seq, created: re.Created,
			idempotencyKey: re.IdempotencyKey, amount: re.Amount, currency: re.Currency, metadata: re.Metadata, reason: re.Reason,
			released: re.Released,
		}
	}
	for _, po := range saved.Payouts {
		restored := &payout{
			id: po.ID, account: po.Account, seq: po.Seq, created: po.Created, createdAt: po.CreatedAt, idempotencyKey: po.IdempotencyKey,
			amount: po.Amount, currency: po.Currency, description: po.Description, metadata: po.Metadata,
			descriptor: po.StatementDescriptor, status: po.Status, failureCode: po.FailureCode, failureMessage: po.FailureMessage,
			reversal: po.Reversal,
		}
		st.payouts[po.ID] = restored
		if !restored.settled() {
			st.unsettled[po.ID] = restored
		}
	}
	for _, f := range saved.Funded {
		st.funded[balanceKey{f.Account, f.Currency}] = f.Amount
	}
	st.recomputeBalances()
	for _, k := range saved.Keys {
		scope := keyScope{apiKey: k.APIKey, account: k.Account, key: k.Key}
		state := keyDone
		if k.Released {
			state = keyReleased
		}
		st.keys[scope] = &keyEntry{
			scope: scope, seq: k.Seq, method: k.Method, path: k.Path, fingerprint: k.Fingerprint, state: state,
			resp: response{status: k.Status, body: k.Body, rejected: k.Rejected}, requestID: k.RequestID, executions: k.Executions,
			rejections: k.Rejections, replays: k.Replays, conflicts: k.Conflicts, mismatches: k.Mismatches,
		}
	}
	for _, e := range saved.Events {
		ev := &event{id: e.ID, seq: e.Seq, created: e.Created, account: e.Account, typ: e.Type, apiVersion: e.APIVersion, object: e.Object,
			requestID: e.RequestID, idempotencyKey: e.IdempotencyKey, stamped: e.Stamped}
		st.events = append(st.events, ev)
		st.eventsByID[ev.id] = ev
	}
	return st
}

// sortedBySeq lists a map's values in creation order, so a saved file
// reads (and diffs) in the order things happened.
func sortedBySeq[K comparable, T any](m map[K]T, seq func(T) int64) []T {
	values := slices.Collect(maps.Values(m))
	slices.SortFunc(values, func(a, b T) int { return cmp.Compare(seq(a), seq(b)) })
	return values
}
