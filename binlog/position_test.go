package binlog

import (
	"strings"
	"testing"
)

func TestParsePosition(t *testing.T) {
	for _, c := range []struct{ in, want, err string }{
		{in: "", want: ""},
		{in: "  ", want: ""},
		{in: "0-1-42", want: "0-1-42"},
		{in: "1-2-7, 0-1-42", want: "0-1-42,1-2-7"},
		{in: "10-1-1,2-1-1", want: "2-1-1,10-1-1"}, // numeric, not string, order
		{in: "0-18446744073709551615-1", err: "not domain-server-seq"},
		{in: "0-1-18446744073709551615", want: "0-1-18446744073709551615"},
		{in: "0-1", err: "not domain-server-seq"},
		{in: "0-1-x", err: "not domain-server-seq"},
		{in: "0-1-2,0-3-4", err: "domain 0 twice"},
		{in: "0-1-2,", err: "not domain-server-seq"},
	} {
		got, err := ParsePosition(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParsePosition(%q) = %q, %v; want error with %q", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || string(got) != c.want {
			t.Errorf("ParsePosition(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

func TestPositionAdvanceAndReached(t *testing.T) {
	p, err := parsePos("1-2-7")
	if err != nil {
		t.Fatal(err)
	}
	p = p.with(gtid{domain: 0, server: 1, seq: 5})
	p = p.with(gtid{domain: 1, server: 3, seq: 8}) // another server of domain 1 (a failover)
	if got := p.Position(); got != "0-1-5,1-3-8" {
		t.Fatalf("advanced position = %q", got)
	}
	for _, c := range []struct {
		have, target Position
		want         bool
	}{
		{"0-1-5", "0-1-5", true},
		{"0-1-6", "0-1-5", true},
		{"0-1-4", "0-1-5", false},
		{"0-2-9", "0-1-5", true}, // sequence numbers count per domain, whatever the server
		{"0-1-5", "", true},
		{"", "0-1-5", false},
		{"0-1-5", "0-1-5,1-1-1", false}, // a domain not seen yet
		{"0-1-5,1-1-1", "0-1-5", true},
	} {
		got, err := c.have.Reached(c.target)
		if err != nil || got != c.want {
			t.Errorf("%q.Reached(%q) = %v, %v; want %v", c.have, c.target, got, err, c.want)
		}
	}
	if _, err := Position("x").Reached(""); err == nil {
		t.Error("Reached accepted a malformed position")
	}
}

func TestSplitWord(t *testing.T) {
	for _, c := range []struct{ in, word, rest string }{
		{"COMMIT", "COMMIT", ""},
		{"  XA COMMIT X'31'", "XA", "COMMIT X'31'"},
		{"/* a */ /*b*/ALTER TABLE t ADD c INT", "ALTER", "TABLE t ADD c INT"},
		{"insert(a) values (1)", "insert", "(a) values (1)"},
		{"/* unterminated", "", ""},
		{"-- a comment\n# another\n  update t set a = 1", "update", "t set a = 1"},
		{"--\nDELETE FROM t", "DELETE", "FROM t"},
		{"-- only a comment", "", ""},
	} {
		w, r := splitWord(c.in)
		if w != c.word || r != c.rest {
			t.Errorf("splitWord(%q) = %q, %q; want %q, %q", c.in, w, r, c.word, c.rest)
		}
	}
}

// Binlog files order by their sequence number, not as text, then offsets;
// two base names are two logs.
func TestFileOffsetCompare(t *testing.T) {
	for _, c := range []struct {
		p, q FileOffset
		want int
	}{
		{FileOffset{"binlog.000009", 900}, FileOffset{"binlog.000010", 4}, -1},
		{FileOffset{"binlog.999999", 900}, FileOffset{"binlog.1000000", 4}, -1},
		{FileOffset{"binlog.000010", 900}, FileOffset{"binlog.000010", 900}, 0},
		{FileOffset{"binlog.000010", 901}, FileOffset{"binlog.000010", 900}, 1},
		{FileOffset{"a.b.000002", 4}, FileOffset{"a.b.000001", 900}, 1},
	} {
		got, err := c.p.compare(c.q)
		if err != nil || got != c.want {
			t.Errorf("%s vs %s: %d, %v; want %d", c.p, c.q, got, err, c.want)
		}
	}
	for _, c := range [][2]FileOffset{
		{{"binlog.000001", 4}, {"other.000001", 4}},
		{{"binlog", 4}, {"binlog.000001", 4}},
		{{"binlog.x", 4}, {"binlog.000001", 4}},
	} {
		if _, err := c[0].compare(c[1]); err == nil {
			t.Errorf("%s vs %s compared", c[0], c[1])
		}
	}
}
