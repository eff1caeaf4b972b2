// Package hapg runs a real failover manager: a pg_auto_failover monitor, a
// primary and its synchronous standbys, each a PostgreSQL of its own on a
// loopback port, so that tests prove what oncepay does when its primary
// dies, is switched over, or comes back as a standby, against the manager a
// deployment runs rather than a stand-in. Start(tb) is the tests' helper;
// Formation, which takes no test, is the same for the local stack
// (make up DB=ha), which outlives the program that started it.
//
// It needs pg_auto_failover (Debian's postgresql-15-auto-failover and
// pg-auto-failover-cli; .ci/run installs them). Without it a test fails when
// CI=true and is skipped otherwise, saying how to install it.
//
// Replication is synchronous (the manager sets synchronous_standby_names to
// the standbys, and Start waits for it), so a commit acknowledged before a
// failover is on the node promoted. With one standby (Options.Standbys),
// while a node is down the manager keeps the other writable alone
// (wait_primary): commits made then exist once until Rejoin; with two, a
// commit waits for the standby left. With Options.Async the standbys are
// asynchronous instead: a commit waits for none, and a failover may lose
// the primary's last commits (what the service's refs are for).
package hapg

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// Database is the database the nodes serve, made by the manager on the
// first primary and replicated to the standby.
const Database = "oncepay"

// setupTimeout bounds each wait of Start, Rejoin and Switchover: generous,
// since the machine running the tests may be busy with other packages.
const setupTimeout = 3 * time.Minute

// Cluster is a formation started for a test, whose every failure fails the
// test.
type Cluster struct {
	*Formation
	tb testing.TB
}

// Start brings up a monitor, a primary and two synchronous standbys, each
// commit waiting for one of them (the topology docs/operations.md asks for:
// with one standby the manager can turn a switchover's primary
// asynchronous, Options.Standbys), tuned to replace a dead primary in
// seconds, and returns once both standbys are in sync. Everything it
// started is stopped, and its directories removed, when the test ends.
func Start(tb testing.TB) *Cluster {
	tb.Helper()
	return StartWith(tb, Options{Standbys: 2})
}

// StartWith is Start with other options (Options.Async: asynchronous
// standbys). Logf defaults to the test's log.
func StartWith(tb testing.TB, opts Options) *Cluster {
	tb.Helper()
	if opts.Logf == nil {
		opts.Logf = tb.Logf
	}
	f, err := StartFormation(context.Background(), opts)
	if errors.Is(err, ErrNotInstalled) {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("hapg: %v", err)
		}
		tb.Skipf("hapg: %v; with CI=true this fails", err)
	}
	if err != nil {
		tb.Fatalf("hapg: %v", err)
	}
	c := &Cluster{Formation: f, tb: tb}
	tb.Cleanup(c.Stop)
	return c
}

// Primary is the node the monitor has made primary, checked to be out of
// recovery; it fails the test if there is none (a primary killed and not yet
// replaced: use WaitPrimary).
func (c *Cluster) Primary() *Node {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := c.Formation.Primary(ctx)
	if err != nil {
		c.tb.Fatalf("hapg: no primary: %v", err)
	}
	return n
}

// WaitPrimary waits until a node other than a killed one is primary and
// returns it.
func (c *Cluster) WaitPrimary(timeout time.Duration) *Node {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	n, err := c.Formation.WaitPrimary(ctx)
	if err != nil {
		c.tb.Fatalf("hapg: %v", err)
	}
	return n
}

// KillPrimary kills the primary's PostgreSQL and its keeper with SIGKILL,
// as a machine dying would, and returns it. The monitor then promotes the
// standby (WaitPrimary); Rejoin brings the killed node back.
func (c *Cluster) KillPrimary() *Node {
	c.tb.Helper()
	n, err := c.Formation.KillPrimary(context.Background())
	if err != nil {
		c.tb.Fatalf("hapg: %v", err)
	}
	return n
}

// Rejoin restarts the killed node's keeper, which brings it back as the
// standby of the node promoted meanwhile, and waits until it is in sync.
// It returns the node.
func (c *Cluster) Rejoin() *Node {
	c.tb.Helper()
	n, err := c.Formation.Rejoin(context.Background())
	if err != nil {
		c.tb.Fatalf("hapg: %v", err)
	}
	return n
}

// Switchover has the manager hand the primary's role to the standby, as an
// operator would before maintenance, waits until the former primary is back
// in sync as the standby, and returns the new primary.
func (c *Cluster) Switchover() *Node {
	c.tb.Helper()
	n, err := c.Formation.Switchover(context.Background())
	if err != nil {
		c.tb.Fatalf("hapg: %v", err)
	}
	return n
}

// Stop stops every process Start, Rejoin and Switchover started and removes
// the formation's directories. Start registers it with t.Cleanup; calling it
// earlier is allowed.
func (c *Cluster) Stop() {
	if c.tb.Failed() {
		for _, tail := range c.LogTails() {
			c.tb.Logf("hapg: %s", tail)
		}
	}
	if err := c.Formation.Stop(); err != nil {
		c.tb.Errorf("hapg: %v", err)
	}
}
