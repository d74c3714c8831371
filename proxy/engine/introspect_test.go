package engine

import (
	"reflect"
	"testing"

	"github.com/convoy-im/convoy/router"
)

// DESCRIBE, SHOW COLUMNS / CREATE TABLE / INDEX of a logical table run on
// its representative physical table, whatever database they name.
func TestShowShardedUsesRepresentative(t *testing.T) {
	s, rec := newTestSession()
	for _, c := range []struct{ sql, want string }{
		{"DESCRIBE conv_msg", "ds0#1 text: DESC `im_0`.`conv_msg_0000`"},
		{"EXPLAIN im.im_inbox uid", "ds0#2 text: DESC `im_0`.`im_inbox_0000` `uid`"},
		{"SHOW FULL COLUMNS FROM msg_content FROM im LIKE 'c%'", "ds0#3 text: SHOW FULL COLUMNS IN `im_0`.`msg_content_0000` LIKE 'c%'"},
		{"SHOW CREATE TABLE other.conv_msg", "ds0#4 text: SHOW CREATE TABLE `im_0`.`conv_msg_0000`"},
		{"SHOW KEYS FROM im_conv_seq IN im WHERE Key_name = 'PRIMARY'", "ds0#5 text: SHOW INDEX IN `im_0`.`im_conv_seq_0000` WHERE `Key_name`='PRIMARY'"},
	} {
		if _, err := s.Query(c.sql); err != nil {
			t.Fatalf("%s: %v", c.sql, err)
		}
		expectLog(t, rec, c.want)
	}
	// In a transaction pinned to another shard's datasource, a SHOW still
	// answers (metadata reads need no transaction).
	for _, sql := range []string{"BEGIN", "UPDATE conv_msg SET msg_type = 1 WHERE conv_id = 0", "DESC conv_msg"} {
		if _, err := s.Query(sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

func TestRepresentativeShard(t *testing.T) {
	snap := defaultSnapshot()
	if sh := repShard(snap); sh != 0 {
		t.Errorf("representative shard %d, want 0 (on the default datasource)", sh)
	}
	doc := snap.Document()
	doc.DefaultDatasource = "ds1"
	s2, err := router.NewSnapshot(doc)
	if err != nil {
		t.Fatal(err)
	}
	if sh := repShard(s2); sh != 512 {
		t.Errorf("representative shard %d, want 512 (the first on ds1)", sh)
	}
	ls, ds := logicalSchema(s2)
	if ds != "ds1" || ls.RepDB != "im_4" || ls.Tables[0].Physical != "conv_msg_0512" {
		t.Errorf("representative %s %s %v", ds, ls.RepDB, ls.Tables)
	}
	want := []string{"im_0", "im_1", "im_2", "im_3", "im_4", "im_5", "im_6", "im_7", "mysql", "performance_schema", "sys", "_convoy"}
	if !reflect.DeepEqual(ls.Hidden, want) {
		t.Errorf("hidden databases %v, want %v", ls.Hidden, want)
	}
}
