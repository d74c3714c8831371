package engine

import (
	"regexp"
	"strings"

	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/rewrite"
)

// sql_mode NO_BACKSLASH_ESCAPES. In that mode a backslash in a string
// literal is an ordinary character. Convoy's backend connections never run
// in it (the SQL Convoy writes, restored statements and inlined values,
// escapes backslashes), so a session that sets it keeps it to itself:
//
//   - each statement the client sends is rewritten into the same statement
//     without the mode before anything reads it (Standard: backslashes in
//     string literals doubled), so the parser, the router and the
//     statements passed through verbatim all see standard SQL meaning the
//     same bytes;
//   - the backends get the session's sql_mode without the flag;
//   - a LIKE without ESCAPE gets ESCAPE '' (rewrite.LikesWithoutEscape),
//     MariaDB's meaning of such a LIKE in that mode; a statement of
//     unsharded tables with one (or with a column named below) is sent
//     restored rather than as written, and the session's statements skip
//     the plan cache;
//   - @@sql_mode and SHOW VARIABLES answer the session's mode with it, and
//     every reply carries SERVER_STATUS_NO_BACKSLASH_ESCAPES, which drivers
//     that interpolate parameters (go-sql-driver's interpolateParams,
//     Connector/J) read to decide how to escape.
//
//   - an unaliased computed column whose text has a backslash in a string
//     literal gets the text as written as its alias (MariaDB names such a
//     column by the statement's text; rewrite.NameFieldsAsWritten).
//
// What differs: a multi-statement query that changes the mode runs no
// statement after the change (1235); stored routines created in such a
// session keep the backends' sql_mode.

// sessionSQLMode matches @@sql_mode / @@session.sql_mode in a SET
// sql_mode expression (sqlModeExpr).
var sessionSQLMode = regexp.MustCompile(`(?i)@@(?:session\.)?sql_mode\b`)

// NoBackslashEscapes reports whether the session's sql_mode has
// NO_BACKSLASH_ESCAPES (the handler's status flag).
func (s *Session) NoBackslashEscapes() bool { return s.sqlModeNBE != "" }

// Standard is sql as a session without NO_BACKSLASH_ESCAPES would write
// it: sql itself unless the session has the mode.
func (s *Session) Standard(sql string) string {
	if s.sqlModeNBE == "" {
		return sql
	}
	return rewrite.FromNoBackslashEscapes(sql)
}

// splitNoBackslash takes a checked sql_mode value (a quoted literal or
// DEFAULT) apart: the value for the backends, without
// NO_BACKSLASH_ESCAPES, and the session's whole mode as MariaDB prints it
// when it has the flag ("" when not), which a backend canonicalises
// without ever running in it (SET STATEMENT for one SELECT).
func (s *Session) splitNoBackslash(v string) (backend, whole string, err error) {
	if strings.EqualFold(v, "DEFAULT") {
		return v, "", nil
	}
	modes := strings.Split(unquote(v), ",")
	kept := modes[:0:0]
	has := false
	for _, m := range modes {
		if strings.EqualFold(strings.TrimSpace(m), "NO_BACKSLASH_ESCAPES") {
			has = true
			continue
		}
		kept = append(kept, m)
	}
	if !has {
		return v, "", nil
	}
	lit, _ := rewrite.AppendLiteral(nil, strings.Join(kept, ","))
	err = s.withDefaultConn(func(c Conn) error {
		r, err := c.Exec("SET STATEMENT sql_mode = " + v + " FOR SELECT @@sql_mode")
		if err != nil {
			return err
		}
		if r == nil || r.Resultset == nil {
			return sqlerr.Errorf(sqlerr.Internal, "the datasource answered SELECT @@sql_mode without a result set")
		}
		if err := decodeRows(r); err != nil {
			return err
		}
		if len(r.Values) != 1 || len(r.Values[0]) != 1 {
			return sqlerr.Errorf(sqlerr.Internal, "the datasource answered SELECT @@sql_mode with %d rows", len(r.Values))
		}
		whole = string(r.Values[0][0].AsString())
		return nil
	})
	if err != nil {
		return "", "", err
	}
	return string(lit), whole, nil
}
