package engine

import (
	"fmt"
	"strings"
	"sync"
	"testing"
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
	expectCode(t, err, CodeNotSupported)
	_, err = s.Query("SELECT msg_id FROM conv_msg WHERE conv_id = 1 AND seq = 1 INTO @m")
	expectCode(t, err, CodeNotSupported)
	_, err = s.Query("SELEC 1 INTO @m")
	expectCode(t, err, CodeSyntax)
}
