package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/migrate"
	"github.com/convoy-im/convoy/routecfg"
	"github.com/convoy-im/convoy/router"
)

// TestLayoutCLI: what `convoy migrate plan|apply --to FILE` print, against
// a real etcd and MariaDB (the plan reads the source's statistics): the new
// datasource, the move and its totals; the jobs started, then skipped when
// run again; refusals as the operator sees them. The jobs themselves are
// migrate's TestLayout.
func TestLayoutCLI(t *testing.T) {
	db := testsvc.StartMariaDB(t)
	e := testsvc.StartEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	live, err := router.DefaultLayout([]router.Datasource{{Name: "ds0", Addr: db.Addr(), User: "root"}}, 8)
	if err != nil {
		t.Fatal(err)
	}
	if err := routecfg.NewStore(cli, "cli").Init(ctx, live); err != nil {
		t.Fatal(err)
	}
	admin := migrate.NewAdmin(cli, "cli")
	dir := t.TempDir()
	write := func(name string, doc router.Document) string {
		b, _ := json.Marshal(doc)
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	grow := live
	grow.Datasources = append(grow.Datasources, router.Datasource{Name: "ds1", Addr: "NEW-10.0.0.9:3306", User: "root"})
	for sh := 5; sh <= 7; sh++ {
		grow = router.MoveShard(grow, sh, "ds1", "im_9", nil)
	}
	placeholder := write("placeholder.json", grow)
	grow.Datasources[1].Addr = db.Addr()
	next := write("next.json", grow)
	moved := live
	moved.Datasources = []router.Datasource{{Name: "ds0", Addr: "10.0.0.1:3306", User: "root"}}
	elsewhere := write("elsewhere.json", moved)

	run := func(f func(*bytes.Buffer) error, want ...string) {
		t.Helper()
		var out bytes.Buffer
		if err := f(&out); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		for _, w := range want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("output lacks %q:\n%s", w, out.String())
			}
		}
	}
	run(func(w *bytes.Buffer) error {
		return layoutPlan(ctx, admin, []string{"--to", next, "--parallel", "2"}, 100, w)
	},
		"new datasource ds1 at "+db.Addr()+": apply adds it",
		"0005-0007    ds0/im_0                  ds1/im_9",
		"3 shards move, 0 rows (0 B); at 100 rows/s per shard, 2 in parallel")
	run(func(w *bytes.Buffer) error { return layoutPlan(ctx, admin, []string{"--to", next, "--each"}, 0, w) },
		"0006   ds0/im_0/_0006            ds1/im_9/_0006                       0         0 B",
		"3 shards move, 0 rows (0 B); at 2000 rows/s per shard, 8 in parallel")
	run(func(w *bytes.Buffer) error {
		return layoutApply(ctx, admin, []string{"--to", next, "RATE", "500", "PARALLEL", "2"}, w)
	},
		"added datasource ds1 at "+db.Addr()+" to the live routes (version 2)",
		"started 3 migration jobs: shards 0005-0007",
		"skipped 1021 shards the live routes already place",
		"each waits at ready for NEXT")
	run(func(w *bytes.Buffer) error { return layoutApply(ctx, admin, []string{"--to", next}, w) },
		"skipped 3 shards whose job already moves them there: 0005-0007")
	if out := routesShow(t, ctx, cli); !strings.Contains(out, `"ds1"`) {
		t.Fatalf("the live routes lack ds1:\n%s", out)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--to", elsewhere}, "datasource ds0 is at " + db.Addr() + " in the live routes and at 10.0.0.1:3306"},
		{[]string{"--to", filepath.Join(dir, "missing.json")}, "cannot read the document file"},
		{[]string{"--to", next, "DATABASE", "im_3"}, "DATABASE: the new document places each shard"},
		{[]string{next}, "wrong arguments"},
	} {
		var out bytes.Buffer
		if err := layoutApply(ctx, admin, c.args, &out); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("apply %q: %v, want an error saying %q", c.args, err, c.want)
		}
	}
	// A fresh cluster, so the placeholder is the only new datasource.
	if err := routecfg.NewStore(cli, "fresh").Init(ctx, live); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := layoutApply(ctx, migrate.NewAdmin(cli, "fresh"), []string{"--to", placeholder}, &out); err == nil ||
		!strings.Contains(err.Error(), "placeholder address NEW-10.0.0.9:3306") {
		t.Errorf("apply of a placeholder address: %v", err)
	}
}

func routesShow(t *testing.T, ctx context.Context, cli *clientv3.Client) string {
	t.Helper()
	var out bytes.Buffer
	if err := routecfg.RunCLI(ctx, []string{"show"}, cli, "cli", &out); err != nil {
		t.Fatal(err)
	}
	return out.String()
}
