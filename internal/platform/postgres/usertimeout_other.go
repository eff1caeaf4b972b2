//go:build !linux

package postgres

import (
	"syscall"
	"time"
)

// setUserTimeout does nothing where TCP_USER_TIMEOUT does not exist: the
// keepalives alone notice a dead server.
func setUserTimeout(time.Duration) func(network, address string, raw syscall.RawConn) error {
	return nil
}
