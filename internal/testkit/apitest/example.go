package apitest

import (
	"crypto/rand"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// StartExample is Start for examples, which have no testing.TB: it panics
// where Start would fail a test, and returns a function that stops the
// server (Start's cleanups), to be deferred. The tenant's name is random:
// examples share a database, and may run more than once (-count).
func StartExample(pool *pgxpool.Pool) (*Server, func()) {
	tb := &exampleTB{name: "example-" + rand.Text()}
	srv := Start(tb, pool)
	return srv, func() {
		for _, f := range slices.Backward(tb.cleanups) {
			f()
		}
	}
}

// exampleTB is the part of testing.TB that Start uses; anything else
// panics on the nil embedded interface.
type exampleTB struct {
	testing.TB
	name     string
	cleanups []func()
}

func (*exampleTB) Helper()                           {}
func (tb *exampleTB) Name() string                   { return tb.name }
func (tb *exampleTB) Cleanup(f func())               { tb.cleanups = append(tb.cleanups, f) }
func (*exampleTB) Errorf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (*exampleTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (*exampleTB) FailNow()                          { panic("apitest: example failed") }
