// Package api holds the OpenAPI 3.1 description of oncepay's HTTP API. It
// lives here, outside internal/, so that go:embed can reach the document
// next to it; internal/api serves it at /openapi.yaml, and its tests check
// every route and every real response against it.
package api

import (
	"bytes"
	_ "embed"
)

//go:embed openapi.yaml
var openAPI []byte

// OpenAPI returns the OpenAPI document, in YAML. Each call returns its own
// copy, so no caller can change what the others serve.
func OpenAPI() []byte { return bytes.Clone(openAPI) }
