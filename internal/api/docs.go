package api

import (
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/platform/problem"
)

var pageTemplate = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}} · oncepay</title>
<style>body{font-family:system-ui,sans-serif;max-width:46em;margin:2em auto;padding:0 1em;line-height:1.5}
code{background:#f3f3f3;padding:0 .2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}</style>
</head><body><h1>{{.Title}}</h1>{{.Body}}</body></html>
`))

type page struct {
	Title string
	Body  template.HTML
}

func writePage(w http.ResponseWriter, status int, p page) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_ = pageTemplate.Execute(w, p)
}

func handleProblemIndex(w http.ResponseWriter, _ *http.Request) {
	var b strings.Builder
	b.WriteString("<p>Every error is an RFC 9457 <code>application/problem+json</code> document whose <code>type</code> is one of these pages.</p><table><tr><th>type</th><th>status</th><th>title</th></tr>")
	for _, t := range problem.Catalog() {
		b.WriteString(`<tr><td><a href="` + template.HTMLEscapeString(t.URI()) + `">` + template.HTMLEscapeString(t.Slug) + "</a></td><td>" +
			http.StatusText(t.Status) + " (" + itoa(t.Status) + ")</td><td>" + template.HTMLEscapeString(t.Title) + "</td></tr>")
	}
	b.WriteString("</table>")
	writePage(w, http.StatusOK, page{Title: "Problem types", Body: template.HTML(b.String())})
}

func handleProblemDoc(w http.ResponseWriter, r *http.Request) {
	t, ok := problem.Lookup(chi.URLParam(r, "slug"))
	if !ok {
		writePage(w, http.StatusNotFound, page{Title: "Unknown problem type", Body: `<p>See <a href="` + problem.DocsPath + `">all problem types</a>.</p>`})
		return
	}
	body := "<p><strong>HTTP " + itoa(t.Status) + " " + http.StatusText(t.Status) + "</strong> · type <code>" +
		template.HTMLEscapeString(t.URI()) + "</code></p><p>" + template.HTMLEscapeString(t.Doc) +
		`</p><p>See also: <a href="/docs/idempotency">how idempotency keys work</a>, <a href="` + problem.DocsPath + `">all problem types</a>.</p>`
	writePage(w, http.StatusOK, page{Title: t.Title, Body: template.HTML(body)})
}

func handleIdempotencyDoc(cfg idempotency.Config) http.HandlerFunc {
	rows := [][3]string{
		{"new key", "202 Accepted", "The payment is created and queued. <code>Location</code> names it; <code>Retry-After</code> says when to look again. The 202 is stored under the key."},
		{"same key, same request, still processing", "202 Accepted (replayed)", "The stored 202, with <code>Idempotent-Replayed: true</code>."},
		{"same key, same request, finished", "201 / 402 / 4xx (replayed)", "The stored final answer, byte for byte, with <code>Idempotent-Replayed: true</code>."},
		{"same key, same request, first request's transaction still open", "409 Conflict", "After waiting up to " + dur(cfg.LockWait) + " for it: problem <a href=\"" + problem.IdempotencyKeyInUse.URI() + "\">idempotency-key-in-use</a> with <code>Retry-After</code>."},
		{"same key, outcome being reconciled", "409 Conflict", "Problem <a href=\"" + problem.IdempotencyOutcomeUnknown.URI() + "\">idempotency-outcome-unknown</a> with <code>Retry-After</code>."},
		{"same key, earlier attempt proven not to have run", "202 Accepted", "The key is re-acquired and the same payment is queued again."},
		{"same key, same request, after the key's retention (" + dur(cfg.Retention) + ")", "422 Unprocessable Content", "Problem <a href=\"" + problem.IdempotencyKeyExpired.URI() + "\">idempotency-key-expired</a> naming the original <code>resource_id</code>; nothing is done. Use a new key for a new operation."},
		{"same key, different request", "422 Unprocessable Content", "Problem <a href=\"" + problem.IdempotencyKeyMismatch.URI() + "\">idempotency-key-mismatch</a>; nothing is done."},
		{"no key", "400 Bad Request", "Problem <a href=\"" + problem.MissingIdempotencyKey.URI() + "\">missing-idempotency-key</a>."},
		{"malformed key", "400 Bad Request", "Problem <a href=\"" + problem.InvalidIdempotencyKey.URI() + "\">invalid-idempotency-key</a>."},
		{"invalid body", "400 Bad Request", "Problem <a href=\"" + problem.InvalidRequest.URI() + "\">invalid-request</a> listing every bad field. The key is not used: fix the body and resend with the same key."},
		{"database unreachable, or the connection lost during the request", "503 Service Unavailable", "Retry with the same key after <code>Retry-After</code>: it runs the request if it was not processed, and returns its result if it was (the database committed, but its acknowledgement was lost)."},
		{"server error", "500 Internal Server Error", "Never stored: a retry with the same key runs again."},
	}
	var b strings.Builder
	b.WriteString(`<p>Every <code>POST</code> that changes state requires an <code>Idempotency-Key</code> header. oncepay follows the IETF draft
"The Idempotency-Key HTTP Header Field": 400 when the key is missing, 422 when it is reused with another request, 409 while a request with it is in flight.</p>
<h2>Key format</h2><p>` + itoa(idempotency.MinKeyLength) + ` to ` + itoa(idempotency.MaxKeyLength) + ` characters from <code>` + idempotency.KeyAlphabet + `</code>:
UUIDs, ULIDs and base64url values fit. Send it bare (<code>Idempotency-Key: 8e03978e-40d5-43e8-bc93-6894a57f9324</code>) or as an RFC 8941
string (<code>Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"</code>); both name the same key. Keys are scoped to your API key's tenant:
another tenant's equal key is a different key.</p>
<h2>What counts as the same request</h2><p>The method, the path and the validated body. Member order, whitespace and number spelling
(<code>2000</code>, <code>2000.0</code>, <code>2e3</code>) do not matter; an absent optional field equals <code>null</code> and an empty value. Any other change does.</p>
<h2>Status codes</h2><table><tr><th>situation</th><th>answer</th><th>details</th></tr>`)
	for _, row := range rows {
		b.WriteString("<tr><td>" + row[0] + "</td><td>" + row[1] + "</td><td>" + row[2] + "</td></tr>")
	}
	b.WriteString(`</table>
<h2>Waiting for the outcome</h2><p>Send <code>Prefer: wait=N</code> (N ≤ ` + itoa(int(idempotency.MaxWait/time.Second)) + `) to hold the answer until the payment
is final or N seconds pass; the answer carries <code>Preference-Applied</code>. This works on first requests and on retries. If the
operation turns out never to have reached the provider, the answer is problem <a href="` + problem.IdempotencyRetryNeeded.URI() + `">idempotency-retry-needed</a>
(503 with <code>Retry-After</code>): send the same request with the same key again and it runs again, still at most once.</p>
<h2>Retention</h2><p>A key is kept for ` + dur(cfg.Retention) + ` after its last change. Within that window every retry is answered as above.
After it, the key is a tombstone: the same request is answered <a href="` + problem.IdempotencyKeyExpired.URI() + `">idempotency-key-expired</a>
and is never run again; a different one is still a mismatch. ` + dur(cfg.TombstoneRetention) + ` later the tombstone is removed and the key
may name a new operation. Retry within the window, and use a new key for a new payment.</p>
<h2>Machine-readable</h2><p>The whole API, these headers and every problem type included, is described in OpenAPI 3.1 at
<a href="` + OpenAPIPath + `">` + OpenAPIPath + `</a>.</p>`)
	body := b.String()
	return func(w http.ResponseWriter, _ *http.Request) {
		writePage(w, http.StatusOK, page{Title: "Idempotency keys", Body: template.HTML(body)})
	}
}

func dur(d time.Duration) string {
	s := d.String()
	s = strings.TrimSuffix(s, "0s")
	s = strings.TrimSuffix(s, "0m")
	return s
}

func itoa(n int) string { return strconv.Itoa(n) }
