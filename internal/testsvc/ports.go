// Package testsvc starts real backing services (etcd, and later MariaDB and
// Redis) for tests. Every service listens on 127.0.0.1 only, on ports picked
// fresh per test, with its data in the test's temp dir, and is torn down by
// t.Cleanup. A missing binary is a test failure, not a skip: CI installs the
// services, and a silently skipped integration test proves nothing.
package testsvc

import (
	"net"
	"testing"
)

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago. The
// kernel picks it (port 0) and the listener is closed before the service binds
// it, so another process could in theory take it in between; services that
// fail to bind are restarted on new ports by their Start helpers.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testsvc: no free loopback port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// NeedsServers skips t under `go test -short`, which is how `make unit`
// runs the tests that need no server: t starts or reaches MariaDB, Redis,
// etcd or another service. `make test` (never -short) runs it; a missing
// service there is a failure, as the package comment says.
func NeedsServers(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs servers: run by make test, not by make unit (-short)")
	}
}
