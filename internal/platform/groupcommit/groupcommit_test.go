package groupcommit_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/platform/groupcommit"
)

// Requests made at once are written in fewer groups than requests, none
// larger than its cap nor more at once than the writers allowed, and every
// caller gets its own request's result.
func TestRequestsAtOnceAreGrouped(t *testing.T) {
	t.Parallel()
	const n, maxGroup, maxWriters = 200, 8, 2
	var mu sync.Mutex
	// Counted here and checked once every caller returned: a failed
	// require would end a writer's goroutine holding the grouper's lock.
	writes, writing, mostWriting, largestGroup := 0, 0, 0, 0
	written := map[int]int{}
	// The first writes wait until every caller is on its way, so that the
	// others find the writer slots taken and queue: requests at once.
	var calling sync.WaitGroup
	calling.Add(n)
	g := groupcommit.New(maxGroup, maxWriters, nil, func(group []*groupcommit.Request[int]) {
		calling.Wait()
		time.Sleep(10 * time.Millisecond)
		mu.Lock()
		writes, writing = writes+1, writing+1
		mostWriting, largestGroup = max(mostWriting, writing), max(largestGroup, len(group))
		mu.Unlock()
		defer func() {
			mu.Lock()
			writing--
			mu.Unlock()
		}()
		for _, r := range group {
			mu.Lock()
			written[r.Item]++
			mu.Unlock()
			var err error
			if r.Item%7 == 0 {
				err = errors.New("seven")
			}
			r.Finish(err)
		}
	})
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			<-start
			calling.Done()
			errs[i] = g.Do(i)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		require.Equal(t, i%7 == 0, err != nil, "request %d: %v", i, err)
		require.Equal(t, 1, written[i], "request %d written once", i)
	}
	require.Less(t, writes, n, "grouped")
	require.LessOrEqual(t, mostWriting, maxWriters)
	require.LessOrEqual(t, largestGroup, maxGroup)
}

// A write that panics, or leaves a request unfinished, fails its requests:
// the grouper and its callers go on.
func TestAWriteThatPanicsFailsItsRequests(t *testing.T) {
	t.Parallel()
	g := groupcommit.New(4, 1, nil, func(group []*groupcommit.Request[string]) {
		for _, r := range group {
			switch r.Item {
			case "panic":
				panic("write failed")
			case "ok":
				r.Finish(nil)
			}
		}
	})
	panicking, ok := groupcommit.NewRequest("panic"), groupcommit.NewRequest("ok")
	g.WriteGroup([]*groupcommit.Request[string]{ok, panicking})
	require.NoError(t, ok.Wait())
	require.ErrorContains(t, panicking.Wait(), "panicked")

	forgotten := groupcommit.NewRequest("forgotten")
	g.WriteGroup([]*groupcommit.Request[string]{forgotten})
	require.ErrorContains(t, forgotten.Wait(), "unfinished")
	require.ErrorContains(t, g.Do("panic"), "panicked", "through Do too")
	require.NoError(t, g.Do("ok"), "the grouper goes on")
}

// Groupers that share a budget write no more groups at once, together,
// than it allows, each below its own cap, and every request is written.
func TestABudgetCapsGroupersTogether(t *testing.T) {
	t.Parallel()
	const n, groupers, budget = 120, 3, 2
	var mu sync.Mutex
	writing, mostWriting := 0, 0
	written := map[int]int{}
	shared := groupcommit.NewBudget(budget)
	require.Equal(t, budget, shared.Size())
	var gs []*groupcommit.Grouper[int]
	for range groupers {
		gs = append(gs, groupcommit.New(4, 4, shared, func(group []*groupcommit.Request[int]) {
			mu.Lock()
			writing++
			mostWriting = max(mostWriting, writing)
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
			mu.Lock()
			writing--
			for _, r := range group {
				written[r.Item]++
			}
			mu.Unlock()
			for _, r := range group {
				r.Finish(nil)
			}
		}))
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = gs[i%groupers].Do(i)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err)
		require.Equal(t, 1, written[i], "request %d written once", i)
	}
	require.Equal(t, budget, mostWriting, "the budget was used whole, and never exceeded")
}
