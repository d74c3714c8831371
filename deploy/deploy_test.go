// Package deploy checks the monitoring files shipped with the repository:
// the Grafana dashboard, the Prometheus scrape config, the Grafana
// provisioning and how docker-compose.yml wires them together.
package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/convoy-im/convoy/archive"
	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/migrate"
	"github.com/convoy-im/convoy/migrate/inproxy"
	"github.com/convoy-im/convoy/routecfg"
)

// knownMetrics lists every series the dashboard may use, with its labels
// (instance and job, added by Prometheus, are allowed everywhere).
// TestKnownMetricsAreRegistered checks it against the code that registers
// them.
var knownMetrics = map[string][]string{
	// proxy/engine/metrics.go (NewMetrics)
	"convoy_shard_queries_total":               {"shard", "kind"},
	"convoy_shard_errors_total":                {"shard"},
	"convoy_datasource_query_duration_seconds": {"datasource", "kind"}, // histogram
	"convoy_datasource_errors_total":           {"datasource", "kind"},
	"convoy_shards_over_threshold":             {"trigger"}, // windowCollector, at scrape time
	"convoy_shard_write_p99_max_seconds":       {},
	"convoy_statements_total":                  {"class"},
	"convoy_scatter_total":                     {"table"},
	"convoy_scatter_targets":                   {}, // histogram
	"convoy_plan_cache_total":                  {"result"},
	"convoy_prepared_backend_total":            {"path"},
	"convoy_migration_hold_queued_writes":      {},
	"convoy_migration_hold_wait_seconds":       {}, // histogram
	"convoy_migration_hold_refused_total":      {"reason"},
	"convoy_cold_reads_total":                  {"shape", "first_screen", "result"},
	"convoy_cold_read_duration_seconds":        {"shape"}, // histogram
	"convoy_cold_rows_total":                   {},
	"convoy_cold_checks_total":                 {"decision"},
	"convoy_cold_writes_total":                 {"result"},
	"convoy_outbox_recorded_total":             {},
	"convoy_outbox_delivered_total":            {"datasource"},
	"convoy_outbox_delivery_lag_seconds":       {}, // histogram
	"convoy_outbox_dead_letters_total":         {"datasource"},
	"convoy_outbox_oldest_pending_seconds":     {"datasource"},
	"convoy_outbox_dead_letters":               {"datasource"},

	// proxy/server.go (client side)
	"convoy_client_connections":                {},
	"convoy_client_connections_rejected_total": {},
	"convoy_client_errors_total":               {"errno"},

	// proxy/backend/metrics.go (poolDesc and stateDesc, collected at scrape
	// time; the transitions counter)
	"convoy_pool_connections":             {"datasource", "state"},
	"convoy_datasource_state":             {"datasource"},
	"convoy_datasource_transitions_total": {"datasource", "to"},

	// routecfg/metrics.go: the names are the exported constants, so a
	// rename there breaks this test.
	routecfg.MetricVersion:   {"cluster"},
	routecfg.MetricStale:     {"cluster"},
	routecfg.MetricStaleness: {"cluster"},
	routecfg.MetricLastSync:  {"cluster"},
	routecfg.MetricReloads:   {"cluster"},
	routecfg.MetricRejected:  {"cluster"},
	// coord/miglock_metrics.go (LockMetrics, proxy side)
	coord.MetricShardsHeld:       {"cluster"},
	coord.MetricShardHoldFails:   {"cluster", "reason"},
	coord.MetricShardHoldSeconds: {"cluster"}, // histogram
	coord.MetricWriteFenced:      {"cluster"},
	// coord/miglock_metrics.go (LockMetrics, migrator side)
	coord.MetricLockSeconds: {"cluster", "outcome"}, // histogram

	// migrate/metrics.go (NewMetrics: the jobs run in this process)
	migrate.MetricJobStep:      {"shard", "step"},
	migrate.MetricRowsCopied:   {"shard"},
	migrate.MetricRowsEstimate: {"shard"},
	migrate.MetricApplyLag:     {"shard"},
	migrate.MetricStepFailures: {"step"},
	migrate.MetricBacklog:      {"shard"},
	migrate.MetricBreaches:     {"shard"},
	// migrate/inproxy/dualwrite.go (NewDualWriteMetrics: every proxy's mirror)
	inproxy.MetricDualWrites:       {"result"},
	inproxy.MetricDualWriteSeconds: {}, // histogram
	// migrate/inproxy/rampstats.go (NewRamps: every proxy's read ramps)
	inproxy.MetricRampReads:   {"shard", "side", "result"},
	inproxy.MetricRampLatency: {"shard", "side"}, // histogram

	// archive/metrics.go (NewMetrics: the archive runs of this process)
	archive.MetricRows:        {"op"},
	archive.MetricFiles:       {},
	archive.MetricBytes:       {},
	archive.MetricErrors:      {},
	archive.MetricLastSuccess: {},
	archive.MetricKeysScanned: {"table"},

	// histcache/metrics.go (namespace convoy, subsystem histcache)
	"convoy_histcache_hits_total":   {"op"},
	"convoy_histcache_misses_total": {"op", "reason"},

	// proxy/engine/metrics.go: msg_search queries
	"convoy_search_query_duration_seconds": {"part"}, // histogram
	"convoy_search_query_errors_total":     {"part"},
	// search/metrics.go (NewMetrics: the index feeds run in this process)
	"convoy_search_docs_indexed_total":  {"datasource"},
	"convoy_search_docs_deleted_total":  {"datasource"},
	"convoy_search_docs_skipped_total":  {"datasource"},
	"convoy_search_index_lag_seconds":   {"datasource"}, // histogram
	"convoy_search_feed_behind_seconds": {"datasource"},
	"convoy_search_feed_runs_total":     {"datasource"},

	// Prometheus itself: one series per scrape target.
	"up": {},
}

