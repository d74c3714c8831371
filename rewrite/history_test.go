package rewrite

import (
	"fmt"
	"testing"
)

func TestHistoryShape(t *testing.T) {
	p := NewParser()
	cases := []struct {
		q    string
		want string // "" = not a history read
	}{
		{"SELECT seq, msg_id, sender_uid, msg_type, created_at FROM conv_msg WHERE conv_id = ? AND seq < ? ORDER BY seq DESC LIMIT 20",
			"dir=1 cols=[seq msg_id sender_uid msg_type created_at] conv={0 <nil>} cursor={1 <nil>} limit={-1 20}"},
		{"SELECT seq, msg_id FROM conv_msg WHERE seq > 10 AND conv_id = 42 ORDER BY seq ASC LIMIT ?",
			"dir=2 cols=[seq msg_id] conv={-1 42} cursor={-1 10} limit={0 <nil>}"},
		{"SELECT m.seq FROM conv_msg m WHERE m.conv_id = 7 AND 5 > m.seq ORDER BY m.seq DESC LIMIT 3",
			"dir=1 cols=[seq] conv={-1 7} cursor={-1 5} limit={-1 3}"},
		{"SELECT seq, msg_id, created_at FROM conv_msg WHERE conv_id = ? AND msg_id = ?",
			"dir=3 cols=[seq msg_id created_at] conv={0 <nil>} cursor={1 <nil>} limit={0 <nil>}"},
		{"SELECT seq FROM conv_msg WHERE conv_id = 1 AND seq < 5 ORDER BY seq ASC LIMIT 3", ""},   // wrong direction
		{"SELECT seq FROM conv_msg WHERE conv_id = 1 AND seq <= 5 ORDER BY seq DESC LIMIT 3", ""}, // <= is not the shape
		{"SELECT seq FROM conv_msg WHERE conv_id = 1 AND seq < 5 ORDER BY seq DESC", ""},          // no LIMIT
		{"SELECT seq FROM conv_msg WHERE conv_id = 1 AND seq < 5 ORDER BY seq DESC LIMIT 1, 3", ""},
		{"SELECT seq FROM conv_msg WHERE conv_id = 1 AND seq < 5 AND msg_type = 1 ORDER BY seq DESC LIMIT 3", ""},
		{"SELECT * FROM conv_msg WHERE conv_id = 1 AND seq < 5 ORDER BY seq DESC LIMIT 3", ""},
		{"SELECT seq AS s FROM conv_msg WHERE conv_id = 1 AND seq < 5 ORDER BY seq DESC LIMIT 3", ""},
		{"SELECT COUNT(*) FROM conv_msg WHERE conv_id = 1 AND seq < 5 ORDER BY seq DESC LIMIT 3", ""},
		{"SELECT seq FROM conv_msg WHERE conv_id IN (1, 2) AND seq < 5 ORDER BY seq DESC LIMIT 3", ""},
		{"SELECT seq FROM conv_msg WHERE conv_id = 1 AND seq < 5 ORDER BY seq DESC LIMIT 3 FOR UPDATE", ""},
		{"SELECT seq FROM msg_content WHERE conv_id = 1 AND seq < 5 ORDER BY seq DESC LIMIT 3", ""},
		{"SELECT content FROM conv_msg WHERE conv_id = 1 AND seq < 5 ORDER BY seq DESC LIMIT 3", ""},
	}
	for _, c := range cases {
		a, err := parseOne(t, p, c.q)
		if err != nil {
			t.Fatalf("%s: %v", c.q, err)
		}
		h, ok := HistoryShape(a)
		got := ""
		if ok {
			got = fmt.Sprintf("dir=%d cols=%v conv=%v cursor=%v limit=%v", h.Dir, h.Columns, h.ConvID, h.Cursor, h.Limit)
		}
		if got != c.want {
			t.Errorf("%s\n got: %s\nwant: %s", c.q, got, c.want)
		}
	}
}

