package stripesim

import "net/url"

// keyScope is what an idempotency key is unique within: Stripe scopes keys
// to the account, which for the simulator is the API key and the connected
// account the request acts on (Stripe-Account).
type keyScope struct {
	apiKey, account, key string
}

// keyState is where a key's first request is.
type keyState int

const (
	// keyExecuting means a request holds the key and has not finished.
	keyExecuting keyState = iota
	// keyDone means the response is stored and every later request with
	// the same parameters replays it.
	keyDone
	// keyReleased means the request holding the key ended without the
	// endpoint executing (its parameters failed validation, or the client
	// left first), so like Stripe the next request with the key executes
	// afresh, whatever its parameters.
	keyReleased
)

// keyEntry is one idempotency key's stored request and counters.
type keyEntry struct {
	scope        keyScope
	seq          int64
	method, path string
	fingerprint  string
	state        keyState
	resp         response
	requestID    string // of the request whose response is stored
	executions   int
	rejections   int
	replays      int
	conflicts    int
	mismatches   int
}

// decision is what the idempotency layer tells the pipeline to do with a
// keyed request.
type decision int

const (
	// decideExecute: this request holds the key; execute it and settle.
	decideExecute decision = iota
	// decideReplay: answer with the stored response.
	decideReplay
	// decideMismatch: the key was first used with other parameters (400).
	decideMismatch
	// decideInProgress: another request with the key is executing (409).
	decideInProgress
)

// fingerprint identifies a request's parameters for comparison with the
// request a key was first used with. url.Values.Encode sorts by key, so the
// order in which the client wrote the form does not matter.
func fingerprint(method, path string, params url.Values) string {
	return method + " " + path + "\n" + params.Encode()
}

// reserve decides what to do with a keyed request and, when it is to
// execute, marks the key as executing. Called with Server.mu held, which is
// what makes "check, then claim" atomic: two concurrent requests with one
// key cannot both see it free.
func (st *state) reserve(scope keyScope, method, path, fp string) (decision, *keyEntry) {
	e, ok := st.keys[scope]
	switch {
	case !ok:
		e = &keyEntry{scope: scope, seq: st.nextSeq(), method: method, path: path, fingerprint: fp, state: keyExecuting}
		st.keys[scope] = e
		return decideExecute, e
	case e.state == keyReleased:
		e.method, e.path, e.fingerprint, e.state = method, path, fp, keyExecuting
		return decideExecute, e
	case e.fingerprint != fp:
		e.mismatches++
		return decideMismatch, e
	case e.state == keyExecuting:
		e.conflicts++
		return decideInProgress, e
	default:
		e.replays++
		return decideReplay, e
	}
}

// settle stores the response of the request that held the key, in the same
// critical section as the execution that produced it, so that no other
// request can observe the committed objects without the stored response.
// Whatever the endpoint answered once it executed is stored, errors and 5xx
// included, as Stripe stores it. Called with Server.mu held.
func (e *keyEntry) settle(resp response, requestID string) {
	e.executions++
	e.state, e.resp, e.requestID = keyDone, resp, requestID
}

// reject gives the key back when its request failed parameter validation:
// Stripe saves no result for a request that no endpoint began executing.
// Called with Server.mu held.
func (e *keyEntry) reject() {
	e.rejections++
	e.state = keyReleased
}

// release gives the key back when its request ends without executing.
// Called with Server.mu held.
func (e *keyEntry) release() {
	if e.state == keyExecuting {
		e.state = keyReleased
	}
}