// histograms expose <name>_bucket (with le), _sum and _count.
var histograms = []string{"convoy_datasource_query_duration_seconds", "convoy_scatter_targets", "convoy_migration_hold_wait_seconds", "convoy_cold_read_duration_seconds",
	inproxy.MetricDualWriteSeconds, inproxy.MetricRampLatency, coord.MetricLockSeconds, coord.MetricShardHoldSeconds,
	"convoy_search_query_duration_seconds", "convoy_search_index_lag_seconds"}

// resolveMetric maps a series name to its metric and label set.
func resolveMetric(name string) (string, []string, bool) {
	if labels, ok := knownMetrics[name]; ok {
		return name, labels, true
	}
	for _, h := range histograms {
		switch name {
		case h + "_bucket":
			return h, append(slices.Clone(knownMetrics[h]), "le"), true
		case h + "_sum", h + "_count":
			return h, knownMetrics[h], true
		}
	}
	return "", nil, false
}

type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource *datasourceRef `json:"datasource"`
	GridPos    *struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID      string         `json:"refId"`
		Expr       string         `json:"expr"`
		Datasource *datasourceRef `json:"datasource"`
	} `json:"targets"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile("grafana/convoy-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	var d dashboard
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("convoy-dashboard.json is not valid JSON: %v", err)
	}
	if !json.Valid(b) {
		t.Fatal("convoy-dashboard.json is not valid JSON")
	}
	return d
}

func TestDashboard(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard uid %q title %q: both are required", d.UID, d.Title)
	}
	if d.SchemaVersion < 36 || d.SchemaVersion > 41 {
		t.Errorf("schemaVersion %d, want about 39", d.SchemaVersion)
	}
	if len(d.Panels) == 0 {
		t.Fatal("no panels")
	}
	ids := map[int]bool{}
	used := map[string]bool{}
	for _, p := range d.Panels {
		name := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if p.Title == "" {
			t.Errorf("panel %d has no title", p.ID)
		}
		if ids[p.ID] || p.ID == 0 {
			t.Errorf("%s: id missing or repeated", name)
		}
		ids[p.ID] = true
		if p.GridPos == nil || p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("%s: bad gridPos %+v", name, p.GridPos)
		}
		if p.Datasource == nil || p.Datasource.UID != "prometheus" {
			t.Errorf("%s: datasource %+v, want uid prometheus", name, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("%s has no target", name)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("%s: target %s has an empty expr", name, tg.RefID)
				continue
			}
			if tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("%s: refId %q missing or repeated", name, tg.RefID)
			}
			refs[tg.RefID] = true
			if tg.Datasource != nil && tg.Datasource.UID != "prometheus" {
				t.Errorf("%s: target %s datasource %+v, want uid prometheus", name, tg.RefID, tg.Datasource)
			}
			metrics, err := lintPromQL(tg.Expr)
			if err != nil {
				t.Errorf("%s: target %s: %v\n  expr: %s", name, tg.RefID, err, tg.Expr)
			}
			for _, m := range metrics {
				used[m] = true
			}
		}
	}
	// The dashboard shows what the issue asks for.
	for _, m := range []string{
		"convoy_statements_total", "convoy_shard_queries_total", "convoy_datasource_query_duration_seconds",
		"convoy_shard_errors_total", "convoy_datasource_errors_total", "convoy_shards_over_threshold",
		"convoy_shard_write_p99_max_seconds", "convoy_scatter_total", "convoy_scatter_targets",
		"convoy_client_connections", "convoy_client_errors_total", "convoy_pool_connections",
		"convoy_datasource_state", "convoy_datasource_transitions_total",
		routecfg.MetricVersion, routecfg.MetricStaleness, routecfg.MetricStale,
		"up", "convoy_histcache_hits_total", "convoy_histcache_misses_total",
		"convoy_migration_hold_queued_writes", "convoy_migration_hold_wait_seconds", "convoy_migration_hold_refused_total",
		coord.MetricShardsHeld, coord.MetricShardHoldFails,
		migrate.MetricRowsCopied, migrate.MetricApplyLag, migrate.MetricJobStep, migrate.MetricStepFailures,
		inproxy.MetricRampReads, inproxy.MetricRampLatency,
		archive.MetricRows, "convoy_cold_reads_total", "convoy_cold_read_duration_seconds", "convoy_cold_checks_total", "convoy_cold_writes_total",
	} {
		if !used[m] {
			t.Errorf("no panel uses %s", m)
		}
	}
}

// TestLintPromQL checks the checker: it must reject the mistakes it exists
// to catch.
func TestLintPromQL(t *testing.T) {
	good := []string{
		`topk(20, sum by (shard) (rate(convoy_shard_queries_total[1m])))`,
		`histogram_quantile(0.99, sum by (datasource, le) (rate(convoy_datasource_query_duration_seconds_bucket{kind="write"}[5m])))`,
		`sum(rate(convoy_scatter_targets_sum[5m])) / sum(rate(convoy_scatter_targets_count[5m]))`,
		`sum(up{job="convoy"}) by (instance)`,
		`topk(20, sum by (shard) (rate(convoy_shard_errors_total[1m])) > 0)`,
		`max without (instance) (convoy_route_version) offset 5m`,
	}
	for _, e := range good {
		if _, err := lintPromQL(e); err != nil {
			t.Errorf("lintPromQL(%s) = %v, want ok", e, err)
		}
	}
	bad := map[string]string{
		`sum(rate(convoy_shard_queries_total[1m])`:                                       "unbalanced",
		`sum(rate(convoy_shard_querys_total[1m]))`:                                       "unknown metric",
		`sum by (shrad) (rate(convoy_shard_queries_total[1m]))`:                          "label",
		`rate(convoy_shard_queries_total{knd="write"}[1m])`:                              "label",
		`rate(convoy_shard_queries_total[1x])`:                                           "duration",
		`rated(convoy_shard_queries_total[1m])`:                                          "unknown function",
		`rate(convoy_shard_queries_total{kind="write}[1m])`:                              "unterminated",
		`convoy_pool_connections{state=}`:                                                "matcher",
		`sum(convoy_statements_total`:                                                    "unbalanced",
		`convoy_scatter_total_bucket`:                                                    "unknown metric",
		`rate(convoy_shard_query_duration_seconds_bucket[5m])`:                           "unknown metric",
		`sum by (shard, le) (rate(convoy_datasource_query_duration_seconds_bucket[5m]))`: "label",
		`rate(convoy_shard_errors_total{kind="write"}[1m])`:                              "label",
		`histogram_quantile(0.9, rate(convoy_scatter_total[5m]) ])`:                      "unbalanced",
	}
	for e, want := range bad {
		if _, err := lintPromQL(e); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("lintPromQL(%s) = %v, want an error mentioning %q", e, err, want)
		}
	}
}