// TestArchiveShape: the reads the cold tier continues, any plain columns
// or * of the table; the hot tier's shape is the strict subset of plain
// history columns.
func TestArchiveShape(t *testing.T) {
	cases := []shapeCase{ // want "": not a cold-tier read
		{"SELECT * FROM conv_msg WHERE conv_id = ? AND seq < ? ORDER BY seq DESC LIMIT 20", "conv_msg dir=1 conv={0 <nil>} cursor={1 <nil>} limit={-1 20} ids=[]"},
		{"SELECT m.*, seq AS s FROM conv_msg m WHERE 7 = m.conv_id AND m.seq > 5 ORDER BY m.seq LIMIT ?", "conv_msg dir=2 conv={-1 7} cursor={-1 5} limit={0 <nil>} ids=[]"},
		{"SELECT seq, msg_id, created_at FROM conv_msg WHERE msg_id = 9 AND conv_id = 8", "conv_msg dir=3 conv={-1 8} cursor={-1 9} limit={0 <nil>} ids=[]"},
		{"SELECT msg_id, content FROM msg_content WHERE conv_id = ? AND msg_id IN (?, ?, 3)", "msg_content dir=0 conv={0 <nil>} cursor={0 <nil>} limit={0 <nil>} ids=[{1 <nil>} {2 <nil>} {-1 3}]"},
		{"SELECT * FROM msg_content WHERE msg_id = 4 AND conv_id = 1", "msg_content dir=0 conv={-1 1} cursor={0 <nil>} limit={0 <nil>} ids=[{-1 4}]"},
		{"SELECT * FROM msg_content WHERE conv_id = 1 AND msg_id IN (1, 2) ORDER BY msg_id", ""},
		{"SELECT * FROM msg_content WHERE conv_id = 1 AND msg_id NOT IN (1, 2)", ""},
		{"SELECT * FROM msg_content WHERE conv_id = 1 AND seq < 5 ORDER BY seq DESC LIMIT 3", ""},
		{"SELECT * FROM msg_content WHERE conv_id = 1", ""},
		{"SELECT * FROM conv_msg WHERE conv_id = 1 AND msg_id IN (1, 2)", ""},
		{"SELECT seq + 1 FROM conv_msg WHERE conv_id = 1 AND seq < 5 ORDER BY seq DESC LIMIT 3", ""},
		{"SELECT * FROM conv_msg WHERE conv_id = 1 AND seq < 5 ORDER BY seq ASC LIMIT 3", ""},
		{"SELECT * FROM conv_msg c JOIN msg_content m ON m.msg_id = c.msg_id WHERE c.conv_id = 1 AND c.seq < 5 ORDER BY c.seq DESC LIMIT 3", ""},
	}
	checkShapes(t, cases, func(a *Analysis) string {
		r, ok := ArchiveShape(a)
		if !ok {
			return ""
		}
		return fmt.Sprintf("%s dir=%d conv=%v cursor=%v limit=%v ids=%v", r.Table, r.Dir, r.ConvID, r.Cursor, r.Limit, r.MsgIDs)
	})
}

type shapeCase struct {
	q    string
	want string
}

// checkShapes parses each case and compares what show prints of it.
func checkShapes(t *testing.T, cases []shapeCase, show func(*Analysis) string) {
	t.Helper()
	p := NewParser()
	for _, c := range cases {
		a, err := parseOne(t, p, c.q)
		if err != nil {
			t.Fatalf("%s: %v", c.q, err)
		}
		if got := show(a); got != c.want {
			t.Errorf("%s\n got: %s\nwant: %s", c.q, got, c.want)
		}
	}
}

