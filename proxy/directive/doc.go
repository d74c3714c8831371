// Package directive parses Convoy's DBA admin directives: SQL comments of the
// form /*+ convoy ... */ that any MySQL client can send. It is pure (no I/O)
// and only parses; the engine checks the admin privilege (errno 1227 for
// others), resolves names against the route table and answers.
//
// The mysql and mariadb command-line clients strip comments before sending
// unless started with --comments (-c); use `mariadb -c` (or any driver, which
// sends the text as is).
//
// # Grammar
//
// Keywords are case-insensitive. Tokens may be separated by whitespace
// (space, tab, newline, CR, VT, FF), including newlines.
//
//	query      = ws* "/*+" ws* "convoy" body "*/" tail
//	tail       = ws* [";" ws*]                  (command directives)
//	           | statement                      (targeting directives)
//
//	body       = command | target
//	command    = "SHOW" "ROUTES" [ "WHERE" ( "shard" "=" shard
//	                                       | "datasource" "=" name ) ]
//	           | "SHOW" "SHARD" "FOR" keycol "=" key
//	           | "SHOW" "SHARD" "STATS" [ "WHERE" "shard" "=" shard ]
//	           | "SHOW" "SHARD" "HEALTH"
//	           | "SHOW" "DATASOURCES"
//	           | "SHOW" "PROXIES"
//	           | "SHOW" "MIGRATIONS"
//	           | "RELOAD" "ROUTES"
//	           | "MIGRATE" ( "SHARD" shard | "SHARDS" shard "-" shard ) "TO" name
//	                       { "DATABASE" name | "RATE" number | "PARALLEL" number | "AUTO" }
//	                       (each option at most once; PARALLEL only with SHARDS)
//	           | "MIGRATION" shard ( "PAUSE" | "RESUME" | "NEXT" | "ROLLBACK" | "CANCEL"
//	                               | "RATE" number | "PURGE" )
//	target     = "shard" "=" shard              (run on that shard's physical tables)
//	           | "datasource" "=" name          (run raw on one datasource)
//	           | "all"                          (let a keyless UPDATE/DELETE scatter)
//
//	shard      = digit { digit }                decimal, 0..1023 (router.NumShards-1)
//	number     = digit { digit }                RATE: rows/s 0..10^9 (0: unlimited),
//	                                            PARALLEL: 1..1024
//	key        = digit { digit }                decimal BIGINT UNSIGNED (router.KeyFromValue)
//	keycol     = "conv_id" | "uid"              the shard key columns of router.ShardedTables,
//	                                            bare or `quoted`
//	name       = bare | "'" chars "'" | "`" chars "`"
//	bare       = identchar { identchar }        identchar = A-Z a-z 0-9 _ $
//	chars      = 1..64 bytes of printable UTF-8 without quotes or backslash;
//	             a doubled quote inside quotes is a quote (and then refused)
//	statement  = any text that is not blank and does not itself start with a
//	             Convoy directive; passed on byte for byte as Directive.Rest
//
// A targeting directive takes exactly one of shard=N, datasource=NAME and
// all. A command directive is the whole statement: only whitespace and one
// ";" may follow the comment.
//
// # What is not a directive
//
// Parse returns ok=false, and the statement goes down the SQL path, for:
// executable comments /*! ... */ and /*!50000 ... */ (they are SQL, routed and
// authorised as such), plain comments /* convoy ... */, optimizer hints whose
// first word is not convoy (/*+ BKA(t) */, /*+ convoyx */), and directives
// not at the start of the statement (after another comment, after "--" or
// "#" lines, or inside a statement).
//
// # Errors
//
// Once the statement starts with /*+ convoy, any problem is an *Error whose
// message is client-facing and short enough for MySQL's 512-byte error
// messages: an unterminated comment, a comment over 1 KiB, unknown commands
// (the message lists Usage), shard numbers outside 0..1023, unknown key
// columns, negative / non-integer / overflowing keys, bad names, text after a
// command directive, and a targeting directive with no statement.
//
// The comment ends at the first "*/", as it does for the server: a quoted
// name cannot contain "*/". Parse does work linear in the input and never
// looks further than 1 KiB into a comment.
package directive
