package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/router"
)

// chromium runs Debian's headless Chromium on url with extra flags and
// returns its standard output. --virtual-time-budget lets the page's
// fetches and timers run before the DOM is dumped or the screenshot taken.
func chromium(t *testing.T, url string, flags ...string) string {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (%v): scripts/ensure-packages.sh test installs it", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=5000"}, flags...)
	out, err := exec.CommandContext(ctx, bin, append(args, url)...).Output()
	if err != nil {
		t.Fatalf("chromium %s: %v", url, err)
	}
	return string(out)
}

var cellTag = regexp.MustCompile(`<div class="cell[^"]*"[^>]*>`)

// cells parses the dumped DOM: shard -> its data-* attributes.
func cells(t *testing.T, dom string) map[int]map[string]string {
	t.Helper()
	out := map[int]map[string]string{}
	attr := regexp.MustCompile(`data-(\w+)="([^"]*)"`)
	for _, tag := range cellTag.FindAllString(dom, -1) {
		m := map[string]string{}
		for _, a := range attr.FindAllStringSubmatch(tag, -1) {
			m[a[1]] = a[2]
		}
		n, err := strconv.Atoi(m["shard"])
		if err != nil {
			t.Fatalf("cell without a shard number: %s", tag)
		}
		out[n] = m
	}
	if len(out) != router.NumShards {
		t.Fatalf("the page shows %d cells, want %d:\n%.2000s", len(out), router.NumShards, dom)
	}
	return out
}

