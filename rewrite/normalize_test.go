package rewrite

import "testing"

func TestNormalize(t *testing.T) {
	for _, c := range []struct {
		sql, norm string
		lits      []Literal
		ok        bool
	}{
		{"SELECT msg_id FROM conv_msg WHERE conv_id = 42 AND seq < 18446744073709551615 LIMIT 20",
			"SELECT msg_id FROM conv_msg WHERE conv_id = ? AND seq < ? LIMIT ?",
			[]Literal{{"42", int64(42)}, {"18446744073709551615", uint64(18446744073709551615)}, {"20", int64(20)}}, true},
		{"SELECT `a'1` FROM t1 WHERE x='it is ? -- not a comment' AND @v=7", "SELECT `a'1` FROM t1 WHERE x=? AND @v=?",
			[]Literal{{"'it is ? -- not a comment'", "it is ? -- not a comment"}, {"7", int64(7)}}, true},
		{"SELECT 1.5", "", nil, false},
		{"SELECT 1e3", "", nil, false},
		{"SELECT 0x7B", "", nil, false},
		{"SELECT .5", "", nil, false},
		{"SELECT 99999999999999999999", "", nil, false},
		// Escapes and _binary: kept verbatim, never decoded (not routable).
		{"SELECT 'it''s'", "SELECT ?", []Literal{{"'it''s'", Undecoded{}}}, true},
		{`SELECT 'a\'b', 'c\\', 'd'`, "SELECT ?, ?, ?", []Literal{{`'a\'b'`, Undecoded{}}, {`'c\\'`, Undecoded{}}, {"'d'", "d"}}, true},
		{"INSERT INTO t VALUES (_binary'\xff" + `\\''` + ";x', _BINARY'')", "INSERT INTO t VALUES (?, ?)",
			[]Literal{{"_binary'\xff" + `\\''` + ";x'", Undecoded{}}, {"_BINARY''", Undecoded{}}}, true},
		{`SELECT 'ab\'`, "", nil, false},
		{"SELECT _binary'open", "", nil, false},
		{"SELECT a_binary'x'", "", nil, false},
		{"SELECT _latin1'x'", "", nil, false},
		{"SELECT _utf8mb4'x'", "", nil, false},
		{"SELECT X'7B'", "", nil, false},
		{"SELECT @'v'", "", nil, false},
		{`SELECT "x"`, "", nil, false},
		{"SELECT 1 /* c */", "", nil, false},
		{"SELECT 1 -- c", "", nil, false},
		{"SELECT 1 # c", "", nil, false},
		{"SELECT 1; SELECT 2", "", nil, false},
		{"SELECT ?", "", nil, false},
		{"SELECT 'unterminated", "", nil, false},
	} {
		norm, lits, ok := Normalize(nil, c.sql, nil)
		if ok != c.ok || (ok && (string(norm) != c.norm || len(lits) != len(c.lits))) {
			t.Errorf("%s: got %q %v %v, want %q %v %v", c.sql, norm, lits, ok, c.norm, c.lits, c.ok)
			continue
		}
		for i := range c.lits {
			if lits[i] != c.lits[i] {
				t.Errorf("%s: literal %d = %#v, want %#v", c.sql, i, lits[i], c.lits[i])
			}
		}
	}
}

// TestNormalizedRenderEqualsFullRender: for every statement of the render
// corpus (and a few more) that the plan cache would share, the SQL rendered
// from the normalised statement's template with the client's literals
// spliced back is byte-identical to the SQL rendered from the statement
// parsed as a whole. This is the property the text plan cache relies on.
func TestNormalizedRenderEqualsFullRender(t *testing.T) {
	cases := loadRenderCases(t)
	queries := []string{
		"SELECT seq, msg_id, sender_uid, msg_type, created_at FROM conv_msg WHERE conv_id = 1000042 AND seq < 4611686018427387904 ORDER BY seq DESC LIMIT 20",
		"SELECT msg_id FROM conv_msg WHERE conv_id = 7 AND seq = 3",
		"SELECT conv_id, seq, msg_id FROM im_inbox WHERE uid = 9 AND conv_id > 0 ORDER BY conv_id, seq DESC LIMIT 50 OFFSET 10",
		"SELECT * FROM msg_content WHERE conv_id = '123' AND msg_id IN (1, 2, 3)",
		"SELECT m.seq FROM conv_msg m WHERE m.conv_id = 5 AND m.seq BETWEEN 10 AND 20",
		"SELECT seq FROM conv_msg WHERE conv_id = 5 AND seq > -1 AND msg_type <> 'x?y'",
		"SELECT seq FROM conv_msg WHERE conv_id = 5 AND msg_type <> 'it''s \\' \\\\'",
		"INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (1000042, 77, 9, 1, NOW(3))",
		"INSERT INTO msg_content (msg_id, conv_id, sender_uid, msg_type, content, created_at) VALUES (77, 1000042, 9, 1, _binary'\\0\\'\\\\;\xff''x', NOW(3))",
		"INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (5, 6, 7, 8, NOW()) ON DUPLICATE KEY UPDATE seq = 9",
		"REPLACE INTO im_conv_member (uid, conv_id, last_read_seq, mute, updated_at) VALUES (5, 6, 7, 0, '2026-01-01 00:00:00')",
	}
	for _, c := range cases {
		queries = append(queries, c.Query)
	}
	p := NewParser()
	shared := 0
	for _, q := range queries {
		if sharedRenderCheck(t, p, q) {
			shared++
		}
	}
	if shared < 5 {
		t.Fatalf("only %d statements took the shared-plan path; the test proves nothing", shared)
	}
	t.Logf("%d of %d statements compared", shared, len(queries))
}

