// Package merge combines the per-shard results of one cross-shard SELECT
// into the result a single MySQL server would have returned for the whole
// logical table.
//
// The engine rewrites the client's SELECT, sends it to every physical table
// in parallel and hands the go-mysql results to [Merge] with a [Spec] that
// says what the rewrite did. The merged *mysql.Result goes to the client
// through go-mysql's server package, which writes Fields and then each
// RowDatas packet raw; so Merge returns packets in the protocol of its
// inputs (text for COM_QUERY, binary for prepared statements), plus the
// decoded Values the go-mysql client would have produced for them. Rows
// that pass through unchanged are the input packets themselves; rows that
// are computed or lose hidden columns are re-encoded for their Field type.
// Inputs are never modified.
//
// # Pipeline
//
// Without aggregation or DISTINCT, Merge is a streaming k-way merge: each
// shard ran the same ORDER BY, so a heap over the head row of every shard
// yields the global order; only head rows are decoded, and the merge stops
// after OFFSET + LIMIT rows (the engine sends LIMIT o+n to every shard;
// Merge skips o and keeps n). Ties keep shard order. Without ORDER BY the
// shards are concatenated. HAVING, if given, filters rows before OFFSET.
//
// With GROUP BY or an aggregate, every row is folded into its group (the
// group key compares with the column's semantics, below): COUNT adds the
// shard counts, SUM adds exactly (DECIMAL and integers through math/big,
// DOUBLE in float64) and is NULL when every shard's SUM is NULL, MIN/MAX
// keep the best non-NULL value, plain columns keep the first row's value.
// AVG is rebuilt from hidden SUM and COUNT columns ([Avg]): for a DECIMAL
// output column SUM/COUNT is rounded half away from zero to Avg.Scale
// digits (the argument's scale + div_precision_increment, 4 by default),
// as MySQL's decimal division does; for a DOUBLE output it is a float
// division. COUNT / SUM / AVG(DISTINCT) are rebuilt from argument columns
// ([DistinctAgg]): every shard also grouped by the arguments, so each of
// its rows carries one argument value (tuple) of a group; Merge keeps the
// distinct non-NULL values per group, equal as the column compares (below:
// 'a' and 'A' are one value under a _ci collation), and counts, sums
// (exactly, as SUM) or averages them (as AVG). SUM and AVG(DISTINCT) need
// a numeric argument: MySQL de-duplicates a string argument as a number.
// An aggregate without GROUP BY always yields one row, even when
// no shard returned any (COUNT 0, the others NULL), as MySQL does on an
// empty table. Then come HAVING (on merged groups, seeing hidden columns
// too), DISTINCT over the visible columns, ORDER BY, OFFSET, LIMIT, and
// the hidden columns are dropped. Without ORDER BY, groups come out sorted
// by the GROUP BY key ascending: MariaDB (and MySQL before 8.0) sort
// grouped results implicitly, MySQL 8.0 returns them in an unspecified
// order, which this order satisfies too.
//
// A DISTINCT without aggregation dedupes on the visible columns (the first
// row seen wins; HAVING runs first), then orders and limits.
//
// # Comparison
//
// Values compare as MySQL compares them for the column's type, taken from
// the shard result's metadata: signed and UNSIGNED integers over their
// full range (BIGINT UNSIGNED up to 2^64-1), DECIMAL exactly on its decimal
// text, FLOAT/DOUBLE as float64, DATE/DATETIME/TIMESTAMP as calendar values
// (text and binary forms decoded), TIME as signed microseconds (negative
// and > 24h values included). NULL is the smallest value: first in ASC,
// last in DESC. Strings compare under the column's collation:
//
//   - binary (63), BIT, MariaDB *_nopad_bin and utf8mb4_0900_bin: bytewise;
//   - utf8mb4_bin, utf8mb3_bin, latin1_bin, ascii_bin: bytewise, PAD SPACE
//     (trailing spaces ignored);
//   - every other collation: utf8mb4_general_ci. Each character weighs as
//     its simple uppercase mapping, except for a table generated from
//     MariaDB's WEIGHT_STRING over the whole BMP (accented Latin, Greek and
//     Cyrillic letters weigh as their base letter: 'ä' = 'a', 'ß' = 's');
//     characters outside the BMP all weigh U+FFFD; PAD SPACE. Equal
//     weights are equal values ('Bob' and 'bob' are one group; whichever
//     spelling a shard returned first is shown).
//
// # Approximations and limits
//
//   - Collations other than the ones above are treated as
//     utf8mb4_general_ci: utf8mb4_unicode_ci, *_0900_ai_ci (NO PAD, UCA
//     expansions such as 'ß' = 'ss'), language-specific and non-UTF-8
//     collations (latin1_swedish_ci, gbk, ...) may order some characters
//     differently from the server. Invalid UTF-8 bytes weigh as U+FFFD.
//   - ENUM and SET sort by their index in the column definition, which a
//     result set does not carry; ORDER BY, MIN and MAX on them (and on
//     JSON, spatial and VECTOR columns) return ErrUnsupported. GROUP BY and
//     DISTINCT on them compare bytes.
//   - DOUBLE sums are added in shard order, so the last bits can differ
//     from a single server's sum. A computed DOUBLE without fixed decimals
//     is printed (text protocol) with the shortest round-trip digits,
//     positional for exponents in [-15, 15) and as 1.5e20 otherwise, which
//     matches MariaDB 10.11 on the values tested; MySQL may differ in
//     digits, never in the value a client decodes.
//   - Floating-point text values parse with strconv; NaN is rejected.
//   - HAVING is a callback the engine builds; Merge only applies it.
//
// # Errors and memory
//
// Malformed input (inconsistent shard metadata, truncated or overlong row
// packets, bad lengths, dates or numbers, spec indexes out of range)
// returns an error wrapping ErrMalformed, never a panic; Merge does its own
// bounds-checked decoding rather than go-mysql's RowData.Parse, which
// indexes past short packets. Spec.MaxRows caps the rows held at once: the
// input rows of all shards (they are in memory already) plus the groups or
// distinct rows Merge builds; exceeding it returns ErrTooManyRows. The
// streaming path holds one decoded head row per shard and nothing else.
package merge
