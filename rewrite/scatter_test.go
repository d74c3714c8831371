package rewrite

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
)

type scatterCase struct {
	Comment  string          `json:"comment"`
	Query    string          `json:"query"`
	Template string          `json:"template,omitempty"`
	Merge    json.RawMessage `json:"merge,omitempty"`
	Error    string          `json:"error,omitempty"`
}

func runScatter(t *testing.T, p *Parser, c scatterCase) scatterCase {
	out := scatterCase{Comment: c.Comment, Query: c.Query}
	a, err := parseOne(t, p, c.Query)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	sc, err := PlanScatter(a)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	tpl, err := NewTemplate(a)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	out.Template = tpl.String()
	// The rewritten statement must still parse.
	if _, err := p.Parse(string(tpl.Render(nil, func(l string) (string, string) { return "im_0", l + "_0000" }))); err != nil {
		t.Errorf("%s: rewritten scatter SQL does not parse: %v", c.Comment, err)
	}
	type view struct {
		*Scatter
		Having []map[string]any `json:",omitempty"`
	}
	v := view{Scatter: sc}
	for _, h := range sc.Having {
		v.Having = append(v.Having, map[string]any{"name": h.Name, "index": h.Index(), "op": h.Op, "value": h.Value})
	}
	b, _ := json.Marshal(v)
	out.Merge = b
	return out
}

// TestScatterGolden: how a SELECT that reads every shard is rewritten for
// the shards and described for the merge (testdata/scatter.json).
func TestScatterGolden(t *testing.T) {
	p := NewParser()
	checkGolden(t, "testdata/scatter.json", func(c scatterCase) scatterCase { return runScatter(t, p, c) },
		func(c scatterCase) string { return c.Comment })
}

