// Package shardmap serves the live shard map page (docs/design.md §11): the
// 1024 logical shards as a 32 x 32 grid coloured by a chosen measure against
// the expansion triggers (docs/design.md §7), where each shard lives, the
// shards in migration, the route version and the live proxies. The page is
// one embedded HTML file (no build step, no CDN) that polls /api/map; a click
// on a shard asks /api/shard?n=N for its details.
//
// The statistics are this proxy's own (each proxy measures the statements
// it serves); sizes come from the backends' statistics, refreshed in the
// background, so a page load never waits on a datasource.
package shardmap

import (
	"context"
	_ "embed"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/planner"
	"github.com/convoy-im/convoy/proxy/stats"
	"github.com/convoy-im/convoy/router"
)

//go:embed index.html
var indexHTML []byte

// Source is what the page shows, supplied by `convoy serve`. Any func may be
// nil: its part of the page is then empty.
type Source struct {
	Routes     func() *router.Snapshot
	RouteStale func() bool
	Stats      func() []stats.ShardStats
	Proxies    func(context.Context) ([]coord.ProxyInfo, error)
	Migrations func(context.Context) ([]coord.Job, error)
	// Sizes reads one database's table statistics (planner.InformationSchemaStats).
	Sizes planner.TableStats
	// Sample, if set, is handed each size reading, for the planner's daily
	// growth samples (coord.PutDailySample).
	Sample func(context.Context, coord.SizeSample)
	// The seed's triggers, as configured (health.shard_qps, health.write_p99).
	QPSThreshold      float64
	WriteP99Threshold time.Duration
	Log               *zap.Logger
}

// sizeRefresh paces the background read of the backends' statistics:
// InnoDB refreshes them itself only every few seconds to minutes.
const sizeRefresh = time.Minute

// Handler serves the page and its API.
type Handler struct {
	src Source
	mux *http.ServeMux

	mu      sync.Mutex
	sizes   map[router.Shard]planner.ShardSize
	sizesAt time.Time
	sizeErr string
	stop    context.CancelFunc
}

// New returns the handler and starts the size refresher (Close stops it).
func New(src Source) *Handler {
	if src.Log == nil {
		src.Log = zap.NewNop()
	}
	h := &Handler{src: src, mux: http.NewServeMux()}
	h.mux.HandleFunc("/shards", h.page)
	h.mux.HandleFunc("/api/map", h.apiMap)
	h.mux.HandleFunc("/api/shard", h.apiShard)
	ctx, cancel := context.WithCancel(context.Background())
	h.stop = cancel
	if src.Sizes != nil && src.Routes != nil {
		go h.refreshSizes(ctx)
	}
	return h
}

// Register adds the page's routes to mux.
func (h *Handler) Register(mux *http.ServeMux) {
	for _, p := range []string{"/shards", "/api/map", "/api/shard"} {
		mux.Handle(p, h.mux)
	}
	mux.Handle("/{$}", http.RedirectHandler("/shards", http.StatusFound))
}

// Close stops the size refresher.
func (h *Handler) Close() { h.stop() }

