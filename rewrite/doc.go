// Package rewrite is Convoy's SQL front half: it parses statements with the
// TiDB parser, classifies them, extracts the facts the router needs (sharded
// tables, shard-key values, INSERT rows, session SETs) and prints them back
// with physical table names. It never edits SQL text: every rewrite happens
// on the AST and is printed by the TiDB restorer (docs/design.md §3).
//
// # Flow
//
//	p := rewrite.NewParser()            // one per session: not goroutine-safe
//	stmts, err := p.Parse(sql)          // *SyntaxError on bad SQL
//	a, err := rewrite.Analyze(stmts[0]) // Kind, Sharded, Keys, InsertRows, ...
//	t, err := rewrite.NewTemplate(a)    // restore once, cache with the plan
//	buf = t.Render(buf[:0], phys)       // per shard: ~100 ns, no allocation
//
// # Errors
//
// Parse returns *SyntaxError (Msg is MySQL's "You have an error in your SQL
// syntax..." text, Code the errno, normally 1064). Analyze refuses
// statements with *UnsupportedError; errors.Is tells two families apart:
//
//   - ErrMixedTables: a sharded table with an unsharded one, or sharded
//     tables of different shard keys (conv_id family vs uid family). Tables
//     of one family may be joined: they are co-located by shard number.
//   - ErrShardKeyUpdate: UPDATE ... SET key = ..., or ON DUPLICATE KEY
//     UPDATE key = ...: the row would have to move to another shard.
//   - anything else (Err == nil): an INSERT/REPLACE into a sharded table the
//     router cannot split: no column list ("name the columns"), key column
//     missing, INSERT ... SELECT, or a row whose key is not a literal or ?.
//
// Errors starting with "[BUG]" are internal failures, never user errors.
// Shard-key values are returned as found (Value); router.KeyFromValue
// decides whether NULL, negative or fractional keys are acceptable.
//
// # Key extraction
//
// For SELECT/UPDATE/DELETE the first top-level AND conjunct of WHERE (then
// of the ON of inner joins whose rows are not null-extended by an outer join)
// of the form key = v, v = key or key IN (v, ...) is the restriction, where
// key is the shard key column unqualified or qualified by a sharded table's
// name or alias of this FROM, and v is a literal, ? or -literal. OR at the
// top, subqueries, functions and column comparisons are not restrictions.
// Set operations (UNION ...) never have a key: the engine scatters them.
//
// # Holes and sentinels
//
// Render must be cheap because it runs once per shard per statement, so the
// statement is restored only once. NewTemplate temporarily renames each
// sharded table reference on the AST to a sentinel identifier built from a
// fresh 64-bit random token, restores, puts every name back, and cuts the
// text at the sentinels. Render then only concatenates fragments and quoted
// physical names. A statement cannot spoof a hole: it was parsed before the
// token existed, and split refuses text holding more sentinels than were
// installed (NewTemplate then retries with a new token).
//
// Renaming keeps meaning: unaliased sharded tables in FROM clauses get their
// logical name as alias (`im_3`.`conv_msg_0441` AS `conv_msg`), so qualified
// columns and result metadata still say conv_msg. Where MySQL takes no alias
// (INSERT/REPLACE target, single-table DELETE, DDL, TABLE t) column
// qualifiers naming the table become holes too, unless an inner SELECT
// rebinds the name.
//
// # Restorer quirks worth knowing
//
//   - Comments are dropped (admin directives must be read from the text
//     before parsing); /*! ... */ executable comments are parsed as SQL.
//   - String literals are printed single-quoted with backslashes escaped:
//     the backend session must not run with NO_BACKSLASH_ESCAPES (a
//     client's session with it is read through FromNoBackslashEscapes), and a
//     multibyte session charset whose characters may contain the byte 0x5C
//     (GBK, Big5, SJIS) must be refused, because the lexer reads the bytes
//     as utf8mb4 and the restorer re-escapes them.
//   - An explicit _utf8mb4 introducer is dropped (it is the parser's default
//     for every literal); other introducers are kept.
//   - SET statements restore TiDB-flavoured SQL (tx_isolation_one_shot,
//     @@SESSION.`x`); send the client's text or synthesize from SetVars.
//   - START TRANSACTION WITH CONSISTENT SNAPSHOT restores without the clause.
//   - SET TRANSACTION READ ONLY and SET SESSION TRANSACTION READ ONLY parse
//     identically (tx_read_only); only the isolation level keeps NextTx.
package rewrite
