// Package groupcommit writes the requests that arrive at about the same
// time in groups: a group commit. The engine's grouped attempt starts and
// answer records are written with it; the reference ones write each
// request alone.
package groupcommit

import (
	"fmt"
	"slices"
	"sync"
)

// Grouper writes the requests that arrive at about the same time
// in groups, each group one round trip or one transaction where a request
// alone would be one: a group commit. Nothing waits to form a group: a
// request that arrives while no group is being written starts one at once,
// alone, and those that arrive meanwhile form the next.
//
// The callers write the groups themselves, at most maxWriters at once: a
// caller becomes a writer when a slot is free, writes groups while its own
// request waits, and leaves once its request is written (so no caller is
// held up writing others' requests for long). A writer that leaves with
// requests still pending wakes their callers to take its slot.
type Grouper[T any] struct {
	maxGroup, maxWriters int
	// budget, if set, caps the groups written at once by every grouper
	// that shares it; maxWriters still caps this one's.
	budget *Budget
	// write writes a group and finishes each of its requests. A request it
	// leaves unfinished (it panicked) fails.
	write func(group []*Request[T])

	mu      sync.Mutex
	pending []*Request[T]
	writers int
	// wake is closed when a writer leaves requests pending, for the callers
	// that found every writer slot taken; nil while none waits.
	wake chan struct{}
}

// New returns a grouper that writes groups of at most maxGroup requests,
// at most maxWriters at once and, if budget is set, only while it has a
// slot free, each with write.
func New[T any](maxGroup, maxWriters int, budget *Budget, write func(group []*Request[T])) *Grouper[T] {
	return &Grouper[T]{maxGroup: maxGroup, maxWriters: maxWriters, budget: budget, write: write}
}

// Budget caps the groups written at once by several groupers together:
// each grouper's own cap bounds one kind of write, a budget all of them,
// so that their writers, each holding a database connection, leave the
// rest of a pool to its other users. A nil budget caps nothing.
type Budget struct{ slots chan struct{} }

// NewBudget returns a budget of n groups written at once (at least one).
func NewBudget(n int) *Budget { return &Budget{slots: make(chan struct{}, max(n, 1))} }

// Size is the number of groups the budget lets be written at once; 0 for
// none, which caps nothing.
func (b *Budget) Size() int {
	if b == nil {
		return 0
	}
	return cap(b.slots)
}

func (b *Budget) acquire() {
	if b != nil {
		b.slots <- struct{}{}
	}
}

func (b *Budget) release() {
	if b != nil {
		<-b.slots
	}
}

// Request is one caller's item in a grouper, and its result.
type Request[T any] struct {
	Item T
	err  error
	// finished is touched only by the goroutine writing the request's
	// group; its owner reads err once done is closed.
	finished bool
	done     chan struct{}
}

// NewRequest is a request for item, not yet written: what WriteGroup takes.
func NewRequest[T any](item T) *Request[T] { return &Request[T]{Item: item, done: make(chan struct{})} }

// Finish records the request's result, once; a write calls it for every
// request of its group.
func (r *Request[T]) Finish(err error) {
	if r.finished {
		return
	}
	r.finished, r.err = true, err
	close(r.done)
}

// Wait returns the request's error once it is written.
func (r *Request[T]) Wait() error {
	<-r.done
	return r.err
}

// Do queues item and returns once it is written, with its error.
func (g *Grouper[T]) Do(item T) error {
	own := NewRequest(item)
	g.mu.Lock()
	g.pending = append(g.pending, own)
	g.mu.Unlock()
	for {
		wake := g.writeWhilePending(own)
		select {
		case <-own.done:
			return own.err
		case <-wake: // a nil wake: own was written, or nothing is pending
		}
	}
}

// writeWhilePending takes a writer slot if one is free and writes groups
// until own is written or nothing is pending. Without a free slot it
// returns a channel closed when a writer leaves requests pending.
func (g *Grouper[T]) writeWhilePending(own *Request[T]) <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock() // writeGroup, run without the lock, never panics
	if g.writers >= g.maxWriters {
		if g.wake == nil {
			g.wake = make(chan struct{})
		}
		return g.wake
	}
	g.writers++
	for len(g.pending) > 0 && !isClosed(own.done) {
		// The shared slot is taken before the group is: requests that
		// arrive during the wait join the group.
		g.mu.Unlock()
		g.budget.acquire()
		g.mu.Lock()
		if len(g.pending) == 0 || isClosed(own.done) { // another writer took them, or wrote own meanwhile
			g.budget.release()
			break
		}
		group := g.pending[:min(len(g.pending), g.maxGroup)]
		g.pending = slices.Clone(g.pending[len(group):])
		g.mu.Unlock()
		g.WriteGroup(group)
		g.budget.release()
		g.mu.Lock()
	}
	g.writers--
	if len(g.pending) > 0 && g.wake != nil {
		close(g.wake)
		g.wake = nil
	}
	return nil
}

// WriteGroup writes group now, as one of the grouper's writers does; a
// panic while writing is the error of each request not yet finished (River
// retries its attempt), not the end of the goroutine that happened to be
// writing.
func (g *Grouper[T]) WriteGroup(group []*Request[T]) {
	defer func() {
		v := recover()
		for _, r := range group {
			if v != nil {
				r.Finish(fmt.Errorf("writing the group panicked: %v", v))
			}
			r.Finish(fmt.Errorf("BUG: a group's write left its request unfinished"))
		}
	}()
	g.write(group)
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
