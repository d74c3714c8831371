package integration

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
)

// TestNoBackslashEscapes (docs/sql-reference.md): a session with sql_mode
// NO_BACKSLASH_ESCAPES, where a backslash in a string literal is an
// ordinary character, through Convoy and against a MariaDB session in the
// same mode: literals written in that mode, values a driver interpolates
// (go-sql-driver escapes by the server's status flag) and prepared ones
// are stored and read back byte for byte, on sharded and unsharded tables,
// pages, LIKE patterns and @@sql_mode answer the same; a session without
// the mode reads the stored bytes back equal too.
func TestNoBackslashEscapes(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	values := []string{`C:\new`, `it's`, `\'`, `a\_b%`, `\\`, "tab\there", `end\`, `"q"\"`}
	for _, mode := range []struct{ name, params string }{
		{"interpolated", "&interpolateParams=true&sql_mode=%27NO_BACKSLASH_ESCAPES%27"},
		{"prepared", "&interpolateParams=false&sql_mode=%27NO_BACKSLASH_ESCAPES%27"},
	} {
		t.Run(mode.name, func(t *testing.T) {
			rc, cc := connPair(t, s, mode.params)
			for _, c := range []*sql.Conn{rc, cc} {
				for _, q := range []string{"TRUNCATE TABLE msg_content", "CREATE TABLE IF NOT EXISTS nbe_plain (id INT PRIMARY KEY, v VARBINARY(64))", "TRUNCATE TABLE nbe_plain"} {
					if _, err := c.ExecContext(ctx, q); err != nil {
						t.Fatalf("%s: %v", q, err)
					}
				}
			}
			var cases []dcase
			for i, v := range values {
				cases = append(cases,
					q("INSERT INTO msg_content (msg_id, conv_id, sender_uid, msg_type, content, created_at) VALUES (?, ?, 1, 1, ?, '2026-01-01 00:00:00')", 100+i, 42+i%3, v),
					q("INSERT INTO nbe_plain VALUES (?, ?)", i, v))
			}
			cases = append(cases,
				// Literals in the session's mode, sent as they are.
				q(`INSERT INTO msg_content (msg_id, conv_id, sender_uid, msg_type, content, created_at) VALUES (200, 42, 1, 1, 'C:\new''s \', '2026-01-01 00:00:00')`),
				q(`INSERT INTO nbe_plain VALUES (100, 'x\y'), (101, '\')`),
				q(`SELECT 'a\b', LENGTH('a\b'), '\', CONCAT('x''\', "y\z") AS c, 'h\' = 'h\'`), // names by text, as written
				q("SELECT msg_id, content, HEX(content) FROM msg_content WHERE conv_id = ? ORDER BY msg_id", 42),
				q("SELECT msg_id, content FROM msg_content WHERE conv_id IN (42, 43, 44) ORDER BY msg_id"),
				q(`SELECT msg_id FROM msg_content WHERE conv_id = 44 AND content LIKE 'a\_b%'`),
				q(`SELECT id, v FROM nbe_plain WHERE v LIKE '%\%' ORDER BY id`),
				q("SELECT msg_id FROM msg_content WHERE conv_id = ? AND content LIKE ? ORDER BY msg_id", 44, `a\_b%`),
				q("SELECT id FROM nbe_plain WHERE v LIKE ? OR CONCAT(v, '') LIKE 'x\\%' ORDER BY id", `%\%`), // (the Go literal's \\ is one backslash)
				q(`SELECT msg_id FROM msg_content WHERE conv_id IN (42, 43, 44) AND content LIKE '%\%' ESCAPE '|' ORDER BY msg_id`),
				q("SELECT id, v, HEX(v) FROM nbe_plain ORDER BY id"),
				q(`SELECT COUNT(*) FROM msg_content WHERE content = 'C:\new''s \'`),
				q("SELECT @@sql_mode LIKE '%NO_BACKSLASH_ESCAPES%', @@session.sql_mode LIKE '%NO_BACKSLASH_ESCAPES%'"),
				q("SHOW VARIABLES LIKE 'sql_mode'"),
				// Sent restored (the LIKE gets ESCAPE ''): RETURNING stays.
				q(`DELETE FROM nbe_plain WHERE v LIKE 'x\%' RETURNING id, v`),
			)
			for i, dc := range cases {
				want, got := run(ctx, rc, dc), run(ctx, cc, dc)
				if !same(want, got, false) {
					t.Errorf("case %d: %s %v\n  mariadb: %v\n  convoy:  %v", i, dc.sql, dc.args, want, got)
				}
			}
			// The bytes stored, read by sessions without the mode.
			ref, cv := connPair(t, s, "")
			for _, dc := range []dcase{
				q("SELECT msg_id, HEX(content) FROM msg_content WHERE conv_id IN (42, 43, 44) ORDER BY msg_id"),
				q("SELECT id, HEX(v) FROM nbe_plain ORDER BY id"),
			} {
				want, got := run(ctx, ref, dc), run(ctx, cv, dc)
				if !same(want, got, false) || !strings.Contains(fmt.Sprint(want), "5C") {
					t.Errorf("%s without the mode:\n  mariadb: %v\n  convoy:  %v", dc.sql, want, got)
				}
			}
		})
	}
}

// TestNoBackslashEscapesMultiStatement: a multi-statement query read in one
// mode does not run statements after a change of NO_BACKSLASH_ESCAPES
// (MariaDB would read them in the new mode): they get 1235; the change
// itself took effect.
func TestNoBackslashEscapesMultiStatement(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	c, err := openDSN(t, s.convoy.dsn("convoy", "convoy", "im")+"&multiStatements=true").Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.ExecContext(ctx, `SET sql_mode = 'NO_BACKSLASH_ESCAPES'; SELECT 'a\b'`)
	if errno(err) != 1235 || !strings.Contains(err.Error(), "NO_BACKSLASH_ESCAPES") {
		t.Fatalf("a statement after the mode change in the same query: %v, want 1235", err)
	}
	var mode, v string
	if err := c.QueryRowContext(ctx, `SELECT @@sql_mode, 'a\b'`).Scan(&mode, &v); err != nil || !strings.Contains(mode, "NO_BACKSLASH_ESCAPES") || v != `a\b` {
		t.Fatalf("after it: sql_mode %q, 'a\\b' read as %q (%v)", mode, v, err)
	}
	// The server reads a PREPARE's text in its own mode: refused where it
	// would matter.
	p, err := openDSN(t, s.convoy.dsn("convoy", "convoy", "im")+"&sql_mode=%27NO_BACKSLASH_ESCAPES%27").Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.ExecContext(ctx, `PREPARE s FROM 'SELECT ''a\b'''`); errno(err) != 1235 {
		t.Fatalf("PREPARE FROM a text with a backslash in the mode: %v, want 1235", err)
	}
	if _, err := p.ExecContext(ctx, `PREPARE s FROM 'SELECT 1'`); err != nil {
		t.Fatalf("PREPARE FROM a text without one: %v", err)
	}
}
