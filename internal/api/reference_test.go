package api

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMarkdown: the reference renders the markdown the document's
// descriptions use, and escapes everything else.
func TestMarkdown(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"A **202**, then `201`.":               "<p>A <strong>202</strong>, then <code>201</code>.</p>",
		"see [the keys](/docs/idempotency)":    `<p>see <a href="/docs/idempotency">the keys</a></p>`,
		"`**not bold**` and <b>":               "<p><code>**not bold**</code> and &lt;b&gt;</p>",
		"[x](javascript:alert(1))":             "<p>[x](javascript:alert(1))</p>",
		"Intro\n\n- one\n  more\n- two\n\nEnd": "<p>Intro</p><ul><li>one more</li><li>two</li></ul><p>End</p>",
	} {
		require.Equal(t, want, markdown(in), in)
	}
}

// FuzzMarkdown: whatever a description holds, the rendered HTML has no
// tag but the few the renderer writes, and no link but to the service's
// own pages or https.
func FuzzMarkdown(f *testing.F) {
	for _, seed := range []string{"**a** `b` [c](/d)", "- x\n- y", "<script>alert(1)</script>", "`<b>`", "[a](/b\"onclick=x)", "\x00", "**`x**`"} {
		f.Add(seed)
	}
	tag := regexp.MustCompile(`<[^>]*>`)
	allowed := regexp.MustCompile(`^<(/?(p|ul|li|code|strong|a)|a href="(/|https://)[^"<>]*")>$`)
	f.Fuzz(func(t *testing.T, text string) {
		out := markdown(text)
		for _, tg := range tag.FindAllString(out, -1) {
			if !allowed.MatchString(tg) {
				t.Fatalf("tag %q in %q, from %q", tg, out, text)
			}
		}
		if strings.Contains(tag.ReplaceAllString(out, ""), "<") {
			t.Fatalf("a raw < in %q, from %q", out, text)
		}
	})
}