// PromQL functions and aggregation operators the dashboard may call.
var promFuncs = map[string]bool{
	"abs": true, "absent": true, "avg_over_time": true, "ceil": true, "changes": true, "clamp_max": true,
	"clamp_min": true, "count_over_time": true, "delta": true, "deriv": true, "floor": true,
	"histogram_quantile": true, "idelta": true, "increase": true, "irate": true, "label_replace": true,
	"max_over_time": true, "min_over_time": true, "rate": true, "resets": true, "round": true,
	"scalar": true, "sort": true, "sort_desc": true, "sum_over_time": true, "time": true,
	"timestamp": true, "vector": true, "last_over_time": true, "quantile_over_time": true,
}

var promAggs = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "count": true, "stddev": true, "stdvar": true,
	"topk": true, "bottomk": true, "quantile": true, "count_values": true, "group": true,
}

var (
	identRe    = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*`)
	numberRe   = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?`)
	durationRe = regexp.MustCompile(`^([0-9]+(ms|[smhdwy]))+$`)
)

type token struct {
	kind string // ident, number, string, op, range
	text string
}

func tokenize(expr string) ([]token, error) {
	var toks []token
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			i++
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(expr) && expr[j] != c {
				if expr[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			if j >= len(expr) {
				return nil, fmt.Errorf("unterminated string at offset %d", i)
			}
			toks = append(toks, token{"string", expr[i : j+1]})
			i = j + 1
		case c == '[':
			j := strings.IndexByte(expr[i:], ']')
			if j < 0 {
				return nil, fmt.Errorf("unbalanced '[' at offset %d", i)
			}
			body := expr[i+1 : i+j]
			rng, step, _ := strings.Cut(body, ":")
			if !durationRe.MatchString(rng) || (step != "" && !durationRe.MatchString(step)) {
				return nil, fmt.Errorf("bad range duration [%s]", body)
			}
			toks = append(toks, token{"range", expr[i : i+j+1]})
			i += j + 1
		case identRe.MatchString(expr[i:]):
			m := identRe.FindString(expr[i:])
			toks = append(toks, token{"ident", m})
			i += len(m)
		case numberRe.MatchString(expr[i:]):
			m := numberRe.FindString(expr[i:])
			toks = append(toks, token{"number", m})
			i += len(m)
		default:
			op := string(c)
			if i+1 < len(expr) {
				if two := expr[i : i+2]; slices.Contains([]string{"==", "!=", "<=", ">=", "=~", "!~"}, two) {
					op = two
				}
			}
			if op == "]" {
				return nil, fmt.Errorf("unbalanced ']' at offset %d", i)
			}
			if !strings.Contains("+-*/%^<>=(){},", op[:1]) || op == "!" {
				return nil, fmt.Errorf("unexpected %q at offset %d", op, i)
			}
			toks = append(toks, token{"op", op})
			i += len(op)
		}
	}
	return toks, nil
}

