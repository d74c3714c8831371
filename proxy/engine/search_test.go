package engine

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/convoy-im/convoy/proxy/sqlerr"
)

// fakeIndex records the index queries and answers with fixed hits.
type fakeIndex struct {
	queries []SearchQuery
	hits    []SearchHit
	unready []string
}

func (f *fakeIndex) Unready(context.Context) ([]string, error) { return f.unready, nil }

func (f *fakeIndex) Status(context.Context) ([]string, [][]any, error) {
	return []string{"datasource", "ready"}, [][]any{{"ds0", "yes"}}, nil
}

func (f *fakeIndex) Search(_ context.Context, q SearchQuery) ([]SearchHit, error) {
	f.queries = append(f.queries, q)
	var out []SearchHit
	for _, h := range f.hits {
		if slices.Contains(q.Convs, h.ConvID) {
			out = append(out, h)
		}
	}
	return out, nil
}

func (f *fakeIndex) Counts(ctx context.Context, q SearchQuery) (map[uint64]int64, error) {
	hits, _ := f.Search(ctx, q)
	out := map[uint64]int64{}
	for _, h := range hits {
		out[h.ConvID]++
	}
	return out, nil
}

func (f *fakeIndex) Matcher(text string) (func(uint8, []byte) bool, error) {
	if strings.Trim(text, " ,.") == "" {
		return nil, nil
	}
	return func(_ uint8, body []byte) bool { return strings.Contains(string(body), text) }, nil
}

func TestSearchQuery(t *testing.T) {
	s, rec := newTestSession()
	const q = "SELECT msg_id, conv_id, seq, created_at FROM msg_search WHERE uid = 7 AND MATCH(text) AGAINST ('你好') LIMIT 20"
	_, err := s.Query(q)
	expectCode(t, err, sqlerr.NotSupported) // search not enabled
	idx := &fakeIndex{hits: []SearchHit{
		{MsgID: 5, ConvID: 42, Seq: 3, CreatedMs: 1_700_000_000_123},
		{MsgID: 9, ConvID: 43, Seq: 1, CreatedMs: 1_700_000_001_000},
		{MsgID: 7, ConvID: 99, Seq: 1, CreatedMs: 1_700_000_002_000}, // not a member's
	}}
	s.e.SetSearch(idx, SearchOptions{FreshWindow: time.Minute})
	r, err := s.Query(q)
	if err != nil {
		t.Fatal(err)
	}
	// The members are read on uid 7's shard (642: im_5 on ds1), the
	// fresh window on the members' shards (42 -> 136, 43 -> 30).
	log := rec.take()
	if len(log) != 3 || log[0] != "ds1#1 text: SELECT conv_id FROM `im_5`.`im_conv_member_0642` WHERE uid = 7" {
		t.Fatalf("backend log %q", log)
	}
	for _, l := range log[1:] {
		if !strings.Contains(l, "WHERE c.conv_id IN (4") || !strings.Contains(l, "c.created_at >= '") {
			t.Fatalf("fresh-window read %q", l)
		}
	}
	if len(idx.queries) != 1 || !slices.Equal(idx.queries[0].Convs, []uint64{42, 43}) || !idx.queries[0].HasBefore || idx.queries[0].Limit != 20 {
		t.Fatalf("index query %+v", idx.queries)
	}
	if err := decodeRows(r); err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := range r.Values {
		a, _ := r.GetString(i, 0)
		b, _ := r.GetString(i, 3)
		got = append(got, a+"@"+b)
	}
	if want := []string{"9@2023-11-14 22:13:21.000", "5@2023-11-14 22:13:20.123"}; !slices.Equal(got, want) {
		t.Fatalf("rows %q, want %q (newest first, members only)", got, want)
	}

	// One conversation: membership is checked; a non-member gets nothing.
	idx.queries = nil
	if r, err = s.Query("SELECT msg_id FROM msg_search WHERE uid = 7 AND conv_id = 99 AND MATCH(text) AGAINST ('x') LIMIT 5"); err != nil || len(r.RowDatas) != 0 || len(idx.queries) != 0 {
		t.Fatalf("non-member conversation: %v rows, %v, index asked %d times", r.RowDatas, err, len(idx.queries))
	}
	if log := rec.take(); len(log) != 1 || !strings.HasSuffix(log[0], "WHERE uid = 7 AND conv_id = 99") {
		t.Fatalf("backend log %q", log)
	}
	if r, err = s.Query("SELECT msg_id FROM msg_search WHERE uid = 7 AND conv_id = 42 AND MATCH(text) AGAINST ('x') LIMIT 5"); err != nil || len(r.RowDatas) != 1 {
		t.Fatalf("member conversation: %v, %v", r, err)
	}
	rec.take()
	if n := s.WarningCount(); n != 0 {
		t.Fatalf("a search of a built index: %d warnings", n)
	}
	// An index still being built for a datasource: the answer says so.
	idx.unready = []string{"ds1"}
	if _, err = s.Query("SELECT msg_id FROM msg_search WHERE uid = 7 AND conv_id = 42 AND MATCH(text) AGAINST ('x') LIMIT 5"); err != nil {
		t.Fatal(err)
	}
	rec.take()
	if n := s.WarningCount(); n != 1 || s.diag.cur[0].Code != ColdWarningCode || !strings.Contains(s.diag.cur[0].Message, "still being built for datasource ds1") {
		t.Fatalf("a search of an index being built: %d warnings %+v", n, s.diag.cur)
	}
	idx.unready = nil

	// Nothing to match: no rows, nothing read.
	if r, err = s.Query("SELECT msg_id FROM msg_search WHERE uid = 7 AND MATCH(text) AGAINST (' , ') LIMIT 5"); err != nil || len(r.RowDatas) != 0 {
		t.Fatalf("empty query: %v, %v", r, err)
	}
	expectLog(t, rec)

	for _, bad := range []string{
		"SELECT msg_id FROM msg_search WHERE MATCH(text) AGAINST ('x') LIMIT 5",
		"SELECT msg_id FROM msg_search WHERE uid = 7 AND MATCH(text) AGAINST ('x') LIMIT 5000",
		"SELECT msg_id FROM msg_search WHERE uid = 7 AND MATCH(text) AGAINST (5) LIMIT 5",
		"SELECT msg_id FROM msg_search WHERE uid = 7 AND MATCH(text) AGAINST ('x') AND created_at >= 'yesterday' LIMIT 5",
		"UPDATE msg_search SET seq = 1 WHERE uid = 7",
	} {
		_, err := s.Query(bad)
		expectCode(t, err, sqlerr.NotSupported)
	}
	_, err = s.Query("SELECT msg_id FROM msg_search WHERE uid = -1 AND MATCH(text) AGAINST ('x') LIMIT 5")
	expectCode(t, err, sqlerr.BadShardKey)
	expectLog(t, rec)
}

