package engine

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/convoy-im/convoy/proxy/sqlerr"
)

// Text statements that differ only in their literals share one plan; each
// keeps its own literals (verbatim) and its own route.
func TestPlanCacheSharesPlansAcrossSessions(t *testing.T) {
	s1, rec := newTestSession()
	s2 := s1.e.NewSession("im")
	for _, c := range []struct {
		s    *Session
		sql  string
		want string
	}{
		{s1, "SELECT seq, msg_id FROM conv_msg WHERE conv_id = 42 AND seq < 100 LIMIT 20",
			"ds0#1 text: SELECT `seq`,`msg_id` FROM `im_1`.`conv_msg_0136` AS `conv_msg` WHERE `conv_id`=42 AND `seq`<100 LIMIT 20"},
		{s2, "SELECT seq, msg_id FROM conv_msg WHERE conv_id = 0 AND seq < 7 LIMIT 5",
			"ds1#2 text: SELECT `seq`,`msg_id` FROM `im_6`.`conv_msg_0801` AS `conv_msg` WHERE `conv_id`=0 AND `seq`<7 LIMIT 5"},
		{s1, "SELECT seq, msg_id FROM conv_msg WHERE conv_id = '42' AND seq < 100 LIMIT 20",
			"ds0#3 text: SELECT `seq`,`msg_id` FROM `im_1`.`conv_msg_0136` AS `conv_msg` WHERE `conv_id`='42' AND `seq`<100 LIMIT 20"},
	} {
		if _, err := c.s.Query(c.sql); err != nil {
			t.Fatal(err)
		}
		expectLog(t, rec, c.want)
	}
	n := 0
	s1.e.plans.m.Range(func(k, v any) bool {
		n++
		if v == nil || v.(*plan) == nil {
			t.Errorf("shape %q not shared", k)
		}
		return true
	})
	if n != 1 {
		t.Errorf("%d cached shapes, want 1 (two statements differing only in values)", n)
	}
	// A literal that is not a plain integer or string takes the full parse
	// and still routes: 0x2A is 42.
	if _, err := s1.Query("SELECT seq, msg_id FROM conv_msg WHERE conv_id = 0x2A AND seq < 100 LIMIT 20"); err != nil {
		t.Fatal(err)
	}
	expectLog(t, rec, "ds0#4 text: SELECT `seq`,`msg_id` FROM `im_1`.`conv_msg_0136` AS `conv_msg` WHERE `conv_id`=0x2A AND `seq`<100 LIMIT 20")
}

// Sessions on several goroutines run the same shapes (go test -race).
func TestPlanCacheConcurrentSessions(t *testing.T) {
	s0, rec := newTestSession()
	rec.quiet = true
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := s0.e.NewSession("im")
			for i := range 200 {
				sql := fmt.Sprintf("SELECT seq, msg_id FROM conv_msg WHERE conv_id = %d AND seq < %d LIMIT 20", g*1000+i, i+1)
				if _, err := s.Query(sql); err != nil && !strings.Contains(err.Error(), "quiet") {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestSelectIntoVariableRefusedClearly(t *testing.T) {
	s, _ := newTestSession()
	_, err := s.Query("SELECT msg_id INTO @m FROM conv_msg WHERE conv_id = 1 AND seq = 1")
	expectCode(t, err, sqlerr.NotSupported)
	_, err = s.Query("SELECT msg_id FROM conv_msg WHERE conv_id = 1 AND seq = 1 INTO @m")
	expectCode(t, err, sqlerr.NotSupported)
	_, err = s.Query("SELEC 1 INTO @m")
	expectCode(t, err, sqlerr.Syntax)
}

// One-row INSERTs share a plan too (a message, an inbox entry), seq
// allocation included; a key Convoy would have to decode, and multi-row
// INSERTs, take the full parse.
func TestPlanCacheSharesOneRowInserts(t *testing.T) {
	s, rec := newTestSession()
	seq := "(SELECT `max_seq` FROM `im_1`.`im_conv_seq_0136` WHERE `conv_id` = 42)"
	for _, msg := range []string{"7", "8"} {
		r, err := s.Query("INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (42, " + msg + ", 1, 1, NOW(3))")
		if err != nil {
			t.Fatal(err)
		}
		if r.InsertId != 1000 || s.lastID != 1000 {
			t.Fatalf("seq %d, session LAST_INSERT_ID %d; want 1000", r.InsertId, s.lastID)
		}
		expectLog(t, rec,
			"ds0#"+map[string]string{"7": "1", "8": "2"}[msg]+" multi: BEGIN",
			"ds0#"+map[string]string{"7": "1", "8": "2"}[msg]+" multi: INSERT INTO `im_1`.`im_conv_seq_0136` (conv_id, max_seq) VALUES (42, LAST_INSERT_ID(1)) ON DUPLICATE KEY UPDATE max_seq = LAST_INSERT_ID(max_seq + 1)",
			"ds0#"+map[string]string{"7": "1", "8": "2"}[msg]+" multi: INSERT INTO `im_1`.`conv_msg_0136` (`conv_id`,`msg_id`,`sender_uid`,`msg_type`,`created_at`,`seq`) VALUES (42,"+msg+",1,1,NOW(3),"+seq+" - 0)",
			"ds0#"+map[string]string{"7": "1", "8": "2"}[msg]+" multi: COMMIT")
	}
	body := `_binary'\0\'\\;` + "\xff''x'"
	if _, err := s.Query("INSERT INTO msg_content (msg_id, conv_id, sender_uid, msg_type, content, created_at) VALUES (7, 42, 1, 1, " + body + ", NOW(3))"); err != nil {
		t.Fatal(err)
	}
	expectLog(t, rec, "ds0#3 text: INSERT INTO `im_1`.`msg_content_0136` (`msg_id`,`conv_id`,`sender_uid`,`msg_type`,`content`,`created_at`) VALUES (7,42,1,1,"+body+",NOW(3))")
	shared := map[string]bool{}
	s.e.plans.m.Range(func(k, v any) bool {
		shared[k.(string)] = v.(*plan) != nil
		return true
	})
	for _, k := range []string{
		"INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, ?, ?, NOW(?))",
		"INSERT INTO msg_content (msg_id, conv_id, sender_uid, msg_type, content, created_at) VALUES (?, ?, ?, ?, ?, NOW(?))",
	} {
		if !shared[k] {
			t.Errorf("not shared: %s (cache: %v)", k, shared)
		}
	}
	// The key as a string with an escape: routed by the full parse ('4\2' is '42').
	if _, err := s.Query(`INSERT INTO msg_content (msg_id, conv_id, sender_uid, msg_type, content, created_at) VALUES (8, '4\2', 1, 1, 'x', NOW(3))`); err != nil {
		t.Fatal(err)
	}
	expectLog(t, rec, "ds0#4 text: INSERT INTO `im_1`.`msg_content_0136` (`msg_id`,`conv_id`,`sender_uid`,`msg_type`,`content`,`created_at`) VALUES (8,'42',1,1,'x',NOW(3))") // the restorer's form, not the client's token
	// Two rows: never shared (they may split over shards).
	if _, err := s.Query("INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (0, 1, 1, 1, NOW()), (42, 1, 2, 2, NOW())"); err != nil {
		t.Fatal(err)
	}
	rec.take()
	s.e.plans.m.Range(func(k, v any) bool {
		if strings.HasPrefix(k.(string), "INSERT INTO im_inbox") && v.(*plan) != nil {
			t.Errorf("a two-row INSERT was shared: %s", k)
		}
		return true
	})
}
