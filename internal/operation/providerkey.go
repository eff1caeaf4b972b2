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
