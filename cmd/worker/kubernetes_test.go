package main

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/testkit/kubecheck"
)

// TestKubernetes: the worker's Deployment of deploy/kubernetes runs the
// worker with an environment it reads entirely and accepts, as the runtime
// role; its probes and scrape annotation point at its admin listener, which
// no Service exposes; it is hardened, has a disruption budget, and is given
// longer to stop than its jobs' grace.
func TestKubernetes(t *testing.T) {
	t.Parallel()
	m := kubecheck.Load(t, "../..")
	worker := m.Deployments["oncepay-worker"]
	require.NotNil(t, worker, "no oncepay-worker Deployment")
	kubecheck.RequireHardened(t, worker.Name, worker.Spec.Template.Spec)
	kubecheck.RequireBudget(t, m, worker)
	c := worker.Spec.Template.Spec.Containers[0]
	require.Equal(t, []string{"worker"}, c.Args)
	env := kubecheck.Env(t, c, map[string]string{
		"oncepay-database/app-url":  "postgres://oncepay_app@db:5432/oncepay?sslmode=require",
		"oncepay-stripe/secret-key": "sk_test_kubecheck",
	})
	read := map[string]bool{}
	cfg, err := loadConfig(func(name string) string { read[name] = true; return env[name] })
	require.NoError(t, err)
	for name := range env {
		require.True(t, read[name], "the worker Deployment sets %s, which the worker does not read", name)
	}
	host, port, err := net.SplitHostPort(cfg.AdminAddr)
	require.NoError(t, err)
	require.Equal(t, "0.0.0.0", host, "the probes reach the admin listener from outside the container")
	require.Equal(t, strconv.Itoa(int(kubecheck.Port(t, c, "admin"))), port)
	require.Equal(t, port, worker.Spec.Template.Annotations["prometheus.io/port"])
	require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
	require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
	require.Greater(t, *worker.Spec.Template.Spec.TerminationGracePeriodSeconds, int64(cfg.ShutdownGrace.Seconds()),
		"the pod must outlive WORKER_SHUTDOWN_GRACE")
	for _, svc := range m.Services {
		require.NotEqual(t, worker.Spec.Template.Labels["app.kubernetes.io/component"], svc.Spec.Selector["app.kubernetes.io/component"],
			"Service %s exposes the worker's admin listener (the console, River's UI)", svc.Name)
	}
}