// TestBindLimit: LIMIT placeholders of a scatter plan are bound per
// EXECUTE; the shard statement gets exactly the arguments of the
// placeholders it prints, in printed order (the restorer prints
// `LIMIT ? OFFSET ?` as `LIMIT ?,?`, offset first).
func TestBindLimit(t *testing.T) {
	p := NewParser()
	phys := func(l string) (string, string) { return "im_0", l + "_0000" }
	for _, c := range []struct {
		query                 string
		args                  []any
		shardSQL              string
		shardArgs             []any
		wantOffset, wantCount int64
	}{
		{"SELECT seq FROM conv_msg ORDER BY seq LIMIT ?", []any{int64(3)},
			"SELECT `seq` FROM `im_0`.`conv_msg_0000` AS `conv_msg` ORDER BY `seq` LIMIT ?", []any{uint64(3)}, 0, 3},
		{"SELECT conv_id, seq FROM conv_msg WHERE msg_type = ? ORDER BY seq LIMIT ? OFFSET ?", []any{int64(1), int64(4), int64(2)},
			"SELECT `conv_id`,`seq` FROM `im_0`.`conv_msg_0000` AS `conv_msg` WHERE `msg_type`=? ORDER BY `seq` LIMIT ?", []any{int64(1), uint64(6)}, 2, 4},
		{"SELECT seq FROM conv_msg WHERE msg_type = ? ORDER BY seq LIMIT ?, ? FOR UPDATE", []any{"x", int64(5), "7"},
			"SELECT `seq` FROM `im_0`.`conv_msg_0000` AS `conv_msg` WHERE `msg_type`=? ORDER BY `seq` LIMIT ? FOR UPDATE", []any{"x", uint64(12)}, 5, 7},
		{"SELECT seq FROM conv_msg ORDER BY seq LIMIT 5 OFFSET ?", []any{int64(10)},
			"SELECT `seq` FROM `im_0`.`conv_msg_0000` AS `conv_msg` ORDER BY `seq` LIMIT ?", []any{uint64(15)}, 10, 5},
		// A negative count wraps to no limit, as in MariaDB.
		{"SELECT seq FROM conv_msg ORDER BY seq LIMIT ?, ?", []any{int64(1), int64(-1)},
			"SELECT `seq` FROM `im_0`.`conv_msg_0000` AS `conv_msg` ORDER BY `seq` LIMIT ?", []any{uint64(math.MaxUint64)}, 1, math.MaxInt64},
		// Grouped rows: the shards get no LIMIT and none of its arguments.
		{"SELECT conv_id, COUNT(*) FROM conv_msg WHERE msg_type = ? GROUP BY conv_id LIMIT ? OFFSET ?", []any{int64(2), int64(3), int64(1)},
			"SELECT `conv_id`,COUNT(1) AS `COUNT(*)` FROM `im_0`.`conv_msg_0000` AS `conv_msg` WHERE `msg_type`=? GROUP BY `conv_id`", []any{int64(2)}, 1, 3},
		{"SELECT COUNT(DISTINCT sender_uid) FROM conv_msg WHERE msg_type IN (?, ?) LIMIT ?", []any{int64(1), int64(2), int64(1)},
			"SELECT COUNT(DISTINCT `sender_uid`) AS `COUNT(DISTINCT sender_uid)`,`sender_uid` AS `__cvy_d0_0` FROM `im_0`.`conv_msg_0000` AS `conv_msg` WHERE `msg_type` IN (?,?) GROUP BY `sender_uid`",
			[]any{int64(1), int64(2)}, 0, 1},
	} {
		a, err := parseOne(t, p, c.query)
		if err != nil {
			t.Fatal(err)
		}
		sc, err := PlanScatter(a)
		if err != nil {
			t.Fatalf("%s: %v", c.query, err)
		}
		tmpl, err := NewTemplate(a)
		if err != nil {
			t.Fatal(err)
		}
		off, cnt, shardArgs, ok := sc.BindLimit(c.args)
		if !ok {
			t.Fatalf("%s: BindLimit failed", c.query)
		}
		got := string(tmpl.Render(nil, phys))
		bound := tmpl.Bind(shardArgs)
		if got != c.shardSQL || !reflect.DeepEqual(bound, c.shardArgs) || off != c.wantOffset || cnt != c.wantCount {
			t.Errorf("%s %v:\n got %s %v offset %d count %d\nwant %s %v offset %d count %d",
				c.query, c.args, got, bound, off, cnt, c.shardSQL, c.shardArgs, c.wantOffset, c.wantCount)
		}
		if n := strings.Count(got, "?"); n != len(bound) {
			t.Errorf("%s: %d placeholders printed, %d arguments bound", c.query, n, len(bound))
		}
	}
}

// TestLimitValue: bound LIMIT values convert as MariaDB 10.11 converts them
// (each row checked against the server with go-sql-driver, binary protocol:
// no error for any of them).
func TestLimitValue(t *testing.T) {
	const huge = math.MaxUint64
	for _, c := range []struct {
		in   any
		want uint64
	}{
		{nil, 0}, {int64(2), 2}, {uint64(2), 2}, {int8(-1), huge}, {int64(-1), huge}, {int32(7), 7},
		{2.4, 2}, {2.5, 2}, {2.6, 3}, {3.5, 4}, {4.5, 4}, {-0.5, 0}, {-2.5, uint64(1<<64 - 2)}, {float32(2.5), 2}, {1e30, math.MaxInt64},
		{"2", 2}, {[]byte("2"), 2}, {" 2", 2}, {"+3", 3}, {"2.0", 2}, {"2.6", 2}, {"3abc", 3}, {"abc", 0}, {"", 0},
		{"0x10", 0}, {"1e1", 1}, {"-0", 0}, {"-1", huge}, {"18446744073709551615", huge}, {"18446744073709551616", huge},
		{"9223372036854775808", 1 << 63},
	} {
		if got := LimitValue(c.in); got != c.want {
			t.Errorf("LimitValue(%T %v) = %d, want %d", c.in, c.in, got, c.want)
		}
	}
}