// lintPromQL is a structural check of a PromQL expression: tokens, balanced
// brackets, known functions and aggregations, label lists and matchers, and
// metric names from knownMetrics with their labels. It is not the full
// Prometheus grammar (that parser is not a dependency of this module), but
// it catches the typos that make a panel silently empty. It returns the
// metrics referenced.
func lintPromQL(expr string) ([]string, error) {
	toks, err := tokenize(expr)
	if err != nil {
		return nil, err
	}
	var (
		stack   []string
		metrics []string
		labels  = map[string]bool{"instance": true, "job": true}
		// label names used in by/without/on/ignoring and matchers, checked
		// once the whole expression's metrics are known.
		usedLabels []string
	)
	for i := 0; i < len(toks); i++ {
		tk := toks[i]
		next := func() token {
			if i+1 < len(toks) {
				return toks[i+1]
			}
			return token{}
		}
		switch tk.kind {
		case "op":
			switch tk.text {
			case "(", "{":
				stack = append(stack, tk.text)
			case ")", "}":
				want := map[string]string{")": "(", "}": "{"}[tk.text]
				if len(stack) == 0 || stack[len(stack)-1] != want {
					return nil, fmt.Errorf("unbalanced %q", tk.text)
				}
				stack = stack[:len(stack)-1]
			}
		case "ident":
			switch {
			case slices.Contains([]string{"by", "without", "on", "ignoring", "group_left", "group_right"}, tk.text):
				if next().text != "(" {
					if tk.text == "group_left" || tk.text == "group_right" {
						continue
					}
					return nil, fmt.Errorf("%s needs a label list", tk.text)
				}
				j := i + 2
				for ; j < len(toks) && toks[j].text != ")"; j++ {
					if toks[j].kind == "ident" {
						usedLabels = append(usedLabels, toks[j].text)
					} else if toks[j].text != "," {
						return nil, fmt.Errorf("bad label list after %s: %q", tk.text, toks[j].text)
					}
				}
				if j == len(toks) {
					return nil, fmt.Errorf("unbalanced '(' in %s list", tk.text)
				}
				i = j
			case slices.Contains([]string{"and", "or", "unless", "bool"}, tk.text):
			case tk.text == "offset":
				if i+1 >= len(toks) || !durationRe.MatchString(toks[i+1].text+nextIdentSuffix(toks, i+1)) {
					return nil, fmt.Errorf("offset needs a duration")
				}
				i = skipDuration(toks, i+1)
			case next().text == "(":
				if !promFuncs[tk.text] && !promAggs[tk.text] {
					return nil, fmt.Errorf("unknown function %q", tk.text)
				}
			case promAggs[tk.text] && slices.Contains([]string{"by", "without"}, next().text):
			default:
				name, mlabels, ok := resolveMetric(tk.text)
				if !ok {
					return nil, fmt.Errorf("unknown metric %q (not in knownMetrics)", tk.text)
				}
				metrics = append(metrics, name)
				for _, l := range mlabels {
					labels[l] = true
				}
				if next().text == "{" {
					j, ls, err := parseMatchers(toks, i+2)
					if err != nil {
						return nil, err
					}
					// matchers must be labels of this very metric
					for _, l := range ls {
						if l != "job" && l != "instance" && !slices.Contains(mlabels, l) {
							return nil, fmt.Errorf("metric %s has no label %q", tk.text, l)
						}
					}
					i = j
				}
			}
		}
	}
	if len(stack) > 0 {
		return nil, fmt.Errorf("unbalanced %q", stack[len(stack)-1])
	}
	for _, l := range usedLabels {
		if !labels[l] {
			return nil, fmt.Errorf("label %q is not a label of any metric in the expression", l)
		}
	}
	if len(metrics) == 0 {
		return nil, fmt.Errorf("no metric in the expression")
	}
	return metrics, nil
}

