package search

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/convoy-im/convoy/internal/testsvc"
)

func TestSphinxExactness(t *testing.T) {
	sph := testsvc.StartSphinx(t, 2)
	eng, err := OpenSphinx(SphinxConfig{Partitions: sph.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	t0 := time.Now()
	c := buildCorpus(t, eng, *corpusSize, 1)
	t.Logf("indexed %d messages in %s", *corpusSize, time.Since(t0).Round(time.Millisecond))
	checkExactness(t, eng, c, 400, 2)
}

// A one-conversation search reads one partition's RT index; a search over
// conversations of both partitions reads the distributed index.
func TestSphinxPartitions(t *testing.T) {
	sph := testsvc.StartSphinx(t, 2)
	eng, err := OpenSphinx(SphinxConfig{Partitions: sph.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	ctx := context.Background()
	// Conversations 1 and 42 are on shards 951 and 136: partitions 1 and 0.
	var a, b uint64 = 1, 42
	if eng.partition(a) != 1 || eng.partition(b) != 0 {
		t.Fatalf("partitions %d %d", eng.partition(a), eng.partition(b))
	}
	docs := []Doc{
		{Hit: Hit{MsgID: 10, ConvID: a, Seq: 1, MsgType: 1, CreatedMs: 1000}, Text: "周末一起吃饭"},
		{Hit: Hit{MsgID: 11, ConvID: b, Seq: 1, MsgType: 1, CreatedMs: 2000}, Text: "吃饭了吗"},
	}
	if err := eng.Apply(ctx, "ds0", Batch{Upserts: docs}, "0-1-5"); err != nil {
		t.Fatal(err)
	}
	one, err := eng.Search(ctx, Query{Text: "吃饭", Convs: []uint64{a}, Limit: 20})
	if err != nil || len(one) != 1 || one[0].MsgID != 10 {
		t.Fatalf("one conversation: %v %v", one, err)
	}
	if log := sph.QueryLog(0); strings.Contains(log, "b00540300996d") {
		t.Fatalf("partition 0 saw the one-conversation search of partition 1:\n%s", log)
	}
	both, err := eng.Search(ctx, Query{Text: "吃饭", Convs: []uint64{a, b}, Limit: 20})
	if err != nil || len(both) != 2 || both[0].MsgID != 11 || both[1].MsgID != 10 {
		t.Fatalf("both partitions: %v %v", both, err)
	}
	if !strings.Contains(sph.QueryLog(0), "convoy_msgs_dist") {
		t.Fatalf("the two-partition search did not use the distributed index:\n%s", sph.QueryLog(0))
	}
	if cp, err := eng.Checkpoint(ctx, "ds0"); err != nil || cp != "0-1-5" {
		t.Fatalf("checkpoint %q %v", cp, err)
	}
	if cp, err := eng.Checkpoint(ctx, "ds1"); err != nil || cp != "" {
		t.Fatalf("checkpoint of an unknown source %q %v", cp, err)
	}
}

// A deleted message leaves the Sphinx index's text, not only its results:
// a query of the index itself, without the deleted filter, no longer
// matches its words (before, only an attribute flag changed).
func TestSphinxDeleteDropsText(t *testing.T) {
	sph := testsvc.StartSphinx(t, 1)
	eng, err := OpenSphinx(SphinxConfig{Partitions: sph.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	ctx := context.Background()
	docs := []Doc{
		{Hit: Hit{MsgID: 21, ConvID: 42, Seq: 1, MsgType: 1, CreatedMs: 1000}, Text: "撤回的秘密 passphrase"},
		{Hit: Hit{MsgID: 22, ConvID: 42, Seq: 2, MsgType: 1, CreatedMs: 2000}, Text: "留下的秘密"},
	}
	if err := eng.Apply(ctx, "", Batch{Upserts: docs}, ""); err != nil {
		t.Fatal(err)
	}
	raw := func(word string) []uint64 {
		t.Helper()
		p, err := ParseQuery(word)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := eng.dbs[0].QueryContext(ctx, "SELECT mid FROM "+eng.cfg.Index+" WHERE MATCH('"+sphinxMatch(p)+"') ORDER BY mid ASC")
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		var ids []uint64
		for rs.Next() {
			var id uint64
			if err := rs.Scan(&id); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		return ids
	}
	if got := raw("秘密"); len(got) != 2 {
		t.Fatalf("before the delete the index matches %v, want both", got)
	}
	if err := eng.Apply(ctx, "", Batch{Deletes: []Ref{{MsgID: 21, ConvID: 42}}}, ""); err != nil {
		t.Fatal(err)
	}
	if got := raw("秘密"); len(got) != 1 || got[0] != 22 {
		t.Errorf("after deleting message 21 the index itself matches %v, want only 22", got)
	}
	if got := raw("passphrase"); len(got) != 0 {
		t.Errorf("the deleted message's word still matches %v in the index", got)
	}
	hits, err := eng.Search(ctx, Query{Text: "秘密", Convs: []uint64{42}, Limit: 20})
	if err != nil || len(hits) != 1 || hits[0].MsgID != 22 {
		t.Errorf("search after the delete: %v %v", hits, err)
	}
}
