package engine

import (
	"maps"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/pingcap/tidb/pkg/parser/charset"

	"github.com/convoy-im/convoy/proxy/backend"
	"github.com/convoy-im/convoy/proxy/planbuilder"
	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/rewrite"
)

// unsafeCharsets are the client character sets in which a multi-byte
// character may contain the byte 0x5C (backslash) or 0x27 (quote): the
// parser and the restorer read a statement's bytes one by one, so such a
// character would end or escape a string literal for Convoy but not for the
// server (the classic 0xbf27 injection). They are refused rather than
// half-supported. Every other set MariaDB has (single-byte ones like latin2
// or cp1257, UTF-8, EUC-style multi-byte sets whose bytes are all >= 0x80)
// reads the same byte by byte.
var unsafeCharsets = map[string]bool{"big5": true, "cp932": true, "gbk": true, "gb18030": true, "sjis": true}

func unsafeCharsetError(cs string) error {
	return sqlerr.Errorf(sqlerr.NotSupported, "character set %q is not supported through Convoy (use utf8mb4): in %s a multi-byte character can hide a backslash or quote, which breaks escaping", cs, cs)
}

// charsetOfCollation is the character set a collation name belongs to:
// MariaDB's collation names start with it (cp1257_bin, utf8mb4_unicode_ci).
func charsetOfCollation(name string) string {
	cs, _, _ := strings.Cut(strings.ToLower(name), "_")
	return cs
}

// set applies SET statements. Session variables are checked on a real
// backend connection at once, so a bad name or value fails now with the
// server's own error, and then travel with the session to every connection
// it uses.
func (s *Session) set(a *rewrite.Analysis) (*mysql.Result, error) {
	next := make(map[string]string, len(s.vars)+len(a.SetVars))
	for k, v := range s.vars {
		next[k] = v
	}
	autocommit, coldPartial, sqlModeNBE, txnMode := s.autocommit, s.coldPartial, s.sqlModeNBE, s.outbox
	var nextTx map[string]string
	for _, v := range a.SetVars {
		switch {
		case v.NextTx:
			// SET TRANSACTION ...: the next transaction's characteristics,
			// carried to the connections of that transaction only (see run).
			if s.InTransaction() {
				return nil, &mysql.MyError{Code: mysql.ER_CANT_CHANGE_TX_CHARACTERISTICS, State: "25001",
					Message: "Transaction characteristics can't be changed while a transaction is in progress"}
			}
			if nextTx == nil {
				nextTx = maps.Clone(s.nextTx)
				if nextTx == nil {
					nextTx = map[string]string{}
				}
			}
			planbuilder.SetSysVar(nextTx, v.Name, v.Value)
		case v.Global:
			return nil, sqlerr.Errorf(sqlerr.NotSupported, "SET GLOBAL %s is not allowed through Convoy: it would change one datasource only; set it on each server directly", v.Name)
		case !v.User && v.Name == ColdPartialVar:
			// Convoy's own: checked here, never sent to a server.
			var err error
			if coldPartial, err = coldPartialValue(v.Value); err != nil {
				return nil, err
			}
		case !v.User && v.Name == TxnModeVar:
			// Convoy's own, like tx_isolation: not inside a transaction.
			if s.InTransaction() {
				return nil, &mysql.MyError{Code: mysql.ER_CANT_CHANGE_TX_CHARACTERISTICS, State: "25001",
					Message: "Transaction characteristics can't be changed while a transaction is in progress (" + TxnModeVar + ")"}
			}
			var err error
			if txnMode, err = txnModeValue(v.Value); err != nil {
				return nil, err
			}
		case v.User:
			name := "@" + strings.TrimPrefix(v.Name, "@")
			next[name] = v.Value
		case v.Name == "autocommit":
			on, ok := boolValue(v.Value)
			if !ok {
				return nil, &mysql.MyError{Code: mysql.ER_WRONG_VALUE_FOR_VAR, State: "42000",
					Message: "Variable 'autocommit' can't be set to the value of '" + v.Value + "'"}
			}
			autocommit = on
		case v.Name == "names" || v.Name == "character_set":
			cs := strings.ToLower(unquote(v.Value))
			if cs == "default" {
				delete(next, "names")
				continue
			}
			if unsafeCharsets[cs] || v.Collate != "" && unsafeCharsets[charsetOfCollation(unquote(v.Collate))] {
				return nil, unsafeCharsetError(cs)
			}
			val := cs
			if v.Collate != "" {
				val += " COLLATE " + unquote(v.Collate)
			}
			next["names"] = val
		case charsetVars[v.Name]:
			if err := checkCharsetValue(v.Name, v.Value); err != nil {
				return nil, err
			}
			planbuilder.SetSysVar(next, v.Name, v.Value)
		case v.Name == "sql_mode":
			val := v.Value
			if sqlModeExpr(val) {
				var err error
				if val, err = s.evalSQLMode(next, sqlModeNBE, val); err != nil {
					return nil, err
				}
			}
			if err := checkSQLMode(val); err != nil {
				return nil, err
			}
			var err error
			if val, sqlModeNBE, err = s.splitNoBackslash(val); err != nil {
				return nil, err
			}
			planbuilder.SetSysVar(next, v.Name, val)
		default:
			planbuilder.SetSysVar(next, v.Name, v.Value)
		}
	}
	if !mapsEqual(next, s.vars) {
		var err error
		if c := s.txn.conn; c != nil {
			err = c.SyncVars(next)
			s.afterError(c, err)
		} else {
			err = s.withDefaultConn(func(c Conn) error { return c.SyncVars(next) })
		}
		if err != nil {
			return nil, err
		}
		s.vars = next
	}
	if autocommit && !s.autocommit && s.txn.conn != nil && !s.txn.explicit {
		// SET autocommit=1 commits the implicit transaction, as in MySQL.
		if _, err := s.endTxn(true); err != nil {
			return nil, err
		}
	}
	s.autocommit, s.coldPartial, s.sqlModeNBE, s.outbox = autocommit, coldPartial, sqlModeNBE, txnMode
	if nextTx != nil {
		if err := s.withDefaultConn(func(c Conn) error { return c.SyncVars(mergeVars(s.vars, nextTx)) }); err != nil {
			return nil, err // a bad value fails now, with the server's errno
		}
		s.nextTx = nextTx
	}
	return okResult(), nil
}

