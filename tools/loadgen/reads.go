package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// object is a payment or a refund some client learned of, which any client
// may read.
type object struct {
	tenant   int
	kind, id string // kind is "payment" or "refund"
}

// observed is an object's state as one read showed it: what must never go
// backwards.
type observed struct {
	Status      string `json:"status"`
	FailureCode string `json:"failure_code"`
	Refunded    int64  `json:"amount_refunded"`
	Captured    int64  `json:"amount_captured"`
}

// read is one answered GET of an object.
type read struct {
	client     int
	obj        object
	seen       observed
	start, end time.Time
}

// reads keeps the objects learned and every answered read of one.
type reads struct {
	mu      sync.Mutex
	known   []object
	next    int
	history []read
}

// knownObjects bounds the objects reads choose from: the most recent, so
// that most are read while they still change.
const knownObjects = 500

func (rs *reads) learn(o object) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if len(rs.known) < knownObjects {
		rs.known = append(rs.known, o)
		return
	}
	rs.known[rs.next] = o
	rs.next = (rs.next + 1) % knownObjects
}

func (rs *reads) add(rd read) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.history = append(rs.history, rd)
}

func (rs *reads) snapshot() []read {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return slices.Clone(rs.history)
}

// readOne reads an object some client learned of, as its tenant, and
// records what it showed. A read that fails (a fault window, a timeout) is
// not recorded: it showed nothing.
func (r *run) readOne(ctx context.Context, client *http.Client, c int) {
	r.reads.mu.Lock()
	if len(r.reads.known) == 0 {
		r.reads.mu.Unlock()
		return
	}
	o := r.reads.known[r.intn(len(r.reads.known))]
	r.reads.mu.Unlock()
	path := "/v1/payments/" + o.id
	if o.kind == "refund" {
		path = "/v1/refunds/" + o.id
	}
	api := r.stack.APIURLs[r.intn(len(r.stack.APIURLs))]
	reqCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, api+path, nil)
	if err != nil {
		return
	}
	req.Header.Set("Authorization", "Bearer "+r.tenants[o.tenant].APIKey)
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	var seen observed
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&seen) != nil {
		return
	}
	r.reads.add(read{client: c, obj: o, seen: seen, start: start, end: time.Now()})
}

// notReached is the failure code of an operation proven never sent: the
// one failure a client's retry resumes.
const notReached = "provider_not_reached"

// successors are the states each state of a kind can move to directly; a
// state moves to no other. A failed operation moves on only when it was
// never sent (notReached): its retry resumes it.
var successors = map[string]map[string][]string{
	"payment": {
		"processing":              {"requires_action", "requires_capture", "succeeded", "failed", "requires_reconciliation"},
		"requires_action":         {"processing", "requires_capture", "succeeded", "failed", "requires_reconciliation"},
		"requires_reconciliation": {"processing", "requires_action", "requires_capture", "succeeded", "failed"},
		"requires_capture":        {"succeeded", "canceled"},
		"failed/" + notReached:    {"processing"},
	},
	"refund": {
		"pending":                 {"succeeded", "failed", "canceled", "requires_reconciliation"},
		"requires_reconciliation": {"pending", "succeeded", "failed", "canceled"},
		"failed/" + notReached:    {"pending"},
	},
}

// stateOf names an observed state in successors.
func stateOf(o observed) string {
	if o.Status == "failed" && o.FailureCode == notReached {
		return "failed/" + notReached
	}
	return o.Status
}

// follows reports whether an object of kind seen as prev may later be seen
// as next: its state reachable, its amounts no smaller.
func follows(kind string, prev, next observed) bool {
	if next.Refunded < prev.Refunded || next.Captured < prev.Captured {
		return false
	}
	from, to := stateOf(prev), stateOf(next)
	seen := map[string]bool{from: true}
	for queue := []string{from}; len(queue) > 0; queue = queue[1:] {
		if queue[0] == to {
			return true
		}
		for _, s := range successors[kind][queue[0]] {
			if !seen[s] {
				seen[s] = true
				queue = append(queue, s)
			}
		}
	}
	return false
}

