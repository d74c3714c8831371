package coord

import (
	"testing"

	"github.com/convoy-im/convoy/internal/etcdtest"
	"github.com/convoy-im/convoy/routecfg"
)

// startWatcher starts a route watcher (the one a proxy's lock follower
// waits on) and closes it when the test ends.
func startWatcher(t *testing.T, s *routecfg.Store, opts ...routecfg.Option) *routecfg.Watcher {
	t.Helper()
	w := routecfg.NewWatcher(s, append([]routecfg.Option{routecfg.WithLogger(etcdtest.Logger(t))}, opts...)...)
	if err := w.Start(etcdtest.Ctx(t)); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(w.Close)
	return w
}
