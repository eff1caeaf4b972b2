//go:build e2e

package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/testkit/bintest"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

// workDir holds bin/ (the binaries, built once) and the stack's .run/.
var workDir string

func TestMain(m *testing.M) {
	bintest.Main(m, &workDir, "github.com/oncepay/oncepay/cmd/api", "github.com/oncepay/oncepay/cmd/worker",
		"github.com/oncepay/oncepay/tools/stripesim/cmd/stripesim", "github.com/oncepay/oncepay/tools/devstack/cmd/stack")
}

// TestFirstHour is a newcomer's first hour, in a real browser: the
// README's tour, pasted as written, starts the stack (make up, on the free
// ports PORTS=auto picks) and makes payments and a payout, canceled; the
// key and curl the stack printed, pasted, make a payment; the console,
// opened in Chromium at the printed address, lists it, and its page's
// timeline shows the provider call and the provider's webhook; the API's
// landing page leads to its reference; the stack stops and comes up
// again on the same ports, with the same key and the payment still there.
func TestFirstHour(t *testing.T) {
	env := append(os.Environ(), "DATABASE_URL="+pgtest.NewDatabase(t), "PORTS=auto")
	stack := func(verb string) string {
		cmd := exec.Command(filepath.Join(workDir, "bin", "stack"), verb)
		cmd.Dir, cmd.Env = workDir, env
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "stack %s:\n%s", verb, out)
		return string(out)
	}
	// Whatever happens, the stack goes: down reads the state in workDir.
	t.Cleanup(func() {
		down := exec.Command(filepath.Join(workDir, "bin", "stack"), "down")
		down.Dir, down.Env = workDir, env
		_, _ = down.CombinedOutput()
	})

	// The README's tour, as written; its make up is bin/stack up, the
	// binaries being built.
	tour := exec.Command("bash", "-ec", "make() { bin/stack \"$@\"; }\n"+readmeTour(t))
	tour.Dir, tour.Env = workDir, env
	toured, err := tour.CombinedOutput()
	up := string(toured)
	require.NoError(t, err, "the README's tour:\n%s", up)
	for _, want := range []string{"HTTP/1.1 202 Accepted", "Idempotent-Replayed: true", "HTTP/1.1 422 Unprocessable Entity",
		"HTTP/1.1 201 Created", "HTTP/1.1 400 Bad Request", `"object":"list"`, `"status":"pending"`, `"status":"canceled"`} {
		require.Contains(t, up, want, "the README's tour")
	}

	// The lines the stack printed work pasted as written.
	var key, payment string
	for _, line := range strings.Split(up, "\n") {
		switch l := strings.TrimSpace(line); {
		case strings.HasPrefix(l, "export ONCEPAY_API_URL="):
			key = l
		case strings.HasPrefix(l, "curl ") && payment == "": // the payment; the payout's follows
			payment = l
		}
	}
	require.NotEmpty(t, key, up)
	require.NotEmpty(t, payment, up)
	pay := func() (paid struct{ ID, Status string }) {
		t.Helper()
		sh := exec.Command("sh", "-ec", key+"\n"+payment)
		sh.Dir = workDir
		out, err := sh.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.NoError(t, json.Unmarshal(out, &paid), "%s", out)
		require.Equal(t, "succeeded", paid.Status)
		return paid
	}
	paid := pay()
	console := regexp.MustCompile(`(?m)^console .*: (http://\S+)$`).FindStringSubmatch(up)
	require.NotNil(t, console, "no console line:\n%s", up)
	apiURL := regexp.MustCompile(`ONCEPAY_API_URL=(http://\S+)`).FindStringSubmatch(key)[1]
	require.NotEqual(t, "http://127.0.0.1:8080", apiURL, "PORTS=auto picked a port")

	browser := newBrowser(t)
	artifacts := artifactDir(t)

	// The console lists the payment; its link opens the payment's page.
	require.Contains(t, listedPayments(t, browser, console[1]), paid.ID)
	require.NoError(t, chromedp.Do(browser,
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`a[href="/console/payments/%s"]`, paid.ID))),
		chromedp.WaitVisible(chromedp.CSS(`#timeline`)),
	))
	// The webhook is processed a moment after the payment's answer: the
	// page is read again until its timeline shows it.
	var timeline string
	deadline := time.Now().Add(30 * time.Second)
	for {
		timeline, err = chromedp.Run(browser, chromedp.Text(chromedp.CSS(`#timeline`)))
		require.NoError(t, err)
		if strings.Contains(timeline, "Webhook payment_intent.succeeded received") || time.Now().After(deadline) {
			break
		}
		time.Sleep(300 * time.Millisecond)
		require.NoError(t, chromedp.Do(browser, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`#timeline`))))
	}
	location, err := chromedp.Run(browser, chromedp.Location())
	require.NoError(t, err)
	require.Equal(t, console[1]+"payments/"+paid.ID, location)
	for _, want := range []string{"Key reserved", "Payment accepted", "Provider call: charge sent", "Provider outcome recorded: succeeded",
		"Webhook payment_intent.succeeded received", "processed: "} {
		require.Contains(t, timeline, want)
	}
	screenshot(t, browser, filepath.Join(artifacts, "console-payment.png"))

	// The API's own address explains itself and leads to its reference.
	require.NoError(t, chromedp.Do(browser,
		chromedp.Navigate(apiURL+"/"),
		chromedp.Click(chromedp.CSS(`a[href="/docs/api"]`)),
		chromedp.WaitVisible(chromedp.CSS(`h2`)),
	))
	heading, err := chromedp.Run(browser, chromedp.Text(chromedp.CSS(`h1`)))
	require.NoError(t, err)
	require.Equal(t, "API reference", heading)
	location, err = chromedp.Run(browser, chromedp.Location())
	require.NoError(t, err)
	require.Equal(t, apiURL+"/docs/api", location)

	// Stopped and started again: the ports, the key and the books are
	// kept, and so is the simulator's side of them: the key and curl
	// printed before still pay, and the ledger check, run as the printed
	// export line sets it up, finds the books in agreement.
	stack("down")
	again := stack("up")
	require.Contains(t, again, key, "the same address and key")
	require.Contains(t, again, console[0], "the same console")
	require.Contains(t, listedPayments(t, browser, console[1]), paid.ID, "the payment is still there after a restart")
	pay()
	operator := regexp.MustCompile(`(?m)^\s*(export DATABASE_URL=.*)$`).FindStringSubmatch(again)
	require.NotNil(t, operator, "no export line for the operator's commands:\n%s", again)
	check := exec.Command("sh", "-ec", operator[1]+"\nbin/api ledger check --since 1h")
	check.Dir = workDir
	out, err := check.CombinedOutput()
	require.NoError(t, err, "the ledger check after a restart:\n%s", out)
	stack("down")
}