// TestShardMapPage loads the shard map in a real browser against a running
// Convoy with traffic and asserts on the rendered DOM: the shard written to
// shows QPS, a route change moves a cell to another datasource, a
// migration job marks its cell; the last render is kept as a screenshot
// (artifacts/shardmap.png; UPDATE_SCREENSHOTS=1 also refreshes the
// README's docs/shardmap.png).
func TestShardMapPage(t *testing.T) {
	s := newStack(t)
	db := s.convoy.open(t, "convoy", "convoy", "im")
	const conv = 4242
	hot := router.ShardOf(conv)
	for i := range 50 {
		mustExec(t, db, "INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, ?, 1, 1, NOW(3))", conv, i+1, 424200+i)
	}
	url := "http://" + s.convoy.metrics + "/shards"
	before := cells(t, chromium(t, url, "--dump-dom"))
	if q, _ := strconv.ParseFloat(before[int(hot)]["qps"], 64); q <= 0 {
		t.Fatalf("shard %s took 50 writes but shows qps %q", hot, before[int(hot)]["qps"])
	}
	if before[int(hot)]["ds"] == "" || before[int(hot)]["step"] != "" {
		t.Fatalf("shard %s cell: %v", hot, before[int(hot)])
	}

	// Move the range holding the shard to the other datasource.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	doc, err := s.store.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	oldDS := before[int(hot)]["ds"]
	newDS := map[string]string{"ds0": "ds1", "ds1": "ds0"}[oldDS]
	for i, r := range doc.Shards {
		if int(hot) >= r.From && int(hot) <= r.To {
			doc.Shards[i].Datasource = newDS
		}
	}
	if _, err := s.store.Apply(ctx, doc); err != nil {
		t.Fatal(err)
	}
	// A migration job on another shard.
	migrating := (int(hot) + 500) % router.NumShards
	cli, err := clientv3.New(clientv3.Config{Endpoints: s.etcd.Endpoints(), DialTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := coord.NewJobStore(cli, testCluster).Create(ctx, coord.Job{ID: "page-test", Shard: migrating,
		From: coord.Endpoint{Datasource: "ds0", Database: "im_0"}, To: coord.Endpoint{Datasource: "ds1", Database: "im_9"}, Step: "backfill"}); err != nil {
		t.Fatal(err)
	}
	var after map[int]map[string]string
	dom := ""
	for deadline := time.Now().Add(10 * time.Second); ; {
		dom = chromium(t, url, "--dump-dom")
		after = cells(t, dom)
		if after[int(hot)]["ds"] == newDS || time.Now().After(deadline) {
			break
		}
	}
	if after[int(hot)]["ds"] != newDS {
		t.Fatalf("after the route change shard %s shows datasource %q, want %q", hot, after[int(hot)]["ds"], newDS)
	}
	if !strings.Contains(dom, fmt.Sprintf(`id="route-version">%d<`, doc.Version+1)) {
		t.Fatalf("the page does not show route version %d", doc.Version+1)
	}
	if after[migrating]["step"] != "backfill" {
		t.Fatalf("migrating shard %d cell: %v", migrating, after[migrating])
	}

	dir := os.Getenv("CONVOY_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("..", "artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(dir, "shardmap.png")
	chromium(t, fmt.Sprintf("%s?measure=qps&shard=%d", url, hot), "--screenshot="+shot, "--window-size=1240,860")
	if fi, err := os.Stat(shot); err != nil || fi.Size() < 10_000 {
		t.Fatalf("screenshot %s: %v", shot, err)
	}
	t.Logf("screenshot: %s", shot)
	if os.Getenv("UPDATE_SCREENSHOTS") == "1" {
		b, _ := os.ReadFile(shot)
		if err := os.WriteFile(filepath.Join("..", "docs", "shardmap.png"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPlanMeasured: `convoy plan` reads the fleet: routes from etcd, sizes
// from the datasources' statistics, load from the live proxy's shard map.
func TestPlanMeasured(t *testing.T) {
	s := newStack(t)
	db := s.convoy.open(t, "convoy", "convoy", "im")
	const conv = 777
	for i := range 30 {
		mustExec(t, db, "INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, ?, 1, 1, NOW(3))", conv, i+1, 777000+i)
	}
	out, err := exec.Command(convoyBin, "plan", "--etcd", strings.Join(s.etcd.Endpoints(), ","), "--cluster", testCluster).CombinedOutput()
	if err != nil {
		t.Fatalf("convoy plan: %v\n%s", err, out)
	}
	text := string(out)
	// The busiest shard is the one written to, as the proxy measured it.
	want := "shard_qps    shard " + router.ShardOf(conv).String()
	if !strings.Contains(text, want) || !strings.Contains(text, "Proposal: none") {
		t.Fatalf("plan output lacks %q or the proposal:\n%s", want, text)
	}

	// The same through a MySQL prompt.
	var sizes [][]string
	for deadline := time.Now().Add(20 * time.Second); ; {
		rs, err := db.Query("/*+ convoy SHOW SHARD SIZES */")
		if err == nil {
			rs.Close()
			sizes = queryRows(t, db, "/*+ convoy SHOW SHARD SIZES */")
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("SHOW SHARD SIZES: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(sizes) != router.NumShards+2 || sizes[0][0] != "shard 0000" || sizes[router.NumShards][0] != "datasource ds0" {
		t.Fatalf("SHOW SHARD SIZES: %d rows, first %v, after the shards %v", len(sizes), sizes[0], sizes[min(len(sizes)-1, router.NumShards)])
	}
	lines := func(q string) string {
		var out []string
		for _, r := range queryRows(t, db, q) {
			out = append(out, r[0])
		}
		return strings.Join(out, "\n")
	}
	if p := lines("/*+ convoy PLAN EXPANSION */"); !strings.Contains(p, want) || !strings.Contains(p, "Proposal: none") {
		t.Fatalf("PLAN EXPANSION:\n%s", p)
	}
	if p := lines("/*+ convoy PLAN EXPANSION TO 4 DATASOURCES */"); !strings.Contains(p, "Proposal: split") || !strings.Contains(p, "512 shards move") {
		t.Fatalf("PLAN EXPANSION TO 4 DATASOURCES:\n%s", p)
	}
}