// TestSearchPrepared: PREPARE answers with the exact parameter and column
// counts and Convoy's own column definitions; EXECUTE binds every value.
func TestSearchPrepared(t *testing.T) {
	s, rec := newTestSession()
	idx := &fakeIndex{hits: []SearchHit{{MsgID: 5, ConvID: 42, Seq: 3, MsgType: 1, CreatedMs: 1_700_000_000_123}}}
	s.e.SetSearch(idx, SearchOptions{})
	p, err := s.Prepare("SELECT msg_id, conv_id, seq, created_at FROM msg_search WHERE uid = ? AND MATCH(text) AGAINST (?) AND conv_id = ? " +
		"AND msg_type = ? AND created_at >= ? ORDER BY created_at DESC LIMIT ?")
	if err != nil {
		t.Fatal(err)
	}
	expectLog(t, rec) // nothing asked of a backend
	if p.Params != 6 || p.Columns != 4 || string(p.Fields[3].Name) != "created_at" || p.Fields[3].Decimal != 3 {
		t.Fatalf("params %d columns %d fields %v", p.Params, p.Columns, p.Fields)
	}
	r, err := s.Execute(p, []any{int64(7), []byte("你好"), int64(42), int64(1), []byte("2023-01-01 00:00:00"), int64(10)})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.RowDatas) != 1 || r.RowDatas[0][0] != 0 {
		t.Fatalf("binary rows %x", r.RowDatas)
	}
	q := idx.queries[0]
	if q.Text != "你好" || !slices.Equal(q.Convs, []uint64{42}) || !q.HasMsgType || q.MsgType != 1 || !q.HasSince || q.Limit != 10 {
		t.Fatalf("index query %+v", q)
	}
}
