package search

import (
	"context"
	"database/sql"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-im/convoy/binlog"
	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/router"
)

// TestRunnersElection: two processes' runners campaign for one
// datasource's feed of one index; only the elected one feeds it, and when
// it stops the other takes over from the index's checkpoint.
func TestRunnersElection(t *testing.T) {
	f := newFeedFixture(t)
	etcd := testsvc.StartEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints(), DialTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	eng, err := OpenBleve(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	start := func(id string) *Runners {
		return StartRunners(RunnersConfig{Client: cli, Cluster: "t", ID: id, Index: "idx", TTL: time.Second,
			Routes: func() *router.Snapshot { return f.snap }, Engine: eng, Flush: 20 * time.Millisecond,
			Connect: func(context.Context, router.Datasource) (*sql.DB, binlog.Config, error) {
				db, err := sql.Open("mysql", f.m.DSN(""))
				return db, binlog.Config{Addr: f.m.Addr(), User: "root"}, err
			}})
	}
	leader := func() string {
		resp, err := cli.Get(context.Background(), "/convoy/t/search/indexers/idx/ds0/", clientv3.WithFirstCreate()...)
		if err != nil || len(resp.Kvs) == 0 {
			return ""
		}
		return string(resp.Kvs[0].Value)
	}
	a := start("a")
	waitUntil(t, "a elected", func() bool { return leader() == "a" })
	b := start("b")
	defer b.Close()
	r := rand.New(rand.NewPCG(3, 4))
	for range 100 {
		f.send(t, r)
	}
	f.caughtUp(t, eng)
	f.everyQuery(t, eng, 60)
	if l := leader(); l != "a" {
		t.Fatalf("leader %q after b campaigned, want a", l)
	}
	a.Close()
	waitUntil(t, "b elected", func() bool { return leader() == "b" })
	for range 100 {
		f.send(t, r)
		f.change(t, r)
	}
	f.caughtUp(t, eng)
	f.everyQuery(t, eng, 60)
	if !strings.HasPrefix(leader(), "b") {
		t.Fatalf("leader %q", leader())
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