// readmeTour is the README's "Try it" block, as a reader pastes it.
func readmeTour(t *testing.T) string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	block := regexp.MustCompile("(?s)\n## Try it\n\n```sh\n(.*?)```").FindSubmatch(readme)
	require.NotNil(t, block, "README.md has no Try it block")
	return string(block[1])
}

// newBrowser starts headless Chromium (Debian's chromium, or whatever
// chromedp finds) for the test.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.WindowSize(1280, 900))
	if os.Geteuid() == 0 {
		// Chromium refuses to sandbox itself as root (CI runs as root).
		opts = append(opts, chromedp.NoSandbox)
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(cancel)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(cancelTimeout)
	require.NoError(t, chromedp.Do(ctx), "start Chromium (apt-get install chromium)")
	return ctx
}

// listedPayments opens the console's payments page and returns its table.
func listedPayments(t *testing.T, browser context.Context, consoleURL string) string {
	t.Helper()
	require.NoError(t, chromedp.Do(browser, chromedp.Navigate(consoleURL), chromedp.WaitVisible(chromedp.CSS(`#payments`))))
	listed, err := chromedp.Run(browser, chromedp.Text(chromedp.CSS(`#payments`)))
	require.NoError(t, err)
	return listed
}

// artifactDir is where screenshots go: E2E_ARTIFACTS, or the test's own
// temporary folder.
func artifactDir(t *testing.T) string {
	if dir := os.Getenv("E2E_ARTIFACTS"); dir != "" {
		require.NoError(t, os.MkdirAll(dir, 0o755))
		return dir
	}
	return t.TempDir()
}

func screenshot(t *testing.T, browser context.Context, path string) {
	t.Helper()
	png, err := chromedp.Run(browser, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("screenshot: %s", path)
}
