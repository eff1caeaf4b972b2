package postgres

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestServerWatchCountsEveryMove: the first server a process finds is
// logged, the same server again is nothing, and another address or a new
// timeline (a promotion behind one address) is a move, counted and
// logged once.
func TestServerWatchCountsEveryMove(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	w := NewServerWatch(slog.New(slog.NewTextHandler(&logs, nil)))
	ctx := context.Background()
	first := Server{Addr: "10.0.0.1:5432", Timeline: 1}
	w.saw(ctx, first)
	w.saw(ctx, first)
	current, moves := w.Current()
	require.Equal(t, first, current)
	require.Zero(t, moves)

	promoted := Server{Addr: "10.0.0.2:5432", Timeline: 2}
	w.saw(ctx, promoted)
	w.saw(ctx, promoted)
	w.saw(ctx, Server{Addr: "10.0.0.2:5432", Timeline: 3})
	addr, timeline, moves := w.Read()
	require.Equal(t, "10.0.0.2:5432", addr)
	require.Equal(t, 3, timeline)
	require.EqualValues(t, 2, moves)
	require.Equal(t, 2, strings.Count(logs.String(), "the database primary moved"), logs.String())
	require.Contains(t, logs.String(), "from=\"10.0.0.1:5432 (timeline 1)\" to=\"10.0.0.2:5432 (timeline 2)\"")
}
