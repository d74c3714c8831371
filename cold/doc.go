// Package cold is the cold tier of conversation history (docs/design.md §9;
// seed 000: 冷热分离): conv_msg rows older than the warm window, with their
// msg_content bodies, in immutable Parquet files in object storage, read
// back page by page within a time budget. This package is the foundation:
// storage, file format, verification, catalog types and the reader. The
// archiver job (moving rows out of MySQL) and the engine's cold read path
// are built on it and described at the end.
//
// # Storage
//
// Store is the whole contract with object storage: PutIfAbsent, ReadRange,
// Size. OpenStore takes a URL: file:///dir (default, zero set-up) or
// s3://bucket?endpoint=...&use_path_style=true&access_key_id=...&
// secret_access_key=... for S3, MinIO, Ceph RGW or OSS's S3 API
// (gocloud.dev/blob, only the fileblob and s3blob drivers are linked).
// Objects are written create-if-absent (If-None-Match: *): a rerun of the
// same part finds the object, compares the SHA-256 kept in the object's
// metadata with its own bytes and succeeds if equal; different bytes under
// the key are ErrConflict and never overwrite. The Writer is deterministic
// (same rows and options, same bytes), which is what makes a crashed
// archive step safe to redo.
//
// # Layout
//
// One file holds the archived rows of one logical shard and one UTC day of
// created_at, split into parts of bounded size:
//
//	<prefix>/<shard %04d>/<yyyymmdd>/part-<n %04d>.parquet   (ObjectKey)
//
// (the logical shard, not the physical table: several shards may share a
// table in small layouts, and a shard's files must stay its own when a
// migration moves it).
//
// # Format (version 1)
//
// One Parquet row per conv_msg row, sorted by (conv_id, seq), zstd:
//
//   - conv_id, seq, msg_id: INT64 with the UINT_64 logical type,
//     DELTA_BINARY_PACKED, required. They exist for pruning: the page index
//     (column index min/max + offset index) of conv_id locates a
//     conversation's rows without reading data pages; msg_id has a bloom
//     filter for lookups by msg_id alone.
//   - m_<column> for every conv_msg column and c_<column> for every
//     msg_content column: optional BYTE_ARRAY holding the column's MySQL
//     text-protocol value, byte for byte as the server sent it (NULL is a
//     Parquet null, the empty string an empty value). A message without a body row has
//     every c_ column null (msg_content.msg_id is NOT NULL, so this is
//     unambiguous; the Writer refuses an all-NULL body).
//   - key-value metadata: convoy.cold.version ("1"), convoy.cold.columns
//     (JSON of Tables: for both tables the column definitions MySQL sent:
//     name, type, flags, charset, decimals, length), convoy.cold.shard,
//     convoy.cold.day, convoy.cold.rows and convoy.cold.digest.
//
// An inbox file (Tables.Inbox: seed 001's read im_inbox rows,
// docs/design.md §9) has the same layout for one table: uid, conv_id, seq
// typed (the row order) and i_<column> text values for every im_inbox column;
// nothing reads it by key, ScanFile reads it back (InboxObjectKey: inbox-<n>
// next to the day's history parts).
//
// Why text values and not typed columns: the cold tier must return exactly
// what MySQL returned (same columns, types, values). The text value plus the
// column definition determines both protocols: the text protocol sends it
// as is, the binary protocol's encoding follows from the type (integers
// from the decimal text and the UNSIGNED flag, DATETIME(3) from its text,
// strings as is). Typed Parquet columns would need one conversion per MySQL
// type in each direction and can lose the server's exact formatting; zstd
// takes most of the cost of the decimal text away (see BENCHMARKS.md).
// The redundancy of the three key columns (typed and as text) is the price
// of keeping every m_ column the server's bytes.
//
// Row groups default to 4096 rows and data pages to 16 KiB uncompressed:
// a 20-50 message page of one conversation decodes one or two pages per
// column.
//
// # Verification
//
// Digest is COUNT, SUM(CRC32) and the XOR of 64 bits of MD5 over an
// unambiguous encoding of each row (the same scheme as migrate's segment
// checksum, computed in Go over the text values). The Writer computes it
// from the rows the archiver read from MySQL; Verify reads the stored
// object back, decodes every row and recomputes it, and also compares the
// per-conversation ranges and the file's own metadata. A file is
// catalogued only after Verify passed.
//
// # Catalog
//
// FileInfo is what the archiver records per file: key, shard, day, bytes,
// Digest and, per conversation, [MinSeq, MaxSeq], [MinMsgID, MaxMsgID] and
// a row count. Catalog
// is the one question a read asks ("which files hold conversation c", with
// seq ranges); MemCatalog answers it from memory. Files of one
// conversation may overlap in seq (a day boundary); the reader does not
// assume they do not.
//
// # Reader
//
// Reader serves the three history reads of docs/design.md §4 from cold
// files: Before (seq < ? DESC LIMIT n), After (seq > ? ASC LIMIT n) and
// ByMsgID (conv_id = ? AND msg_id = ?), and ByKeys (rows by msg_id or seq
// in batches: message bodies, writes checking what is archived; only the
// files whose ranges hold a key are opened, a few at a time). Per file: the footer and page index
// are read once and cached (files are immutable; LRU of open files); the
// conv_id page index gives the conversation's row span in each row group,
// and the seq page index narrows it where pages hold only that
// conversation (seq ascends there), down to the pages near the cursor; the
// key columns of that span are fetched, the rows chosen, then the value
// columns of just those rows. Each fetch is the byte ranges of the
// needed pages, merged when closer than 64 KiB and read in parallel: about
// three range reads per page with a warm cache.
//
// The context's deadline is the cold budget (seed: 800 ms, 取到多少返回多少并
// 带上 has_more). When it expires, Reader returns what is certain (the rows
// better than anything an unread file could still contribute, a correct
// prefix of the answer in query order) with Page.More set and
// Page.Frontier saying where certainty ends, never an error.
// Any other storage failure is an error; what to do with it is the
// caller's policy.
//
// # Invariants
//
//  1. An object, once written under a key, never changes (create-if-absent,
//     ErrConflict otherwise).
//  2. A catalogued file was verified from storage against the rows read from
//     MySQL.
//  3. A page is a prefix of what MySQL returned for the same query before
//     the archive ran: all of it, or (More) the part that arrived in time.
//
// # The archiver and the persistent catalog
//
// Package archive: one job per shard (a lease and a checkpoint in etcd)
// writes, verifies and catalogues the files, deletes the warm rows after
// cold.delete_after, and provides the proxies' Catalog. Its FileRanges
// carry Skip: rows edited or deleted by users after archiving, which a
// read treats as absent from the file.
//
// # The engine's cold read path
//
// proxy/engine/cold.go (behind its ColdTier interface; cmd/convoy adapts
// archive.Catalog and this Reader): a history read whose page MySQL alone
// cannot answer (it runs below the warm rows, or a seq is missing inside
// the conversation's archived range) calls the Reader with the page's
// limit and the tombstones as extra skips under a cold.budget context,
// merges the rows warm-first in the client's protocol with MySQL's column
// definitions, and signals More with warning 1931 naming the seq to
// continue from. First screens never get here (see the README).
package cold