// TestArchiveWriteShape: UPDATE / DELETE of the two archived tables, keyed
// when the WHERE names rows by seq or msg_id and nothing else.
func TestArchiveWriteShape(t *testing.T) {
	cases := []shapeCase{ // want "": not a write of an archived table
		{"DELETE FROM conv_msg WHERE conv_id = ? AND seq = ?", "conv_msg delete=true convs=[{0 <nil>}] keyed=true seqs=[{1 <nil>}] ids=[]"},
		{"DELETE FROM conv_msg WHERE msg_id IN (1, ?) AND conv_id = 5", "conv_msg delete=true convs=[{-1 5}] keyed=true seqs=[] ids=[{-1 1} {0 <nil>}]"},
		{"UPDATE msg_content SET content = '' WHERE conv_id = 3 AND msg_id = 4", "msg_content delete=false convs=[{-1 3}] keyed=true seqs=[] ids=[{-1 4}]"},
		{"UPDATE conv_msg SET msg_type = 2 WHERE conv_id = 3 AND seq IN (4, 5)", "conv_msg delete=false convs=[{-1 3}] keyed=true seqs=[{-1 4} {-1 5}] ids=[]"},
		{"DELETE FROM conv_msg WHERE conv_id = 3", "conv_msg delete=true convs=[{-1 3}] keyed=false seqs=[] ids=[]"},
		{"DELETE FROM conv_msg WHERE conv_id = 3 AND seq < 100", "conv_msg delete=true convs=[{-1 3}] keyed=false seqs=[] ids=[]"},
		{"DELETE FROM conv_msg WHERE conv_id IN (3, 4) AND seq = 1", "conv_msg delete=true convs=[{-1 3} {-1 4}] keyed=false seqs=[] ids=[]"},
		{"DELETE FROM msg_content WHERE conv_id = 3 AND seq = 1", "msg_content delete=true convs=[{-1 3}] keyed=false seqs=[] ids=[]"},
		{"UPDATE conv_msg SET msg_type = 1 WHERE conv_id = 3 AND seq = 1 LIMIT 1", "conv_msg delete=false convs=[{-1 3}] keyed=false seqs=[] ids=[]"},
		{"UPDATE conv_msg SET msg_type = 1 WHERE conv_id = 3 AND seq = 1 AND msg_type = 2", "conv_msg delete=false convs=[{-1 3}] keyed=false seqs=[] ids=[]"},
		{"DELETE FROM im_inbox WHERE uid = 1", ""},
		{"SELECT * FROM conv_msg WHERE conv_id = 1", ""},
	}
	checkShapes(t, cases, func(a *Analysis) string {
		w, ok := ArchiveWriteShape(a)
		if !ok {
			return ""
		}
		return fmt.Sprintf("%s delete=%v convs=%v keyed=%v seqs=%v ids=%v", w.Table, w.Delete, w.ConvID, w.Keyed, w.Seqs, w.MsgIDs)
	})
}

// TestArchiveEraseShape: the DELETEs of one conversation's rows the cold
// tier can apply to archived rows (clear chat, ranges, a sender's).
func TestArchiveEraseShape(t *testing.T) {
	cases := []shapeCase{ // want "-": no ArchiveErase
		{"DELETE FROM conv_msg WHERE conv_id = ?", "bounds=[] sender=<nil>"},
		{"DELETE FROM conv_msg WHERE conv_id = 3 AND seq < 100", "bounds=[{seq < {-1 100}}] sender=<nil>"},
		{"DELETE FROM conv_msg WHERE 100 >= seq AND conv_id = 3 AND seq > ?", "bounds=[{seq <= {-1 100}} {seq > {0 <nil>}}] sender=<nil>"},
		{"DELETE FROM conv_msg WHERE conv_id = 3 AND seq BETWEEN 5 AND 9 AND sender_uid = 7", "bounds=[{seq >= {-1 5}} {seq <= {-1 9}}] sender=&{-1 7}"},
		{"DELETE FROM msg_content WHERE conv_id = 3 AND msg_id >= 10", "bounds=[{msg_id >= {-1 10}}] sender=<nil>"},
		{"DELETE FROM msg_content WHERE conv_id = 3 AND sender_uid = ?", "bounds=[] sender=&{0 <nil>}"},
		{"DELETE FROM msg_content WHERE conv_id = 3 AND seq < 5", "-"}, // msg_content has no seq
		{"DELETE FROM conv_msg WHERE conv_id = 3 AND seq NOT BETWEEN 5 AND 9", "-"},
		{"DELETE FROM conv_msg WHERE conv_id = 3 AND msg_type = 2", "-"},
		{"DELETE FROM conv_msg WHERE conv_id = 3 AND sender_uid <> 7", "-"},
		{"DELETE FROM conv_msg WHERE conv_id = 3 AND (seq < 5 OR seq > 9)", "-"},
		{"DELETE FROM conv_msg WHERE conv_id = 3 ORDER BY seq LIMIT 10", "-"},
		{"DELETE FROM conv_msg WHERE conv_id IN (3, 4)", "-"},
		{"DELETE FROM conv_msg WHERE conv_id = 3 AND seq = 5", "-"}, // keyed: coldWrite
		{"UPDATE conv_msg SET msg_type = 1 WHERE conv_id = 3", "-"},
	}
	checkShapes(t, cases, func(a *Analysis) string {
		w, ok := ArchiveWriteShape(a)
		if !ok || w.Erase == nil {
			return "-"
		}
		return fmt.Sprintf("bounds=%v sender=%v", w.Erase.Bounds, w.Erase.Sender)
	})
}

