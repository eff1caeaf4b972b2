package api

import (
	"net/http"
	"strconv"
)

// OpenAPIPath is where the API serves its OpenAPI description.
const OpenAPIPath = "/openapi.yaml"

// handleOpenAPI serves doc, the API's OpenAPI description, as YAML
// (RFC 9512's media type).
func handleOpenAPI(doc []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		w.Header().Set("Content-Length", strconv.Itoa(len(doc)))
		_, _ = w.Write(doc)
	}
}
