package operation

import (
	"crypto/sha256"
	"encoding/base64"
	"strconv"
)

// providerKeyDomain separates the keys this derivation makes from any other
// hash of the same inputs, and from the derivations before it (whose keys
// rows made before it keep: a key is derived once, when its operation or
// generation is made, and read from the row by every attempt after).
const providerKeyDomain = "oncepay provider key v2"

// ProviderKey derives the idempotency key sent to the provider with every
// attempt of one operation in one generation. It is the one function that
// makes exactly once hold at the provider, for every kind:
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
// apart: <operation>_id, tenant_id, <operation>_generation and, for a
// kind with a parent, <parent>_id ("refund_id", "refund_generation",
// "payment_id").
func (t Table) Metadata(op Entry) map[string]string {
	meta := map[string]string{t.MetadataID(): op.ID, MetadataTenantID: op.TenantID, t.Operation + "_generation": strconv.Itoa(op.Generation)}
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

// MadeFor reports whether the object carrying metadata was made for op in
// its current generation.
func (t Table) MadeFor(metadata map[string]string, op Entry) bool {
	return metadata[t.MetadataID()] == op.ID && metadata[t.Operation+"_generation"] == strconv.Itoa(op.Generation)
}
