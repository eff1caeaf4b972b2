package operation

import (
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"time"
)

// refDomain separates refs from any other hash of the same inputs.
const refDomain = "oncepay operation ref v1"

// requestRef is an operation's identity at the provider, the one that survives
// the loss of its rows: a digest of its kind, its tenant, the client's key
// and the request's fingerprint. A restore, or a failover to a standby
// that missed the last commits, loses the operation's row, its key's row
// and its random id; the client's retry of the same request computes the
// same ref, so its provider key (RefKey) is the one the lost rows sent,
// and its metadata (MetadataRef) finds the object they made: the retry
// adopts that object and never makes a second one. The fingerprint keeps
// apart a client key reused, after its rows were lost, for another
// request: the API would have refused it (422) had they survived.
func requestRef(kind, tenantID, clientKey string, fingerprint [32]byte) string {
	h := sha256.New()
	for _, part := range []string{refDomain, kind, tenantID, clientKey, string(fingerprint[:])} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return "ref_" + base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:24])
}

// RefKey is the idempotency key sent to the provider with every attempt of
// the operation ref in one generation: the same for a retry whose first
// rows were lost. The generation keeps an operation resumed after it was
// proven never to have reached the provider from being answered with an
// earlier attempt's stored response (a stored 500, say).
func RefKey(ref string, generation int) string {
	return "oncepay-" + ref + "-" + strconv.Itoa(generation)
}

// providerKeyWindow is how long the provider keeps an idempotency key
// and answers it (24 hours at Stripe): a retry whose rows were lost reaches
// the object the lost rows made only within it.
const providerKeyWindow = 24 * time.Hour

// FoundBy is the metadata by which a look-up finds op's provider objects:
// its ref, which an object made before its rows were lost carries too, or,
// for an operation made before refs were, its id. Either way the objects
// found are then told apart by MadeFor.
func (t Table) FoundBy(op Entry) (key, value string) {
	if op.Ref != "" {
		return MetadataRef, op.Ref
	}
	return t.MetadataID(), op.ID
}

// CreatedSince is the earliest time at which an object that op may adopt
// can have been created, given the first attempt of its generation: for
// an operation with a ref, a lost earlier life of its rows may have made
// one up to providerKeyWindow before (its key answered no more after that).
// A look-up that lists a window to prove absence lists from here.
func CreatedSince(op Entry, firstAttempt time.Time) time.Time {
	if op.Ref != "" {
		return firstAttempt.Add(-providerKeyWindow)
	}
	return firstAttempt
}

// MetadataRef names, in a provider object's metadata, the ref of the
// operation that made it.
const MetadataRef = "oncepay_ref"

// providerKeyDomain separates the keys this derivation makes from any other
// hash of the same inputs, and from the derivations before it (whose keys
// rows made before it keep: a key is derived once, when its operation or
// generation is made, and read from the row by every attempt after).
const providerKeyDomain = "oncepay provider key v2"

// ProviderKey is the provider key of an operation made before refs were
// (its row has none), in generation: a resumed old row keeps deriving its
// keys as its first generation's was. Every operation made since derives
// them from its ref (RefKey). The inputs:
//
//   - kind ("payment", "refund", "capture", …) keeps two kinds' keys apart
//     whatever their other inputs;
//   - the tenant keeps equal client keys of two tenants apart;
//   - the client's key and the operation's id: a client key reused after
//     its retention makes a new operation, never answered with the old one;
//   - the generation: an operation resumed after it was proven never to
//     have reached the provider is never answered from an earlier
//     attempt's stored response (a stored 500, say).
//
// The operation's id leads the key, so that the provider's logs name it.
func ProviderKey(kind, tenantID, clientKey, id string, generation int) string {
	h := sha256.New()
	for _, part := range []string{providerKeyDomain, kind, tenantID, clientKey, id, strconv.Itoa(generation)} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return "oncepay-" + id + "-" + base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

// MetadataTenantID names, in a provider object's metadata, the tenant of
// the operation that made it.
const MetadataTenantID = "tenant_id"

// Metadata is what a provider object of op carries, so that its events,
// the reconciler and the ledger check find op and tell its generations
// apart: <operation>_id, tenant_id, <operation>_generation, its ref
// (oncepay_ref, by which a retry whose rows were lost finds it) and, for a
// kind with a parent, <parent>_id ("refund_id", "refund_generation",
// "payment_id").
func (t Table) Metadata(op Entry) map[string]string {
	meta := map[string]string{t.MetadataID(): op.ID, MetadataTenantID: op.TenantID, t.Operation + "_generation": strconv.Itoa(op.Generation)}
	if op.Ref != "" {
		meta[MetadataRef] = op.Ref
	}
	if t.Parent != nil {
		meta[t.Parent.Noun+"_id"] = op.ParentID
	}
	return meta
}

// MetadataID is the metadata that names the operation ("refund_id").
func (t Table) MetadataID() string { return t.Operation + "_id" }

// Named is the tenant and the operation that metadata names.
func (t Table) Named(metadata map[string]string) (tenantID, id string) {
	return metadata[MetadataTenantID], metadata[t.MetadataID()]
}

// MadeFor reports whether the object carrying metadata was made for op's
// request: by op, in whatever generation, or by an operation whose rows
// were since lost (its ref). Earlier tells those apart from op's current
// generation's.
func (t Table) MadeFor(metadata map[string]string, op Entry) bool {
	return metadata[t.MetadataID()] == op.ID || op.Ref != "" && metadata[MetadataRef] == op.Ref
}

// Earlier reports whether the object carrying metadata was made for op's
// request before op's current generation: by op itself under an earlier
// one, or by an operation whose rows were since lost (the same ref,
// another id). A generation is resumed only once proven to have made
// nothing, but a failover that lost the commit of its attempt clock (an
// asynchronous standby promoted) makes the proof wrong: the object is the
// request's one execution all the same, and op adopts it rather than make
// another.
func (t Table) Earlier(metadata map[string]string, op Entry) bool {
	if metadata[t.MetadataID()] == op.ID {
		return t.generationOf(metadata) != strconv.Itoa(op.Generation)
	}
	return op.Ref != "" && metadata[MetadataRef] == op.Ref
}

// generationOf is the generation an object's metadata names; objects made
// before generations were name none, and are the first's.
func (t Table) generationOf(metadata map[string]string) string {
	if g := metadata[t.Operation+"_generation"]; g != "" {
		return g
	}
	return "1"
}