// parseMatchers reads label matchers from toks[i] up to the closing '}' and
// returns its index and the label names.
func parseMatchers(toks []token, i int) (int, []string, error) {
	var names []string
	for ; i < len(toks); i++ {
		if toks[i].text == "}" {
			return i, names, nil
		}
		if i+2 >= len(toks) || toks[i].kind != "ident" ||
			!slices.Contains([]string{"=", "!=", "=~", "!~"}, toks[i+1].text) || toks[i+2].kind != "string" {
			return 0, nil, fmt.Errorf("bad label matcher near %q (want label=\"value\")", toks[i].text)
		}
		names = append(names, toks[i].text)
		i += 2
		if i+1 < len(toks) && toks[i+1].text == "," {
			i++
		}
	}
	return 0, nil, fmt.Errorf("unbalanced '{' in label matchers")
}

// A duration after offset tokenizes as number + ident ("5" "m").
func nextIdentSuffix(toks []token, i int) string {
	if i+1 < len(toks) && toks[i].kind == "number" && toks[i+1].kind == "ident" {
		return toks[i+1].text
	}
	return ""
}

func skipDuration(toks []token, i int) int {
	if nextIdentSuffix(toks, i) != "" {
		return i + 1
	}
	return i
}

func readYAML(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

func TestPrometheusConfig(t *testing.T) {
	var cfg struct {
		Global struct {
			ScrapeInterval string `yaml:"scrape_interval"`
		} `yaml:"global"`
		ScrapeConfigs []struct {
			JobName        string `yaml:"job_name"`
			ScrapeInterval string `yaml:"scrape_interval"`
			MetricsPath    string `yaml:"metrics_path"`
			StaticConfigs  []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, "prometheus/prometheus.yml", &cfg)
	for _, sc := range cfg.ScrapeConfigs {
		if sc.JobName != "convoy" {
			continue
		}
		interval := sc.ScrapeInterval
		if interval == "" {
			interval = cfg.Global.ScrapeInterval
		}
		if interval != "5s" {
			t.Errorf("job convoy scrapes every %q, want 5s", interval)
		}
		if sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
			t.Errorf("metrics_path %q", sc.MetricsPath)
		}
		if len(sc.StaticConfigs) != 1 || !slices.Equal(sc.StaticConfigs[0].Targets, []string{"convoy:9104"}) {
			t.Errorf("job convoy targets %+v, want convoy:9104", sc.StaticConfigs)
		}
		return
	}
	t.Fatal(`prometheus.yml has no job "convoy" (the dashboard filters on up{job="convoy"})`)
}

// TestAlertRules checks the alerting rules Prometheus loads: every rule
// names a known metric with known labels, has a severity and says what to
// do, and the dual-write is alerted on (docs/design.md §7; seed 001:
// "双写失败必须告警").
func TestAlertRules(t *testing.T) {
	var cfg struct {
		RuleFiles []string `yaml:"rule_files"`
	}
	readYAML(t, "prometheus/prometheus.yml", &cfg)
	if !slices.Contains(cfg.RuleFiles, "alerts.yml") {
		t.Fatalf("prometheus.yml rule_files %v does not load alerts.yml", cfg.RuleFiles)
	}
	var rules struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	readYAML(t, "prometheus/alerts.yml", &rules)
	seen := map[string]string{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || seen[r.Alert] != "" {
				t.Errorf("group %s: rule %q without a name or named twice", g.Name, r.Alert)
			}
			seen[r.Alert] = r.Expr
			if _, err := lintPromQL(r.Expr); err != nil {
				t.Errorf("%s: %v", r.Alert, err)
			}
			if s := r.Labels["severity"]; s != "page" && s != "ticket" {
				t.Errorf("%s: severity %q, want page or ticket", r.Alert, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: no summary or description", r.Alert)
			}
			if r.For != "" && !regexp.MustCompile(`^\d+[smh]$`).MatchString(r.For) {
				t.Errorf("%s: for %q", r.Alert, r.For)
			}
		}
	}
	for _, result := range []string{inproxy.DualWriteQueued, inproxy.DualWriteLost} {
		found := false
		for _, expr := range seen {
			found = found || (strings.Contains(expr, inproxy.MetricDualWrites) && strings.Contains(expr, `result="`+result+`"`))
		}
		if !found {
			t.Errorf("no alert on %s{result=%q}", inproxy.MetricDualWrites, result)
		}
	}
}

type composeFile struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Ports       []string          `yaml:"ports"`
		Volumes     []string          `yaml:"volumes"`
		Environment map[string]string `yaml:"environment"`
		Command     []string          `yaml:"command"`
	} `yaml:"services"`
}