// mergeVars returns base with over's values on top (base itself when over
// is empty).
func mergeVars(base map[string]string, over ...map[string]string) map[string]string {
	n := 0
	for _, o := range over {
		n += len(o)
	}
	if n == 0 {
		return base
	}
	m := maps.Clone(base)
	if m == nil {
		m = make(map[string]string, n)
	}
	for _, o := range over {
		maps.Copy(m, o)
	}
	return m
}

// sqlModeExpr reports a sql_mode value that extends the current mode, as
// drivers do on connect (Connector/J: CONCAT(@@sql_mode, ',STRICT_TRANS_TABLES')):
// CONCAT / CONCAT_WS / REPLACE over @@sql_mode and string literals, nothing
// else (no other function, no table), so evaluating it on a backend has no
// effect and reads nothing.
func sqlModeExpr(v string) bool {
	if !strings.Contains(v, "(") {
		return false
	}
	var rest []byte
	for i := 0; i < len(v); i++ {
		if v[i] != '\'' {
			rest = append(rest, v[i])
			continue
		}
		for i++; i < len(v) && v[i] != '\''; i++ {
			if v[i] == '\\' {
				i++
			}
		}
		if i >= len(v) {
			return false // unterminated literal
		}
		rest = append(rest, ' ')
	}
	words := strings.FieldsFunc(strings.ToLower(string(rest)), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r == '_' || r == '@' || r == '.' || r == '`')
	})
	for _, w := range words {
		switch strings.ReplaceAll(w, "`", "") {
		case "concat", "concat_ws", "replace", "@@sql_mode", "@@session.sql_mode", "@@global.sql_mode":
		default:
			return false
		}
	}
	return !strings.ContainsAny(string(rest), ";#-/*")
}

// evalSQLMode computes a sqlModeExpr value on a backend connection in the
// session's state (vars: the variables as set so far) and returns it as a
// string literal, which checkSQLMode then checks like any other.
func (s *Session) evalSQLMode(vars map[string]string, nbe, expr string) (string, error) {
	if nbe != "" {
		// The backend's @@sql_mode lacks NO_BACKSLASH_ESCAPES: the
		// session's own mode stands in for it (sqlModeExpr allows nothing
		// else to mention it).
		lit, _ := rewrite.AppendLiteral(nil, nbe)
		expr = sessionSQLMode.ReplaceAllLiteralString(expr, string(lit))
	}
	var mode string
	err := s.withDefaultConn(func(c Conn) error {
		if err := c.SyncVars(vars); err != nil {
			return err
		}
		r, err := c.Exec("SELECT " + expr)
		if err != nil {
			return err
		}
		if r == nil {
			return sqlerr.Errorf(sqlerr.Internal, "the datasource answered SELECT without a result")
		}
		if err := decodeRows(r); err != nil {
			return err
		}
		if len(r.Values) != 1 || len(r.Values[0]) != 1 || r.Values[0][0].Value() == nil {
			return sqlerr.Errorf(sqlerr.NotSupported, "SET sql_mode = %s did not give one string", expr)
		}
		mode = string(r.Values[0][0].AsString())
		return nil
	})
	if err != nil {
		return "", err
	}
	lit, _ := rewrite.AppendLiteral(nil, mode)
	return string(lit), nil
}