// readState is what the reads of one object have shown so far, for the
// checker's model; none is shown before the first read.
type readState struct {
	shown bool
	last  observed
}

// monotonicModel is one object's reads as a porcupine model: a read is
// legal if what it shows may follow what the reads linearized before it
// showed. So no read, by any client, shows an object's state going
// backwards from one that a read finished before it started had shown.
func monotonicModel() porcupine.Model {
	return porcupine.Model{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byObject := map[object][]porcupine.Operation{}
			var order []object
			for _, op := range history {
				o := op.Input.(object)
				if _, ok := byObject[o]; !ok {
					order = append(order, o)
				}
				byObject[o] = append(byObject[o], op)
			}
			parts := make([][]porcupine.Operation, 0, len(order))
			for _, o := range order {
				parts = append(parts, byObject[o])
			}
			return parts
		},
		Init: func() any { return readState{} },
		Step: func(state, input, output any) (bool, any) {
			s, seen := state.(readState), output.(observed)
			if s.shown && !follows(input.(object).kind, s.last, seen) {
				return false, s
			}
			return true, readState{shown: true, last: seen}
		},
		Equal: func(a, b any) bool { return a == b },
		DescribeOperation: func(input, output any) string {
			o, seen := input.(object), output.(observed)
			return fmt.Sprintf("%s %s: %s", o.kind, o.id, stateOf(seen))
		},
	}
}

// checkMonotonicReads checks every object's reads with porcupine, within
// timeout. A history it cannot decide in time is a violation too: an
// unchecked run proves nothing.
func checkMonotonicReads(history []read, timeout time.Duration) Invariant {
	inv := Invariant{Name: "10 no read shows a payment's or a refund's state going backwards (linearizable reads)"}
	ops := make([]porcupine.Operation, 0, len(history))
	base := time.Time{}
	if len(history) > 0 {
		base = history[0].start
	}
	objects := map[object]bool{}
	for _, rd := range history {
		objects[rd.obj] = true
		ops = append(ops, porcupine.Operation{ClientId: rd.client, Input: rd.obj, Output: rd.seen,
			Call: rd.start.Sub(base).Nanoseconds(), Return: rd.end.Sub(base).Nanoseconds()})
	}
	inv.Checked = len(ops)
	switch porcupine.CheckOperationsTimeout(monotonicModel(), ops, timeout) {
	case porcupine.Ok:
	case porcupine.Unknown:
		inv.Violations = append(inv.Violations, fmt.Sprintf("the checker could not decide %d reads of %d objects within %s", len(ops), len(objects), timeout))
	default:
		inv.Violations = append(inv.Violations, describeBackwards(history))
	}
	return inv
}

// describeBackwards names a pair of reads of one object, the second begun
// after the first was answered, that shows its state going backwards; or
// says that only overlapping reads disagree.
func describeBackwards(history []read) string {
	byObject := map[object][]read{}
	for _, rd := range history {
		byObject[rd.obj] = append(byObject[rd.obj], rd)
	}
	for o, rds := range byObject {
		for i, a := range rds {
			for _, b := range rds[i+1:] {
				earlier, later := a, b
				if b.end.Before(a.start) {
					earlier, later = b, a
				}
				if earlier.end.Before(later.start) && !follows(o.kind, earlier.seen, later.seen) {
					return fmt.Sprintf("%s %s: read as %s (client %d, answered %s), then as %s (client %d, asked %s)",
						o.kind, o.id, stateOf(earlier.seen), earlier.client, earlier.end.Format(time.StampMilli),
						stateOf(later.seen), later.client, later.start.Format(time.StampMilli))
				}
			}
		}
	}
	return "an object's overlapping reads admit no order in which its state never goes backwards"
}
