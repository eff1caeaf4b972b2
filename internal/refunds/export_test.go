package refunds

// RequestOf exposes requestOf to the tests, which play a provider request
// whose answer was lost.
var RequestOf = requestOf
