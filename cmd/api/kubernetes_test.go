package main

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/testkit/kubecheck"
)

// kubeSecrets stands in for the secrets the manifests reference, so the
// binaries can load their configuration from the manifests' environment.
var kubeSecrets = map[string]string{
	"oncepay-database/owner-url":    "postgres://oncepay_owner@db:5432/oncepay?sslmode=require",
	"oncepay-database/app-url":      "postgres://oncepay_app@db:5432/oncepay?sslmode=require",
	"oncepay-stripe/webhook-secret": "whsec_kubecheck",
	"oncepay-stripe/secret-key":     "sk_test_kubecheck",
}

// TestKubernetes: the API's Deployment and the migration Job of
// deploy/kubernetes run commands the api binary accepts, with an
// environment it reads entirely and accepts; the API listens where its
// probes, its Service and its scrape annotation point; it is hardened and
// has a disruption budget; and it is given longer to stop than it takes.
func TestKubernetes(t *testing.T) {
	t.Parallel()
	m := kubecheck.Load(t, "../..")

	api := m.Deployments["oncepay-api"]
	require.NotNil(t, api, "no oncepay-api Deployment")
	kubecheck.RequireHardened(t, api.Name, api.Spec.Template.Spec)
	kubecheck.RequireBudget(t, m, api)
	c := api.Spec.Template.Spec.Containers[0]
	cmd, err := parseCommand(c.Args)
	require.NoError(t, err)
	require.Equal(t, "serve", cmd.Name)
	env := kubecheck.Env(t, c, kubeSecrets)
	read := map[string]bool{}
	cfg, err := loadConfig(func(name string) string { read[name] = true; return env[name] })
	require.NoError(t, err)
	for name := range env {
		require.True(t, read[name], "the api Deployment sets %s, which api serve does not read", name)
	}
	requireListens(t, cfg.ListenAddr, kubecheck.Port(t, c, "http"))
	requireListens(t, cfg.MetricsAddr, kubecheck.Port(t, c, "metrics"))
	require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
	require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
	require.Equal(t, "http", c.ReadinessProbe.HTTPGet.Port.String())
	require.Equal(t, strconv.Itoa(int(kubecheck.Port(t, c, "metrics"))), api.Spec.Template.Annotations["prometheus.io/port"])
	require.Greater(t, *api.Spec.Template.Spec.TerminationGracePeriodSeconds, int64(cfg.ShutdownTimeout.Seconds()),
		"the pod must outlive SHUTDOWN_TIMEOUT")
	svc := m.Services["oncepay-api"]
	require.NotNil(t, svc)
	require.Len(t, svc.Spec.Ports, 1, "the Service exposes the public port only, never /metrics")
	require.Equal(t, "http", svc.Spec.Ports[0].TargetPort.String())

	job := m.Jobs["oncepay-migrate"]
	require.NotNil(t, job, "no oncepay-migrate Job")
	kubecheck.RequireHardened(t, job.Name, job.Spec.Template.Spec)
	c = job.Spec.Template.Spec.Containers[0]
	cmd, err = parseCommand(c.Args)
	require.NoError(t, err)
	require.Equal(t, "migrate", cmd.Name)
	env = kubecheck.Env(t, c, kubeSecrets)
	read = map[string]bool{}
	_, err = loadDatabaseConfig(func(name string) string { read[name] = true; return env[name] })
	require.NoError(t, err)
	for name := range env {
		require.True(t, read[name], "the migrate Job sets %s, which api migrate does not read", name)
	}
	require.Contains(t, env["DATABASE_URL"], "oncepay_owner@", "migrations run as the schema's owner")
	require.Contains(t, kubecheck.Env(t, api.Spec.Template.Spec.Containers[0], kubeSecrets)["DATABASE_URL"], "oncepay_app@",
		"the API runs as the runtime role")
}

// requireListens fails unless addr listens on every interface of the pod
// at port.
func requireListens(t *testing.T, addr string, port int32) {
	t.Helper()
	host, p, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	require.Contains(t, []string{"", "0.0.0.0", "::"}, host, "%s is unreachable from outside the pod", addr)
	require.Equal(t, strconv.Itoa(int(port)), p)
}