// sharedRenderCheck runs q the way the plan cache does and, when its plan
// would be shared, requires the SQL rendered from the normalised statement's
// template with the client's literals spliced back to mean what the SQL
// rendered from q parsed as a whole means (byte-identical, or restoring to
// the same canonical text). It reports whether q was shared.
func sharedRenderCheck(t testing.TB, p *Parser, q string) bool {
	t.Helper()
	norm, lits, ok := Normalize(nil, q, nil)
	if !ok || len(lits) == 0 || CheckComments(string(norm)) != nil {
		return false
	}
	ns, err := p.Parse(string(norm))
	if err != nil || len(ns) != 1 {
		return false
	}
	an, err := Analyze(ns[0])
	if err != nil {
		return false
	}
	if _, ok := SharedKey(an, len(lits)); !ok {
		return false
	}
	tn, err := NewTemplate(an)
	if err != nil {
		t.Fatalf("%q: %v", norm, err)
	}
	args := make([]any, len(lits))
	for i, l := range lits {
		args[i] = l
	}
	got, ok := tn.RenderInline(nil, physOf, args)
	if !ok {
		t.Fatalf("%q: RenderInline refused its own literals", q)
	}
	// Normalize must cut tokens where the parser (and MariaDB) does: the
	// statement as sent parses, as one statement, to what was spliced.
	if err := CheckComments(q); err != nil {
		t.Fatalf("%q: shared, but the full path refuses it: %v", q, err)
	}
	os, err := p.Parse(q)
	if err != nil || len(os) != 1 {
		t.Fatalf("%q: shared, but it does not parse as one statement: %v", q, err)
	}
	ao, err := Analyze(os[0])
	if err != nil {
		return true // refused at analysis; the shared path refuses at routing
	}
	to, err := NewTemplate(ao)
	if err != nil {
		t.Fatalf("%q: %v", q, err)
	}
	if want := to.Render(nil, physOf); string(got) != string(want) && !sameMeaning(t, p, string(got), string(want)) {
		t.Fatalf("%q:\n cached %s\n   full %s", q, got, want)
	}
	return true
}

// FuzzNormalizedRender: sharedRenderCheck on any input.
func FuzzNormalizedRender(f *testing.F) {
	for _, q := range []string{
		"SELECT msg_id FROM conv_msg WHERE conv_id = 7 AND seq = 3",
		"SELECT seq FROM conv_msg WHERE conv_id = 5 AND msg_type <> 'it''s \\' \\\\'",
		"INSERT INTO msg_content (msg_id, conv_id, content) VALUES (77, 1000042, _binary'\\0\\'\\\\;\xff''x')",
		"INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (1000042, 77, 9, 1, NOW(3))",
	} {
		f.Add(q)
	}
	for _, c := range loadRenderCases(f) {
		f.Add(c.Query)
	}
	p := NewParser()
	f.Fuzz(func(t *testing.T, q string) { sharedRenderCheck(t, p, q) })
}

// sameMeaning: two SQL texts parse to statements that restore identically
// (the restorer prints one canonical form of every literal).
func sameMeaning(t testing.TB, p *Parser, a, b string) bool {
	t.Helper()
	sa, err := p.Parse(a)
	if err != nil || len(sa) != 1 {
		t.Fatalf("%s: %v", a, err)
	}
	ra, _ := Restore(sa[0])
	sb, err := p.Parse(b)
	if err != nil || len(sb) != 1 {
		t.Fatalf("%s: %v", b, err)
	}
	rb, _ := Restore(sb[0])
	return ra == rb
}

// BenchmarkNormalize: the plan cache's cut of a point select and of a
// send (the IM mix's two commonest text statements), per statement pair.
func BenchmarkNormalize(b *testing.B) {
	sel := "SELECT conv_id, seq, sender, body FROM conv_msg WHERE conv_id = 123456789 AND seq < 98765 ORDER BY seq DESC LIMIT 20"
	ins := "INSERT INTO conv_msg (conv_id, seq, sender, body, created_at) VALUES (123456789, 98765, 42, 'hello there, how are you doing today?', 1700000000)"
	var dst []byte
	var lits []Literal
	b.ReportAllocs()
	for b.Loop() {
		dst, lits, _ = Normalize(dst[:0], sel, lits[:0])
		dst, lits, _ = Normalize(dst[:0], ins, lits[:0])
	}
}