// TestEtcdCompaction: every etcd Convoy's files start (docker compose, the
// dev stack, the test harness) compacts its history and has a quota, so a
// long archive or migration run cannot fill it (a full quota refuses every
// write: routes, migrations, the archive).
func TestEtcdCompaction(t *testing.T) {
	want := []string{"auto-compaction-mode", "auto-compaction-retention", "quota-backend-bytes"}
	var compose composeFile
	readYAML(t, "../docker-compose.yml", &compose)
	cmd := strings.Join(compose.Services["etcd"].Command, " ")
	for _, f := range []string{"../scripts/dev-up.sh", "../internal/testsvc/etcd.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !strings.Contains(string(b), "--"+w) {
				t.Errorf("%s starts etcd without --%s", f, w)
			}
		}
	}
	for _, w := range want {
		if !strings.Contains(cmd, "--"+w+"=") {
			t.Errorf("docker-compose.yml starts etcd without --%s: %s", w, cmd)
		}
	}
}

// mountTarget returns where compose mounts the repository path src in the
// service ("" if it does not).
func mountTarget(vols []string, src string) string {
	for _, v := range vols {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && path.Clean(parts[0]) == path.Clean(src) {
			return parts[1]
		}
	}
	return ""
}

func TestGrafanaProvisioningAndCompose(t *testing.T) {
	var dsCfg struct {
		Datasources []struct {
			UID, Type, URL string
		} `yaml:"datasources"`
	}
	readYAML(t, "grafana/provisioning/datasources/prometheus.yml", &dsCfg)
	if len(dsCfg.Datasources) != 1 || dsCfg.Datasources[0].UID != "prometheus" || dsCfg.Datasources[0].Type != "prometheus" ||
		dsCfg.Datasources[0].URL != "http://prometheus:9090" {
		t.Errorf("datasource provisioning %+v, want one prometheus datasource, uid prometheus, url http://prometheus:9090", dsCfg.Datasources)
	}
	var dbCfg struct {
		Providers []struct {
			Type    string `yaml:"type"`
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, "grafana/provisioning/dashboards/convoy.yml", &dbCfg)
	if len(dbCfg.Providers) != 1 || dbCfg.Providers[0].Type != "file" || dbCfg.Providers[0].Options.Path == "" {
		t.Fatalf("dashboard provisioning %+v, want one file provider with a path", dbCfg.Providers)
	}
	providerDir := dbCfg.Providers[0].Options.Path

	var compose composeFile
	readYAML(t, "../docker-compose.yml", &compose)
	prom, ok := compose.Services["prometheus"]
	if !ok || !strings.HasPrefix(prom.Image, "prom/prometheus") {
		t.Fatalf("docker-compose.yml: no prometheus service with image prom/prometheus (%+v)", prom)
	}
	if got := mountTarget(prom.Volumes, "./deploy/prometheus"); got != "/etc/prometheus" {
		t.Errorf("prometheus mounts ./deploy/prometheus at %q, want /etc/prometheus", got)
	}
	if !slices.Contains(prom.Ports, "127.0.0.1:9090:9090") {
		t.Errorf("prometheus ports %v, want 127.0.0.1:9090:9090", prom.Ports)
	}
	graf, ok := compose.Services["grafana"]
	if !ok || !strings.HasPrefix(graf.Image, "grafana/grafana") {
		t.Fatalf("docker-compose.yml: no grafana service with image grafana/grafana (%+v)", graf)
	}
	if got := mountTarget(graf.Volumes, "./deploy/grafana/provisioning"); got != "/etc/grafana/provisioning" {
		t.Errorf("grafana mounts the provisioning dir at %q, want /etc/grafana/provisioning", got)
	}
	if got := mountTarget(graf.Volumes, "./deploy/grafana/convoy-dashboard.json"); path.Dir(got) != path.Clean(providerDir) {
		t.Errorf("grafana mounts the dashboard at %q, but the file provider reads %s", got, providerDir)
	}
	if graf.Environment["GF_AUTH_ANONYMOUS_ENABLED"] != "true" || graf.Environment["GF_AUTH_ANONYMOUS_ORG_ROLE"] != "Viewer" {
		t.Errorf("grafana environment %v, want anonymous Viewer access", graf.Environment)
	}
	if !slices.Contains(graf.Ports, "127.0.0.1:3000:3000") {
		t.Errorf("grafana ports %v, want 127.0.0.1:3000:3000", graf.Ports)
	}
	if _, ok := compose.Services["convoy"]; !ok {
		t.Error(`docker-compose.yml has no "convoy" service for Prometheus to scrape`)
	}

	// docker-compose validates the whole file when it is installed (no
	// Docker engine needed for `config`).
	bin, err := exec.LookPath("docker-compose")
	if err != nil {
		t.Logf("docker-compose not installed; `docker-compose config -q` not run")
		return
	}
	cmd := exec.Command(bin, "-f", "docker-compose.yml", "config", "-q")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("docker-compose config -q: %v\n%s", err, out)
	}
}