func (h *Handler) refreshSizes(ctx context.Context) {
	for {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		sizes, err := planner.ShardSizes(rctx, h.src.Routes(), h.src.Sizes, nil)
		cancel()
		h.mu.Lock()
		if err != nil {
			h.sizeErr = err.Error()
		} else {
			h.sizes, h.sizesAt, h.sizeErr = sizes, time.Now(), ""
		}
		h.mu.Unlock()
		if err == nil && h.src.Sample != nil {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			h.src.Sample(sctx, sampleOf(sizes, time.Now()))
			cancel()
		}
		if err != nil && ctx.Err() == nil {
			h.src.Log.Debug("shard map: reading table statistics", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(sizeRefresh):
		}
	}
}

// Sizes returns the last reading of the shards' sizes, when it was taken
// and the last reading's error ("" if it worked).
func (h *Handler) Sizes() (map[router.Shard]planner.ShardSize, time.Time, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sizes, h.sizesAt, h.sizeErr
}

// sampleOf is the day's size sample of sizes.
func sampleOf(sizes map[router.Shard]planner.ShardSize, now time.Time) coord.SizeSample {
	s := coord.SizeSample{Day: now.UTC().Format("20060102"), Taken: now.UTC()}
	for sh, sz := range sizes {
		s.Shards[sh] = [2]int64{sz.Rows, sz.Bytes}
		s.LargestRows[sh], s.LargestBytes[sh] = sz.Largest.Rows, sz.Largest.Bytes
	}
	return s
}

func (h *Handler) page(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	// The page loads nothing from elsewhere: say so to the browser too.
	w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'unsafe-inline'; script-src 'unsafe-inline'")
	_, _ = w.Write(indexHTML)
}

// Shard is one cell of the map.
type Shard struct {
	Shard      int     `json:"shard"`
	Datasource string  `json:"ds"`
	Database   string  `json:"db"`
	Table      int     `json:"table"`
	QPS        float64 `json:"qps"`
	Reads      int64   `json:"reads"`
	Writes     int64   `json:"writes"`
	Errors     int64   `json:"errors"`
	ReadP50    float64 `json:"read_p50_ms"`
	ReadP99    float64 `json:"read_p99_ms"`
	WriteP50   float64 `json:"write_p50_ms"`
	WriteP99   float64 `json:"write_p99_ms"`
	Rows       int64   `json:"rows"`
	Bytes      int64   `json:"bytes"`
	Migration  *Move   `json:"migration,omitempty"`
}

// Move is a shard's migration as its job record says.
type Move struct {
	Step      string    `json:"step"`
	To        string    `json:"to"`
	Progress  string    `json:"progress,omitempty"`
	LastError string    `json:"last_error,omitempty"`
	Updated   time.Time `json:"updated"`
}

// Map is /api/map.
type Map struct {
	GeneratedAt    time.Time               `json:"generated_at"`
	RouteVersion   int64                   `json:"route_version"`
	RouteStale     bool                    `json:"route_stale"`
	RouteChangedBy string                  `json:"route_changed_by,omitempty"`
	QPSThreshold   float64                 `json:"qps_threshold"`
	WriteP99Limit  float64                 `json:"write_p99_threshold_ms"`
	Datasources    []string                `json:"datasources"`
	Proxies        []coord.ProxyInfo       `json:"proxies"`
	ProxiesError   string                  `json:"proxies_error,omitempty"`
	SizesAt        time.Time               `json:"sizes_at,omitzero"`
	SizesError     string                  `json:"sizes_error,omitempty"`
	MigrationError string                  `json:"migrations_error,omitempty"`
	Shards         [router.NumShards]Shard `json:"shards"`
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (h *Handler) build(ctx context.Context) *Map {
	m := &Map{GeneratedAt: time.Now().UTC(), QPSThreshold: h.src.QPSThreshold, WriteP99Limit: ms(h.src.WriteP99Threshold)}
	snap := h.src.Routes()
	m.RouteVersion = snap.Version()
	m.RouteChangedBy = snap.Document().ChangedBy
	if h.src.RouteStale != nil {
		m.RouteStale = h.src.RouteStale()
	}
	for _, ds := range snap.Datasources() {
		m.Datasources = append(m.Datasources, ds.Name)
	}
	for i := range m.Shards {
		t := snap.Target(router.Shard(i))
		m.Shards[i] = Shard{Shard: i, Datasource: t.Datasource, Database: t.Database, Table: t.Table}
	}
	if h.src.Stats != nil {
		for _, st := range h.src.Stats() {
			c := &m.Shards[st.Shard]
			c.QPS, c.Reads, c.Writes, c.Errors = st.QPS, st.Reads, st.Writes, st.Errors
			c.ReadP50, c.ReadP99, c.WriteP50, c.WriteP99 = ms(st.ReadP50), ms(st.ReadP99), ms(st.WriteP50), ms(st.WriteP99)
		}
	}
	h.mu.Lock()
	for sh, sz := range h.sizes {
		m.Shards[sh].Rows, m.Shards[sh].Bytes = sz.Rows, sz.Bytes
	}
	m.SizesAt, m.SizesError = h.sizesAt, h.sizeErr
	h.mu.Unlock()
	// etcd is asked with a short budget: the page must render when it is
	// down, showing what it could not learn.
	ectx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if h.src.Proxies != nil {
		ps, err := h.src.Proxies(ectx)
		m.Proxies = ps
		if err != nil {
			m.ProxiesError = err.Error()
		}
	}
	if h.src.Migrations != nil {
		jobs, err := h.src.Migrations(ectx)
		if err != nil {
			m.MigrationError = err.Error()
		}
		for _, j := range jobs {
			if j.Shard >= 0 && j.Shard < router.NumShards {
				m.Shards[j.Shard].Migration = &Move{Step: j.Step, To: j.To.Datasource + "/" + j.To.Database,
					Progress: string(j.Progress), LastError: j.LastError, Updated: j.UpdatedAt}
			}
		}
	}
	return m
}

func (h *Handler) apiMap(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, h.build(r.Context()))
}

// ShardDetail is /api/shard?n=N.
type ShardDetail struct {
	Shard
	Physical []string `json:"physical"`
	Hint     string   `json:"hint"`
	Addr     string   `json:"addr"`
}

func (h *Handler) apiShard(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(r.URL.Query().Get("n"))
	if err != nil || n < 0 || n >= router.NumShards {
		http.Error(w, "n must be a shard number 0..1023", http.StatusBadRequest)
		return
	}
	m := h.build(r.Context())
	snap := h.src.Routes()
	d := ShardDetail{Shard: m.Shards[n], Hint: "/*+ convoy shard=" + strconv.Itoa(n) + " */ SELECT ..."}
	if ds, ok := snap.Datasource(d.Datasource); ok {
		d.Addr = ds.Addr
	}
	for _, logical := range router.ShardedTables() {
		d.Physical = append(d.Physical, snap.Physical(logical, router.Shard(n)).Database+"."+snap.Physical(logical, router.Shard(n)).Table)
	}
	writeJSON(w, d)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}
