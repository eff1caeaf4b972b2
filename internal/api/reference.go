package api

import (
	"cmp"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/yuin/goldmark"
	"go.yaml.in/yaml/v3"

	"github.com/oncepay/oncepay/internal/platform/problem"
)

// The landing page and the API reference: what a person who opens the
// API's address in a browser finds, served from the binary (no CDN, no
// script).

// ReferencePath is the API reference, rendered from the OpenAPI document.
const ReferencePath = "/docs/api"

func handleLanding(w http.ResponseWriter, r *http.Request) {
	// The curl names the address this page was asked for: the API's own,
	// wherever it listens (PORTS=auto, a container's published port).
	host := cmp.Or(r.Host, "localhost:8080")
	body := `<p>oncepay takes payments that can be retried safely. A client sends <code>POST /v1/payments</code> with an
<code>Idempotency-Key</code>; however often it retries (a timeout, a crash, a lost answer), the card is charged at most once
and every retry gets the same answer. The key, the payment and the job that charges it are written in one transaction; a
worker calls the payment provider with a key derived from the client's, records the outcome with the answer that retries
replay, and looks up at the provider whatever stayed unknown.</p>
<ul>
<li><a href="/docs/idempotency">How idempotency keys work</a>: the answer to every kind of retry</li>
<li><a href="` + ReferencePath + `">API reference</a>: every route, its parameters and its answers</li>
<li><a href="` + problem.DocsPath + `">Problem types</a>: every error this API answers, and what to do about it</li>
<li><a href="` + OpenAPIPath + `">OpenAPI description</a> (<code>openapi.yaml</code>), for client generators</li>
<li><a href="/readyz">/readyz</a>: whether this instance reaches its database</li>
</ul>
<p>A first payment, with your API key (<code>api tenants create NAME</code> prints one; <code>make up</code> prints an <code>export ONCEPAY_API_URL=… ONCEPAY_API_KEY=…</code> line):</p>
<pre><code>curl -s ` + template.HTMLEscapeString(host) + `/v1/payments -H "Authorization: Bearer $ONCEPAY_API_KEY" -H 'Content-Type: application/json' \
  -H "Idempotency-Key: first-payment-$(date +%s%N)" -H 'Prefer: wait=10' \
  -d '{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa"}'</code></pre>
<p>Operators look at the books in the console, on the worker's admin listener (<code>/console/</code>), never on this port.</p>`
	writePage(w, http.StatusOK, page{Title: "oncepay", Body: template.HTML(body)})
}

// reference is the parts of the OpenAPI document the reference page shows.
type reference struct {
	Info struct {
		Summary, Description string
	}
	Paths      map[string]map[string]refOperation
	Components struct {
		Schemas    map[string]refSchema
		Parameters map[string]refParameter
		Responses  map[string]refResponse
	}
}

type refOperation struct {
	Summary, Description string
	Parameters           []refParameter
	RequestBody          *struct {
		Content map[string]struct {
			Schema refSchema
		}
	} `yaml:"requestBody"`
	Responses map[string]refResponse
}

type refParameter struct {
	Name, In, Description string
	Required              bool
	Ref                   string `yaml:"$ref"`
}

type refResponse struct {
	Description string
	Ref         string `yaml:"$ref"`
}

// refName is the name a $ref points to (#/components/parameters/Prefer:
// Prefer).
func refName(ref string) string { return ref[strings.LastIndex(ref, "/")+1:] }

// parameter is p, or the component it refers to.
func (r reference) parameter(p refParameter) refParameter {
	if c, ok := r.Components.Parameters[refName(p.Ref)]; ok && p.Ref != "" {
		return c
	}
	return p
}

// response is rs, or the component it refers to.
func (r reference) response(rs refResponse) refResponse {
	if c, ok := r.Components.Responses[refName(rs.Ref)]; ok && rs.Ref != "" {
		return c
	}
	return rs
}

// The document's descriptions are CommonMark. Rendered as the runbook is,
// without the source's raw HTML (goldmark leaves it out unless told).
var commonMark = goldmark.New()

// markdown renders a description as HTML.
func markdown(text string) string {
	var b strings.Builder
	if err := commonMark.Convert([]byte(text), &b); err != nil {
		// goldmark fails only on its writer's errors, which a Builder
		// has none of; the text itself, escaped, still says it.
		return "<p>" + template.HTMLEscapeString(text) + "</p>"
	}
	return strings.TrimSpace(b.String())
}

// markdownInline renders a description for a table cell: one paragraph's
// content, without the paragraph.
func markdownInline(text string) string {
	html := markdown(strings.TrimSpace(text))
	if inner, ok := strings.CutPrefix(html, "<p>"); ok && strings.HasSuffix(inner, "</p>") && !strings.Contains(inner, "<p>") {
		return strings.TrimSuffix(inner, "</p>")
	}
	return html
}