// checkSQLMode refuses modes that change how quotes are read: the proxy
// parses with backtick identifiers, so ANSI_QUOTES would make the
// rewritten statement mean other names or bytes than the client sent.
// (NO_BACKSLASH_ESCAPES is read by Convoy itself: nobackslash.go.)
func checkSQLMode(v string) error {
	if strings.EqualFold(v, "DEFAULT") {
		return nil
	}
	if len(v) < 2 || (v[0] != '\'' && v[0] != '"') {
		return sqlerr.Errorf(sqlerr.NotSupported, "SET sql_mode needs a literal string through Convoy (it must check the modes), got %s", v)
	}
	for _, m := range strings.Split(strings.ToUpper(unquote(v)), ",") {
		switch strings.TrimSpace(m) {
		// ANSI and the compatibility modes imply ANSI_QUOTES.
		case "ANSI_QUOTES", "ANSI", "ORACLE", "POSTGRESQL", "MSSQL", "DB2", "MAXDB":
			return sqlerr.Errorf(sqlerr.NotSupported, "sql_mode %s is not supported through Convoy: it changes how the proxy must read quotes and escapes", strings.TrimSpace(m))
		}
	}
	return nil
}

func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '\'' || s[0] == '"' || s[0] == '`') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}

func boolValue(v string) (bool, bool) {
	switch strings.ToUpper(unquote(v)) {
	case "1", "ON", "TRUE":
		return true, true
	case "0", "OFF", "FALSE":
		return false, true
	}
	return false, false
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// charsetVars are the session variables that decide how the server reads
// the bytes of a statement; each must stay a safe character set.
var charsetVars = map[string]bool{
	"character_set_client": true, "character_set_connection": true, "character_set_results": true,
	"collation_connection": true,
}

func checkCharsetValue(name, value string) error {
	if strings.EqualFold(value, "DEFAULT") {
		return nil
	}
	v := strings.ToLower(unquote(value))
	if v == "" || v[0] >= '0' && v[0] <= '9' || strings.ContainsAny(v, "()@ ") {
		return sqlerr.Errorf(sqlerr.NotSupported, "SET %s needs a character set name through Convoy (it must check it), got %s", name, value)
	}
	cs := v
	if name == "collation_connection" {
		cs = charsetOfCollation(v)
	}
	if unsafeCharsets[cs] {
		return unsafeCharsetError(cs)
	}
	return nil // the backend checks the name itself
}

// SetClientCollation applies the collation a client announced in its
// handshake (go-sql-driver's collation= parameter, libmariadb's
// --default-character-set): every backend connection of the session reads
// its bytes in that character set and compares with that collation. Unsafe
// sets (GBK, SJIS, ...) are refused; an id MariaDB does not know leaves the
// default, as MariaDB does.
func (s *Session) SetClientCollation(id uint8) error {
	cs, coll, ok := s.e.collationByID(id)
	if !ok || coll == backend.Collation {
		return nil // utf8mb4_general_ci: what every backend connection uses
	}
	if unsafeCharsets[cs] {
		return unsafeCharsetError(cs)
	}
	s.vars["names"] = cs + " COLLATE " + coll
	return nil
}

// utf8Client reports whether the client's strings reach the backends as
// utf8mb4 / utf8mb3: neither the handshake, SET NAMES nor
// character_set_client chose another set.
func (s *Session) utf8Client() bool {
	cs, ok := s.vars["@@character_set_client"]
	if !ok {
		cs, _, _ = strings.Cut(s.vars["names"], " ")
	}
	switch strings.ToLower(unquote(cs)) {
	case "", "utf8mb4", "utf8mb3", "utf8":
		return true
	}
	return false
}

// collationByID names the collation a handshake asked for by number, and
// its character set, as the default datasource numbers them (MariaDB's own
// numbering: cp1257_bin is 59 there; 255 is MySQL 8's utf8mb4_0900_ai_ci,
// which MariaDB 10.11 does not know and answers with its default), and
// remembers the answer. With the datasource unreachable the parser's
// (MySQL's) table stands in, unremembered. ok is false for an unknown id.
func (e *Engine) collationByID(id uint8) (cs, coll string, ok bool) {
	if v, known := e.collations.Load(id); known {
		c := v.([2]string)
		return c[0], c[1], c[1] != ""
	}
	_, rows, err := e.queryRows(e.routes.Current().DefaultDatasource(),
		"SELECT CHARACTER_SET_NAME, COLLATION_NAME FROM information_schema.COLLATIONS WHERE ID = "+strconv.Itoa(int(id)))
	if err != nil {
		c, err := charset.GetCollationByID(int(id))
		if err != nil {
			return "", "", false
		}
		return strings.ToLower(c.CharsetName), strings.ToLower(c.Name), true
	}
	if len(rows) == 1 && len(rows[0]) == 2 {
		cs, coll = strings.ToLower(string(rows[0][0])), strings.ToLower(string(rows[0][1]))
	}
	e.collations.Store(id, [2]string{cs, coll})
	return cs, coll, coll != ""
}