func TestSeqInsert(t *testing.T) {
	p := NewParser()
	a, err := parseOne(t, p, "INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, 1, 1, NOW()), (7, 8, ?, 1, NOW()), (9, 9, 9, 9, NOW())")
	if err != nil {
		t.Fatal(err)
	}
	if !NeedsSeq(a) {
		t.Fatal("NeedsSeq = false")
	}
	phys := func(string) (string, string) { return "im_0", "conv_msg_0001" }
	tpl, params, err := SeqInsert(a, []int{0, 2}, []uint64{5, 6}, false)
	if err != nil {
		t.Fatal(err)
	}
	want := "INSERT INTO `im_0`.`conv_msg_0001` (`conv_id`,`msg_id`,`sender_uid`,`msg_type`,`created_at`,`seq`) VALUES (?,?,1,1,NOW(),5),(9,9,9,9,NOW(),6)"
	if got := string(tpl.Render(nil, phys)); got != want || fmt.Sprint(params) != "[0 1]" {
		t.Errorf("literal seqs:\n got %s %v\nwant %s [0 1]", got, params, want)
	}
	tpl, params, err = SeqInsert(a, []int{0, 1}, []uint64{5, 6}, true)
	if err != nil {
		t.Fatal(err)
	}
	want = "INSERT INTO `im_0`.`conv_msg_0001` (`conv_id`,`msg_id`,`sender_uid`,`msg_type`,`created_at`,`seq`) VALUES (?,?,1,1,NOW(),?),(7,8,?,1,NOW(),?)"
	if got := string(tpl.Render(nil, phys)); got != want || fmt.Sprint(params) != "[0 1 -1 2 -1]" {
		t.Errorf("seq placeholders:\n got %s %v\nwant %s [0 1 -1 2 -1]", got, params, want)
	}
	// Every placeholder a hole: client k stays k, row i's seq is ParamCount+i.
	tpl, err = SeqInsertHoles(a)
	if err != nil {
		t.Fatal(err)
	}
	seq := func(s string) Literal { return Literal{Raw: s} }
	out, ok := tpl.RenderInline(nil, phys, []any{int64(1), uint64(2), "x'y", seq("S0"), seq("S1"), seq("S2")})
	want = "INSERT INTO `im_0`.`conv_msg_0001` (`conv_id`,`msg_id`,`sender_uid`,`msg_type`,`created_at`,`seq`) VALUES (1,2,1,1,NOW(),S0),(7,8,'x\\'y',1,NOW(),S1),(9,9,9,9,NOW(),S2)"
	if !ok || string(out) != want {
		t.Errorf("seq holes:\n got %s (%v)\nwant %s", out, ok, want)
	}
	if _, ok := tpl.RenderInline(nil, phys, []any{int64(1), uint64(2), "x"}); ok {
		t.Error("RenderInline without the seq values succeeded")
	}
	// The AST is left as parsed.
	if again, _ := Restore(a.Stmt); again != "INSERT INTO `conv_msg` (`conv_id`,`msg_id`,`sender_uid`,`msg_type`,`created_at`) VALUES (?,?,1,1,NOW()),(7,8,?,1,NOW()),(9,9,9,9,NOW())" {
		t.Errorf("AST changed: %s", again)
	}
	b, _ := parseOne(t, p, "INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (1, 1, 1, 1, 1, NOW())")
	c, _ := parseOne(t, p, "INSERT INTO msg_content (msg_id, conv_id, sender_uid, msg_type, content, created_at) VALUES (1, 1, 1, 1, '', NOW())")
	if NeedsSeq(b) || NeedsSeq(c) {
		t.Error("NeedsSeq true for an insert that names seq, or for another table")
	}
}
