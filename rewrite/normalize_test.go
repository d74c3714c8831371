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
		{"SELECT 'it''s'", "", nil, false},
		{`SELECT 'a\'b'`, "", nil, false},
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
	}
	for _, c := range cases {
		queries = append(queries, c.Query)
	}
	p := NewParser()
	shared := 0
	for _, q := range queries {
		norm, lits, ok := Normalize(nil, q, nil)
		if !ok || len(lits) == 0 {
			continue
		}
		an, err := parseOne(t, p, string(norm))
		if err != nil {
			continue // the full parse handles it
		}
		inl, _, _ := InlineShape(an)
		if !inl || len(an.Sharded) == 0 || !an.HasKey || len(an.Keys) != 1 || an.Keys[0].Param < 0 {
			continue
		}
		tn, err := NewTemplate(an)
		if err != nil {
			t.Fatalf("%s: %v", norm, err)
		}
		args := make([]any, len(lits))
		for i, l := range lits {
			args[i] = l
		}
		got, ok := tn.RenderInline(nil, physOf, args)
		if !ok {
			t.Errorf("%s: RenderInline refused its own literals", q)
			continue
		}
		ao, err := parseOne(t, p, q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		to, err := NewTemplate(ao)
		if err != nil {
			t.Fatal(err)
		}
		if want := to.Render(nil, physOf); string(got) != string(want) {
			t.Errorf("%s:\n cached %s\n   full %s", q, got, want)
		}
		shared++
	}
	if shared < 5 {
		t.Fatalf("only %d statements took the shared-plan path; the test proves nothing", shared)
	}
	t.Logf("%d of %d statements compared", shared, len(queries))
}