type refSchema struct {
	Ref         string `yaml:"$ref"`
	Type        any
	Description string
	Required    []string
	Properties  map[string]refSchema
}

var httpMethods = []string{"get", "head", "post", "put", "patch", "delete"}

// renderReference renders the reference page's body from doc, once, at
// start: a document that does not parse is a build error the tests catch.
func renderReference(doc []byte) (template.HTML, error) {
	var ref reference
	if err := yaml.Unmarshal(doc, &ref); err != nil {
		return "", fmt.Errorf("parse the OpenAPI document: %w", err)
	}
	var b strings.Builder
	esc := template.HTMLEscapeString
	b.WriteString("<p>" + markdownInline(ref.Info.Summary) + " Rendered from <a href=\"" + OpenAPIPath + "\">openapi.yaml</a>, which is the contract.</p>")
	b.WriteString(`<p>Every <code>/v1</code> route takes <code>Authorization: Bearer &lt;api key&gt;</code>; every POST that changes state takes an
<code>Idempotency-Key</code> (<a href="/docs/idempotency">how it works</a>); errors are <a href="` + problem.DocsPath + `">problem documents</a>.</p>`)
	paths := make([]string, 0, len(ref.Paths))
	for p := range ref.Paths {
		paths = append(paths, p)
	}
	// The API's routes first, then the service's own pages.
	sort.SliceStable(paths, func(i, j int) bool {
		vi, vj := strings.HasPrefix(paths[i], "/v1/"), strings.HasPrefix(paths[j], "/v1/")
		if vi != vj {
			return vi
		}
		return paths[i] < paths[j]
	})
	for _, path := range paths {
		for _, method := range httpMethods {
			op, ok := ref.Paths[path][method]
			if !ok {
				continue
			}
			anchor := method + strings.NewReplacer("/", "-", "{", "", "}", "", ".", "-").Replace(path)
			fmt.Fprintf(&b, `<h2 id="%s"><code>%s %s</code></h2><p><strong>%s</strong></p>`, esc(anchor), strings.ToUpper(method), esc(path), markdownInline(op.Summary))
			if op.Description != "" {
				b.WriteString(markdown(op.Description))
			}
			if len(op.Parameters) > 0 {
				b.WriteString("<table><tr><th>parameter</th><th>in</th><th>required</th><th>description</th></tr>")
				for _, p := range op.Parameters {
					p = ref.parameter(p)
					required := "no"
					if p.Required {
						required = "yes"
					}
					fmt.Fprintf(&b, "<tr><td><code>%s</code></td><td>%s</td><td>%s</td><td>%s</td></tr>", esc(p.Name), esc(p.In), required,
						markdownInline(p.Description))
				}
				b.WriteString("</table>")
			}
			if op.RequestBody != nil {
				if body, ok := op.RequestBody.Content["application/json"]; ok {
					writeSchema(&b, ref, body.Schema)
				}
			}
			codes := make([]string, 0, len(op.Responses))
			for code := range op.Responses {
				codes = append(codes, code)
			}
			slices.Sort(codes)
			b.WriteString("<table><tr><th>answer</th><th></th></tr>")
			for _, code := range codes {
				r := ref.response(op.Responses[code])
				fmt.Fprintf(&b, "<tr><td><code>%s</code></td><td>%s</td></tr>", esc(code), markdownInline(strings.TrimSpace(r.Description)))
			}
			b.WriteString("</table>")
		}
	}
	return template.HTML(b.String()), nil
}

// writeSchema lists a request body's members.
func writeSchema(b *strings.Builder, ref reference, s refSchema) {
	name := "body"
	if s.Ref != "" {
		name = refName(s.Ref)
		s = ref.Components.Schemas[name]
	}
	if len(s.Properties) == 0 {
		return
	}
	esc := template.HTMLEscapeString
	members := make([]string, 0, len(s.Properties))
	for m := range s.Properties {
		members = append(members, m)
	}
	slices.Sort(members)
	b.WriteString("<p>Body (<code>application/json</code>, " + esc(name) + "):</p><table><tr><th>member</th><th>required</th><th>description</th></tr>")
	for _, m := range members {
		required := "no"
		if slices.Contains(s.Required, m) {
			required = "yes"
		}
		fmt.Fprintf(b, "<tr><td><code>%s</code></td><td>%s</td><td>%s</td></tr>", esc(m), required, markdownInline(s.Properties[m].Description))
	}
	b.WriteString("</table>")
}

func handleReference(body template.HTML) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		writePage(w, http.StatusOK, page{Title: "API reference", Body: body})
	}
}
