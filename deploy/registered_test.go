package deploy

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/convoy-im/convoy/archive"
	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/histcache"
	"github.com/convoy-im/convoy/migrate"
	"github.com/convoy-im/convoy/migrate/inproxy"
	"github.com/convoy-im/convoy/proxy"
	"github.com/convoy-im/convoy/proxy/backend"
	"github.com/convoy-im/convoy/proxy/engine"
	"github.com/convoy-im/convoy/routecfg"
	"github.com/convoy-im/convoy/search"
)

// descRecorder is a Registerer that keeps the name and label names of every
// metric described to it.
type descRecorder map[string][]string

var descRe = regexp.MustCompile(`^Desc\{fqName: "([^"]+)", .*constLabels: \{([^}]*)\}, variableLabels: \{([^}]*)\}\}$`)

func (r descRecorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		m := descRe.FindStringSubmatch(d.String())
		if m == nil {
			panic("unparsable " + d.String())
		}
		var labels []string
		for _, l := range strings.Split(m[2], ",") {
			if name, _, ok := strings.Cut(l, "="); ok {
				labels = append(labels, name)
			}
		}
		for _, l := range strings.Split(m[3], ",") {
			if l != "" {
				labels = append(labels, l)
			}
		}
		r[m[1]] = labels
	}
	return nil
}

func (r descRecorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = r.Register(c)
	}
}

func (r descRecorder) Unregister(prometheus.Collector) bool { return false }

// TestKnownMetricsAreRegistered: every metric the dashboard may use is one
// the code registers, with the same labels, so a renamed or relabelled
// series cannot leave a panel silently empty.
func TestKnownMetricsAreRegistered(t *testing.T) {
	reg := descRecorder{}
	engine.NewMetrics(reg)
	histcache.New(nil, histcache.Options{}, reg)
	reg.MustRegister(backend.NewManager(backend.Options{}).Collector())
	routecfg.NewWatcher(routecfg.NewStore(nil, "c"), routecfg.WithRegisterer(reg))
	if _, err := migrate.NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := inproxy.NewDualWriteMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := inproxy.NewRamps(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := archive.NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := coord.NewLockMetrics(reg, "c"); err != nil {
		t.Fatal(err)
	}
	if _, err := search.NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := proxy.New(proxy.Config{Users: []proxy.User{{Name: "u"}}}, nil, nil, reg); err != nil {
		t.Fatal(err)
	}
	for name, want := range knownMetrics {
		if name == "up" { // Prometheus's own
			continue
		}
		got, ok := reg[name]
		if !ok {
			t.Errorf("knownMetrics lists %s, which no package registers", name)
			continue
		}
		g, w := slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))
		if !slices.Equal(g, w) {
			t.Errorf("%s: registered with labels %v, knownMetrics says %v", name, g, w)
		}
	}
	if _, ok := reg["convoy_shard_query_duration_seconds"]; ok {
		t.Error("per-shard latency histograms are back: 2.7 MB a scrape")
	}
}
