package router

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

var twoDS = []Datasource{{Name: "ds0", Addr: "127.0.0.1:1"}, {Name: "ds1", Addr: "127.0.0.1:2"}}

func TestDefaultLayout(t *testing.T) {
	doc, err := DefaultLayout(twoDS, 8)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSnapshot(doc)
	if err != nil {
		t.Fatal(err)
	}
	if p := s.Physical("conv_msg", 441); p != (Physical{"ds0", "im_3", "conv_msg_0441"}) {
		t.Errorf("shard 441 -> %v", p)
	}
	if p := s.Physical("im_inbox", 0); p != (Physical{"ds0", "im_0", "im_inbox_0000"}) {
		t.Errorf("shard 0 -> %v", p)
	}
	if p := s.Physical("conv_msg", 1023); p != (Physical{"ds1", "im_7", "conv_msg_1023"}) {
		t.Errorf("shard 1023 -> %v", p)
	}
	if n := len(s.AllPhysical("conv_msg")); n != NumShards {
		t.Errorf("default layout has %d physical tables, want %d", n, NumShards)
	}
	if n := len(s.Databases()); n != 8 {
		t.Errorf("default layout has %d databases, want 8", n)
	}
}

func TestSharedLayout(t *testing.T) {
	doc, err := SharedLayout(twoDS, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSnapshot(doc)
	if err != nil {
		t.Fatal(err)
	}
	groups := s.AllPhysical("conv_msg")
	if len(groups) != 8 {
		t.Fatalf("got %d physical tables, want 8", len(groups))
	}
	total := 0
	for _, g := range groups {
		total += len(g.Shards)
		for _, sh := range g.Shards {
			if s.Physical("conv_msg", sh) != g.Physical {
				t.Fatalf("shard %d listed under %v but routes to %v", sh, g.Physical, s.Physical("conv_msg", sh))
			}
		}
	}
	if total != NumShards {
		t.Errorf("groups cover %d shards, want %d", total, NumShards)
	}
	if p := s.Physical("conv_msg", 600); p != (Physical{"ds1", "im_1", "conv_msg_0512"}) {
		t.Errorf("shard 600 -> %v", p)
	}
}

func TestSnapshotRejectsBadDocuments(t *testing.T) {
	good, _ := DefaultLayout(twoDS, 8)
	mutate := map[string]func(d *Document){
		"missing shard":      func(d *Document) { d.Shards[0].From = 1 },
		"unknown datasource": func(d *Document) { d.Shards[3].Datasource = "ds9" },
		"overlap":            func(d *Document) { d.Shards[1].From = d.Shards[0].To },
		"no default":         func(d *Document) { d.DefaultDatasource = "nope" },
		"duplicate ds":       func(d *Document) { d.Datasources = append(d.Datasources, d.Datasources[0]) },
		"bad database":       func(d *Document) { d.Shards[2].Database = "im`x" },
		"out of range":       func(d *Document) { d.Shards[7].To = NumShards },
	}
	for name, m := range mutate {
		d := cloneDocument(good)
		m(&d)
		if _, err := NewSnapshot(d); !errors.Is(err, ErrInvalidRoutes) {
			t.Errorf("%s: err = %v, want ErrInvalidRoutes", name, err)
		}
	}
	if _, err := NewSnapshot(good); err != nil {
		t.Fatalf("good document rejected: %v", err)
	}
}

func BenchmarkShardOf(b *testing.B) {
	var s Shard
	for i := 0; i < b.N; i++ {
		s ^= ShardOf(uint64(i) * 2654435761)
	}
	_ = s
}

// MoveShard cuts the shard's range around it and a move back restores the
// document's ranges exactly, for per-shard tables and for shared ones.
func TestMoveShard(t *testing.T) {
	dss := []Datasource{{Name: "ds0", Addr: "a:1"}, {Name: "ds1", Addr: "b:1"}, {Name: "ds2", Addr: "c:1"}}
	own, err := DefaultLayout(dss[:2], 8)
	if err != nil {
		t.Fatal(err)
	}
	shared, err := SharedLayout(dss[:2], 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	own.Datasources, shared.Datasources = dss, dss
	zero := 0
	for _, c := range []struct {
		name  string
		doc   Document
		shard int
		table *int
		want  Target
		cut   int // ranges after the move
	}{
		{"own tables, middle of a range", own, 441, nil, Target{Datasource: "ds2", Database: "im_9", Table: 441}, 10},
		{"own tables, first of a range", own, 384, nil, Target{Datasource: "ds2", Database: "im_9", Table: 384}, 9},
		{"own tables, last shard", own, 1023, nil, Target{Datasource: "ds2", Database: "im_9", Table: 1023}, 9},
		{"shared table", shared, 5, &zero, Target{Datasource: "ds2", Database: "im_9", Table: 0}, 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			orig, err := NewSnapshot(c.doc)
			if err != nil {
				t.Fatal(err)
			}
			moved := MoveShard(c.doc, c.shard, "ds2", "im_9", c.table)
			snap, err := NewSnapshot(moved)
			if err != nil {
				t.Fatalf("moved document invalid: %v", err)
			}
			for sh := 0; sh < NumShards; sh++ {
				want := orig.Target(Shard(sh))
				if sh == c.shard {
					want = c.want
				}
				if got := snap.Target(Shard(sh)); got != want {
					t.Fatalf("shard %d: %+v, want %+v", sh, got, want)
				}
			}
			if len(moved.Shards) != c.cut {
				t.Errorf("%d ranges after the move, want %d: %+v", len(moved.Shards), c.cut, moved.Shards)
			}
			from := orig.Target(Shard(c.shard))
			back := MoveShard(moved, c.shard, from.Datasource, from.Database, c.table)
			if !reflect.DeepEqual(back.Shards, c.doc.Shards) {
				t.Fatalf("moved back: %+v\nwant %+v", back.Shards, c.doc.Shards)
			}
		})
	}
}

func TestDatasourceTLSDefaultsAndValidation(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:3306": TLSPreferred, "127.9.9.9:3306": TLSPreferred, "localhost:3306": TLSPreferred,
		"[::1]:3306": TLSPreferred, "10.0.0.1:3306": TLSRequired, "db.internal:3306": TLSRequired,
	} {
		if got := (Datasource{Addr: addr}).EffectiveMode(); got != want {
			t.Errorf("EffectiveMode(%s) = %s, want %s", addr, got, want)
		}
	}
	if got := (Datasource{Addr: "10.0.0.1:3306", TLS: DatasourceTLS{Mode: TLSDisabled}}).EffectiveMode(); got != TLSDisabled {
		t.Errorf("an explicit mode must win, got %s", got)
	}
	for _, tc := range []struct {
		tls  DatasourceTLS
		want string
	}{
		{DatasourceTLS{Mode: "on"}, "not one of"},
		{DatasourceTLS{Mode: TLSVerifyCA, KeyFile: "/k.pem"}, "both cert_file and key_file"},
		{DatasourceTLS{Mode: TLSDisabled, CAFile: "/ca.pem"}, "say which you mean"},
		{DatasourceTLS{Mode: TLSVerifyCA, CAFile: "-----BEGIN CERTIFICATE-----\nMIIB"}, "never certificates or keys"},
	} {
		doc := Document{DefaultDatasource: "ds0", Datasources: []Datasource{{Name: "ds0", Addr: "10.0.0.1:3306", TLS: tc.tls}},
			Shards: []ShardRange{{From: 0, To: NumShards - 1, Datasource: "ds0", Database: "im"}}}
		if _, err := NewSnapshot(doc); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.tls, err, tc.want)
		}
	}
}
