package directive

import (
	"errors"
	"strings"
	"testing"

	"github.com/convoy-im/convoy/router"
)

func TestParse(t *testing.T) {
	shard42 := int(router.ShardOf(42))
	shard7 := int(router.ShardOf(7))
	maxKey := int(router.ShardOf(18446744073709551615))

	type want struct {
		kind   Kind
		shard  int
		ds     string
		col    string
		key    uint64
		all    bool
		rest   string
		notDir bool   // ok=false expected
		err    string // substring of the error; "" means no error
	}
	tests := []struct {
		name string
		sql  string
		want want
	}{
		// Commands.
		{"show routes", "/*+ convoy SHOW ROUTES */", want{kind: ShowRoutes, shard: -1}},
		{"show routes lower", "/*+ convoy show routes */", want{kind: ShowRoutes, shard: -1}},
		{"show routes mixed case", "/*+ CoNvOy ShOw RoUtEs */", want{kind: ShowRoutes, shard: -1}},
		{"no spaces", "/*+convoy SHOW ROUTES*/", want{kind: ShowRoutes, shard: -1}},
		{"leading whitespace and newlines", " \t\r\n/*+\n convoy\n\tSHOW\n  ROUTES\n*/\n", want{kind: ShowRoutes, shard: -1}},
		{"semicolon", "/*+ convoy SHOW ROUTES */;", want{kind: ShowRoutes, shard: -1}},
		{"semicolon and spaces", "/*+ convoy SHOW ROUTES */ ; \n", want{kind: ShowRoutes, shard: -1}},
		{"routes where shard", "/*+ convoy SHOW ROUTES WHERE shard = 441 */", want{kind: ShowRoutes, shard: 441}},
		{"routes where shard tight", "/*+ convoy show routes where SHARD=441 */", want{kind: ShowRoutes, shard: 441}},
		{"routes where shard leading zeros", "/*+ convoy SHOW ROUTES WHERE shard = 0441 */", want{kind: ShowRoutes, shard: 441}},
		{"routes where shard 0", "/*+ convoy SHOW ROUTES WHERE shard = 0 */", want{kind: ShowRoutes, shard: 0}},
		{"routes where shard 1023", "/*+ convoy SHOW ROUTES WHERE shard = 1023 */", want{kind: ShowRoutes, shard: 1023}},
		{"routes where datasource quoted", "/*+ convoy SHOW ROUTES WHERE datasource = 'ds1' */", want{kind: ShowRoutes, shard: -1, ds: "ds1"}},
		{"routes where datasource bare", "/*+ convoy SHOW ROUTES WHERE DATASOURCE = ds1 */", want{kind: ShowRoutes, shard: -1, ds: "ds1"}},
		{"routes where datasource backticks", "/*+ convoy SHOW ROUTES WHERE datasource = `ds-east.1` */", want{kind: ShowRoutes, shard: -1, ds: "ds-east.1"}},
		{"routes where datasource unicode", "/*+ convoy SHOW ROUTES WHERE datasource = 'büro' */", want{kind: ShowRoutes, shard: -1, ds: "büro"}},
		{"shard for conv_id", "/*+ convoy SHOW SHARD FOR conv_id = 42 */", want{kind: ShowShardFor, shard: shard42, col: "conv_id", key: 42}},
		{"shard for uid", "/*+ convoy SHOW SHARD FOR uid = 7 */", want{kind: ShowShardFor, shard: shard7, col: "uid", key: 7}},
		{"shard for upper col", "/*+ convoy show shard for CONV_ID=42 */", want{kind: ShowShardFor, shard: shard42, col: "conv_id", key: 42}},
		{"shard for backtick col", "/*+ convoy SHOW SHARD FOR `uid` = 7 */", want{kind: ShowShardFor, shard: shard7, col: "uid", key: 7}},
		{"shard for max key", "/*+ convoy SHOW SHARD FOR uid = 18446744073709551615 */", want{kind: ShowShardFor, shard: maxKey, col: "uid", key: 18446744073709551615}},
		{"shard for zero-padded key", "/*+ convoy SHOW SHARD FOR uid = 007 */", want{kind: ShowShardFor, shard: shard7, col: "uid", key: 7}},
		{"datasources", "/*+ convoy SHOW DATASOURCES */", want{kind: ShowDatasources, shard: -1}},
		{"proxies", "/*+ convoy show proxies */;", want{kind: ShowProxies, shard: -1}},
		{"reload", "/*+ convoy RELOAD ROUTES */", want{kind: ReloadRoutes, shard: -1}},
		{"stats", "/*+ convoy SHOW SHARD STATS */", want{kind: ShowShardStats, shard: -1}},
		{"stats where", "/*+ convoy SHOW SHARD STATS WHERE shard = 5 */", want{kind: ShowShardStats, shard: 5}},
		{"health", "/*+ convoy SHOW SHARD HEALTH */", want{kind: ShowShardHealth, shard: -1}},
		{"health all", "/*+ convoy SHOW SHARD HEALTH ALL */", want{kind: ShowShardHealth, shard: -1, all: true}},
		{"health all lower", "/*+ convoy show shard health all */;", want{kind: ShowShardHealth, shard: -1, all: true}},
		{"migrations", "/*+ convoy SHOW MIGRATIONS */", want{kind: ShowMigrations, shard: -1}},
		{"one migration", "/*+ convoy show migration 441 */", want{kind: ShowMigration, shard: 441}},
		{"migrate", "/*+ convoy MIGRATE SHARD 441 TO ds2 */", want{kind: MigrateShard, shard: 441, ds: "ds2"}},
		{"migrate quoted", "/*+ convoy migrate shard 441 to 'ds2' */", want{kind: MigrateShard, shard: 441, ds: "ds2"}},

		// Targeting.
		{"target shard", "/*+ convoy shard=441 */ SELECT COUNT(*) FROM conv_msg",
			want{kind: Target, shard: 441, rest: " SELECT COUNT(*) FROM conv_msg"}},
		{"target shard spaced upper", "/*+ CONVOY SHARD = 441 */SELECT 1;",
			want{kind: Target, shard: 441, rest: "SELECT 1;"}},
		{"target datasource", "/*+ convoy datasource=ds1 */ SHOW PROCESSLIST",
			want{kind: Target, shard: -1, ds: "ds1", rest: " SHOW PROCESSLIST"}},
		{"target datasource quoted", "/*+ convoy datasource = 'ds1' */\nSELECT 1",
			want{kind: Target, shard: -1, ds: "ds1", rest: "\nSELECT 1"}},
		{"target all", "/*+ convoy all */ DELETE FROM conv_msg WHERE created_at < '2020-01-01'",
			want{kind: Target, shard: -1, all: true, rest: " DELETE FROM conv_msg WHERE created_at < '2020-01-01'"}},
		{"target rest byte-identical", "/*+ convoy shard=1 */  /* c */ SELECT '*/ /*+ convoy all */', `x` -- y\n FROM t # z\n;",
			want{kind: Target, shard: 1, rest: "  /* c */ SELECT '*/ /*+ convoy all */', `x` -- y\n FROM t # z\n;"}},
		{"target rest executable comment", "/*+ convoy shard=2 */ /*!50000 SELECT 1 */",
			want{kind: Target, shard: 2, rest: " /*!50000 SELECT 1 */"}},
		{"target rest non-utf8", "/*+ convoy shard=3 */ SELECT '\xff\xfe'",
			want{kind: Target, shard: 3, rest: " SELECT '\xff\xfe'"}},

		// Not directives.
		{"plain sql", "SELECT 1", want{notDir: true}},
		{"empty", "", want{notDir: true}},
		{"whitespace", "   \n", want{notDir: true}},
		{"executable comment", "/*! convoy SHOW ROUTES */", want{notDir: true}},
		{"versioned executable comment", "/*!50000 convoy SHOW ROUTES */", want{notDir: true}},
		{"executable plus", "/*!+ convoy SHOW ROUTES */", want{notDir: true}},
		{"plain comment", "/* convoy SHOW ROUTES */", want{notDir: true}},
		{"plain comment plus later", "/* +convoy SHOW ROUTES */", want{notDir: true}},
		{"other hint", "/*+ BKA(t1) */ SELECT 1", want{notDir: true}},
		{"hint convoyx", "/*+ convoyx SHOW ROUTES */", want{notDir: true}},
		{"hint convoy_", "/*+ convoy_ SHOW ROUTES */", want{notDir: true}},
		{"hint prefix", "/*+ conv SHOW ROUTES */", want{notDir: true}},
		{"empty hint", "/*+*/ SELECT 1", want{notDir: true}},
		{"truncated hint", "/*+", want{notDir: true}},
		{"truncated hint word", "/*+ conv", want{notDir: true}},
		{"after another comment", "/* app */ /*+ convoy SHOW ROUTES */", want{notDir: true}},
		{"after line comment", "-- x\n/*+ convoy SHOW ROUTES */", want{notDir: true}},
		{"inside statement", "SELECT /*+ convoy all */ 1", want{notDir: true}},

		// Malformed directives.
		{"unterminated", "/*+ convoy SHOW ROUTES", want{err: "unterminated"}},
		{"unterminated bare", "/*+ convoy", want{err: "unterminated"}},
		{"unterminated star", "/*+ convoy SHOW ROUTES *", want{err: "unterminated"}},
		{"too long", "/*+ convoy SHOW ROUTES " + strings.Repeat(" ", 2000) + "*/", want{err: "longer than"}},
		{"empty directive", "/*+ convoy */", want{err: "empty directive"}},
		{"unknown command", "/*+ convoy FROB */", want{err: "unknown directive FROB; valid directives"}},
		{"unknown show", "/*+ convoy SHOW TABLES */", want{err: "unknown directive SHOW TABLES; valid"}},
		{"unknown show shard", "/*+ convoy SHOW SHARD 5 */", want{err: "unknown directive SHOW SHARD 5; valid"}},
		{"show alone", "/*+ convoy SHOW */", want{err: "incomplete directive SHOW; valid directives"}},
		{"show shard alone", "/*+ convoy SHOW SHARD */", want{err: "incomplete directive SHOW SHARD; valid directives"}},
		{"reload other", "/*+ convoy RELOAD CONFIG */", want{err: "unknown directive RELOAD CONFIG"}},
		{"convoy then punct", "/*+ convoy=1 */", want{err: "unknown directive \"=\""}},
		{"shard 1024", "/*+ convoy SHOW ROUTES WHERE shard = 1024 */", want{err: `shard "1024" is not a shard number 0..1023`}},
		{"shard huge", "/*+ convoy shard=99999999999999999999999 */ SELECT 1", want{err: "is not a shard number"}},
		{"shard -1", "/*+ convoy shard=-1 */ SELECT 1", want{err: `shard "-1" is not a shard number`}},
		{"shard quoted", "/*+ convoy shard='x' */ SELECT 1", want{err: `shard "'x'" is not a shard number`}},
		{"shard quoted number", "/*+ convoy shard='4' */ SELECT 1", want{err: "is not a shard number"}},
		{"shard word", "/*+ convoy shard=x */ SELECT 1", want{err: `shard "x" is not a shard number`}},
		{"shard hex", "/*+ convoy shard=0x1F */ SELECT 1", want{err: "is not a shard number"}},
		{"shard fraction", "/*+ convoy shard=1.5 */ SELECT 1", want{err: `shard "1." is not a shard number`}},
		{"shard missing", "/*+ convoy shard= */ SELECT 1", want{err: "expected a shard number, got end of directive"}},
		{"shard no equals", "/*+ convoy shard 4 */ SELECT 1", want{err: "expected =, got \"4\""}},
		{"stats shard 1024", "/*+ convoy SHOW SHARD STATS WHERE shard = 1024 */", want{err: "is not a shard number"}},
		{"stats where datasource", "/*+ convoy SHOW SHARD STATS WHERE datasource = ds1 */", want{err: "expected SHARD"}},
		{"migrate bad shard", "/*+ convoy MIGRATE SHARD 2000 TO ds2 */", want{err: "is not a shard number"}},
		{"migrate no to", "/*+ convoy MIGRATE SHARD 1 ds2 */", want{err: "expected TO"}},
		{"migrate no name", "/*+ convoy MIGRATE SHARD 1 TO */", want{err: "expected a datasource name"}},
		{"routes bad filter", "/*+ convoy SHOW ROUTES WHERE table = x */", want{err: "filter by shard or datasource"}},
		{"routes trailing", "/*+ convoy SHOW ROUTES WHERE shard = 1 AND datasource = ds1 */", want{err: `unexpected "AND"`}},
		{"bad column", "/*+ convoy SHOW SHARD FOR msg_id = 1 */", want{err: `column "msg_id" is not a shard key column; valid: conv_id, uid`}},
		{"string column", "/*+ convoy SHOW SHARD FOR 'uid' = 1 */", want{err: "expected a shard key column"}},
		{"negative key", "/*+ convoy SHOW SHARD FOR uid = -5 */", want{err: "negative"}},
		{"overflowing key", "/*+ convoy SHOW SHARD FOR uid = 18446744073709551616 */", want{err: "overflows BIGINT UNSIGNED"}},
		{"float key", "/*+ convoy SHOW SHARD FOR uid = 1e3 */", want{err: "not an integer"}},
		{"fraction key", "/*+ convoy SHOW SHARD FOR uid = 1.5 */", want{err: `shard key "1." is not an integer`}},
		{"quoted key", "/*+ convoy SHOW SHARD FOR uid = '7' */", want{err: "unquoted decimal integer"}},
		{"missing key", "/*+ convoy SHOW SHARD FOR uid = */", want{err: "expected a key"}},
		{"empty quoted name", "/*+ convoy datasource='' */ SELECT 1", want{err: "empty datasource name"}},
		{"unterminated quoted name", "/*+ convoy datasource='ds1 */ SELECT 1", want{err: "unterminated quoted name"}},
		{"name with quote", "/*+ convoy datasource='d''s' */ SELECT 1", want{err: "must not contain quotes"}},
		{"name with backslash", "/*+ convoy datasource='d\\s' */ SELECT 1", want{err: "must not contain quotes"}},
		{"name with control", "/*+ convoy datasource='d\x00s' */ SELECT 1", want{err: "control characters"}},
		{"name bad utf8", "/*+ convoy datasource='d\xffs' */ SELECT 1", want{err: "not valid UTF-8"}},
		{"name too long", "/*+ convoy datasource=" + strings.Repeat("a", 65) + " */ SELECT 1", want{err: "longer than 64"}},
		{"name star-slash ends comment", "/*+ convoy datasource='a*/b' */ SELECT 1", want{err: "unterminated quoted name"}},
		{"target no statement", "/*+ convoy shard=441 */", want{err: "shard=441 must be followed by a statement"}},
		{"target only semicolon", "/*+ convoy all */ ; ", want{err: "all must be followed by a statement"}},
		{"target nested", "/*+ convoy shard=1 */ /*+ convoy all */ DELETE FROM conv_msg", want{err: "not another convoy directive"}},
		{"target combined", "/*+ convoy shard=1 datasource=ds1 */ SELECT 1", want{err: "exactly one of"}},
		{"target combined all", "/*+ convoy all shard=1 */ SELECT 1", want{err: "exactly one of"}},
		{"target comma", "/*+ convoy shard=1, all */ SELECT 1", want{err: "exactly one of"}},
		{"command then sql", "/*+ convoy SHOW ROUTES */ SELECT 1", want{err: `SHOW ROUTES must be the whole statement; unexpected "SELECT 1"`}},
		{"command then second statement", "/*+ convoy RELOAD ROUTES */; DROP TABLE t", want{err: "must be the whole statement"}},
		{"command two semicolons", "/*+ convoy SHOW PROXIES */;;", want{err: "must be the whole statement"}},
		{"semicolon inside", "/*+ convoy SHOW ROUTES; */", want{err: `unexpected ";"`}},
		{"trailing word", "/*+ convoy SHOW DATASOURCES NOW */", want{err: `unexpected "NOW"`}},
		{"health other word", "/*+ convoy SHOW SHARD HEALTH FIRED */", want{err: `unexpected "FIRED" (syntax: SHOW SHARD HEALTH [ALL])`}},
		{"health all twice", "/*+ convoy SHOW SHARD HEALTH ALL ALL */", want{err: `unexpected "ALL"`}},
		{"health where", "/*+ convoy SHOW SHARD HEALTH WHERE shard = 1 */", want{err: `unexpected "WHERE"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, ok, err := Parse(tc.sql)
			w := tc.want
			if w.notDir {
				if ok || err != nil || d != nil {
					t.Fatalf("Parse(%q) = %+v, %v, %v; want not a directive", tc.sql, d, ok, err)
				}
				return
			}
			if !ok {
				t.Fatalf("Parse(%q): ok=false, want a directive", tc.sql)
			}
			if w.err != "" {
				if err == nil {
					t.Fatalf("Parse(%q) = %+v, want error containing %q", tc.sql, d, w.err)
				}
				var de *Error
				if !errors.As(err, &de) {
					t.Fatalf("error %T is not *Error", err)
				}
				if !strings.Contains(err.Error(), w.err) {
					t.Fatalf("Parse(%q) error %q, want it to contain %q", tc.sql, err, w.err)
				}
				if len(err.Error()) > 512 {
					t.Fatalf("error is %d bytes, over MySQL's 512", len(err.Error()))
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.sql, err)
			}
			got := want{kind: d.Kind, shard: d.Shard, ds: d.Datasource, col: d.KeyColumn, key: d.Key, all: d.All, rest: d.Rest}
			if got != w {
				t.Fatalf("Parse(%q) = %+v, want %+v", tc.sql, got, w)
			}
			if d.Kind == Target && !strings.HasSuffix(tc.sql, d.Rest) {
				t.Fatalf("Rest %q is not a suffix of the input", d.Rest)
			}
		})
	}
}

func TestUnknownListsUsage(t *testing.T) {
	for _, sql := range []string{
		"/*+ convoy FROB */",
		"/*+ convoy SHOW " + strings.Repeat("X", 900) + " */",
		"/*+ convoy SHOW SHARD " + strings.Repeat("\xff", 900) + " */",
		"/*+ convoy " + strings.Repeat("é", 400) + " */",
	} {
		_, ok, err := Parse(sql)
		if !ok || err == nil {
			t.Fatalf("Parse(%.40q): ok=%v err=%v", sql, ok, err)
		}
		msg := err.Error()
		if !strings.Contains(msg, Usage()) {
			t.Errorf("error %q does not list the valid directives", msg)
		}
		if len(msg) > 512 {
			t.Errorf("error is %d bytes, over MySQL's 512: %q", len(msg), msg)
		}
	}
	for _, word := range []string{"SHOW ROUTES", "SHOW SHARD FOR", "conv_id", "uid", "SHOW SHARD {STATS",
		"HEALTH [ALL]", "SIZES}", "PLAN EXPANSION", "SHOW DATASOURCES", "SHOW PROXIES", "SHOW MIGRATIONS", "SEARCH STATUS", "RELOAD ROUTES",
		"MIGRATE SHARD", "shard=N", "datasource=NAME", "all"} {
		if !strings.Contains(Usage(), word) {
			t.Errorf("Usage() lacks %q", word)
		}
	}
}

func TestKindString(t *testing.T) {
	for k := ShowRoutes; k <= Target; k++ {
		if s := k.String(); s == "" || strings.HasPrefix(s, "Kind(") {
			t.Errorf("Kind %d has no name", int(k))
		}
	}
	if got := Kind(0).String(); got != "Kind(0)" {
		t.Errorf("Kind(0).String() = %q", got)
	}
	if got := Kind(99).String(); got != "Kind(99)" {
		t.Errorf("Kind(99).String() = %q", got)
	}
}

// TestLargeInputs checks that 16 MiB statements are handled without reading
// the comment past its bound and with a Rest that is the input's suffix.
func TestLargeInputs(t *testing.T) {
	big := strings.Repeat("x", 16<<20)
	d, ok, err := Parse("/*+ convoy shard=7 */ SELECT '" + big + "'")
	if !ok || err != nil || d.Shard != 7 || len(d.Rest) != len(big)+10 {
		t.Fatalf("big target: ok=%v err=%v", ok, err)
	}
	if _, ok, err := Parse("/*+ convoy SHOW ROUTES WHERE datasource = '" + big); !ok || err == nil || len(err.Error()) > 512 {
		t.Fatalf("big unterminated: ok=%v err=%v", ok, err)
	}
	if _, ok, err := Parse(strings.Repeat(" ", 16<<20)); ok || err != nil {
		t.Fatalf("whitespace: ok=%v err=%v", ok, err)
	}
	if _, ok, err := Parse("/*+ convoy SHOW ROUTES */" + strings.Repeat(" ", 16<<20) + ";"); !ok || err != nil {
		t.Fatalf("trailing whitespace: ok=%v err=%v", ok, err)
	}
	if _, ok, err := Parse("/*+ convoy all */" + strings.Repeat("\n", 16<<20)); !ok || err == nil {
		t.Fatalf("blank rest: ok=%v err=%v", ok, err)
	}
}

// TestParseMigrate covers the migration directives' options and their
// errors.
func TestParseMigrate(t *testing.T) {
	type want struct {
		kind         Kind
		shard, last  int
		ds, db, verb string
		rate         int64
		parallel     int
		auto         bool
	}
	ok := []struct {
		sql  string
		want want
	}{
		{"/*+ convoy MIGRATE SHARD 441 TO ds2 */", want{MigrateShard, 441, 441, "ds2", "", "", -1, 0, false}},
		{"/*+ convoy MIGRATE SHARD 441 TO ds2 DATABASE im_9 RATE 2000 */", want{MigrateShard, 441, 441, "ds2", "im_9", "", 2000, 0, false}},
		{"/*+ convoy migrate shard 441 to `ds2` rate 0 database 'im 9' auto */", want{MigrateShard, 441, 441, "ds2", "im 9", "", 0, 0, true}},
		{"/*+ convoy MIGRATE SHARDS 512-1023 TO ds2 PARALLEL 4 */", want{MigrateShard, 512, 1023, "ds2", "", "", -1, 4, false}},
		{"/*+ convoy MIGRATE SHARDS 7 - 7 TO ds2 */", want{MigrateShard, 7, 7, "ds2", "", "", -1, 0, false}},
		{"/*+ convoy MIGRATION 441 PAUSE */", want{MigrationCommand, 441, -1, "", "", "PAUSE", -1, 0, false}},
		{"/*+ convoy migration 0441 next */;", want{MigrationCommand, 441, -1, "", "", "NEXT", -1, 0, false}},
		{"/*+ convoy MIGRATION 1 RATE 500 */", want{MigrationCommand, 1, -1, "", "", "RATE", 500, 0, false}},
		{"/*+ convoy MIGRATION 1 ROLLBACK */", want{MigrationCommand, 1, -1, "", "", "ROLLBACK", -1, 0, false}},
		{"/*+ convoy MIGRATION 1 CANCEL */", want{MigrationCommand, 1, -1, "", "", "CANCEL", -1, 0, false}},
		{"/*+ convoy MIGRATION 1 RESUME */", want{MigrationCommand, 1, -1, "", "", "RESUME", -1, 0, false}},
		{"/*+ convoy MIGRATION 1 PURGE */", want{MigrationCommand, 1, -1, "", "", "PURGE", -1, 0, false}},
	}
	for _, tc := range ok {
		d, isDir, err := Parse(tc.sql)
		if !isDir || err != nil {
			t.Fatalf("Parse(%q) = %v, %v", tc.sql, isDir, err)
		}
		got := want{d.Kind, d.Shard, d.LastShard, d.Datasource, d.Database, d.Verb, d.Rate, d.Parallel, d.Auto}
		if got != tc.want {
			t.Errorf("Parse(%q) = %+v, want %+v", tc.sql, got, tc.want)
		}
	}
	bad := []struct{ sql, err string }{
		{"/*+ convoy MIGRATE SHARDS 10-5 TO ds2 */", "shard range 10-5 ends before it starts"},
		{"/*+ convoy MIGRATE SHARDS 10 TO ds2 */", "expected - between the first and the last shard"},
		{"/*+ convoy MIGRATE SHARDS 10-1024 TO ds2 */", "is not a shard number"},
		{"/*+ convoy MIGRATE SHARD 1 TO ds2 PARALLEL 4 */", `unexpected "PARALLEL"`},
		{"/*+ convoy MIGRATE SHARD 1 TO ds2 RATE 10 RATE 20 */", "RATE given twice"},
		{"/*+ convoy MIGRATE SHARD 1 TO ds2 RATE -5 */", "RATE takes a whole number"},
		{"/*+ convoy MIGRATE SHARD 1 TO ds2 RATE 1.5 */", "is not a whole number"},
		{"/*+ convoy MIGRATE SHARD 1 TO ds2 RATE 99999999999 */", "is outside 0..1000000000"},
		{"/*+ convoy MIGRATE SHARDS 1-2 TO ds2 PARALLEL 0 */", "is outside 1..1024"},
		{"/*+ convoy MIGRATE SHARD 1 TO ds2 DATABASE */", "expected a database name"},
		{"/*+ convoy MIGRATE SHARD 1 TO ds2 DATABASE 'a`b' */", "database name"},
		{"/*+ convoy MIGRATE TABLE 1 TO ds2 */", "unknown directive MIGRATE TABLE"},
		{"/*+ convoy MIGRATION 1 */", "expected PAUSE, RESUME, NEXT, ROLLBACK, CANCEL, RATE, READ PERCENT or PURGE, got end of directive"},
		{"/*+ convoy MIGRATION 1 READ 10 */", "READ takes PERCENT P"},
		{"/*+ convoy PLAN EXPANSION TO 0 DATASOURCES */", "is outside 1..1024"},
		{"/*+ convoy PLAN EXPANSION TO 16 */", "expected DATASOURCES"},
		{"/*+ convoy PLAN EXPANSIONS */", "unknown directive PLAN"},
		{"/*+ convoy MIGRATION 1 READ PERCENT 101 */", "is outside 0..100"},
		{"/*+ convoy MIGRATION 1 READ PERCENT */", "PERCENT takes a whole number"},
		{"/*+ convoy MIGRATION 1 STOP */", `got "STOP"`},
		{"/*+ convoy MIGRATION 1 RATE */", "RATE takes a whole number"},
		{"/*+ convoy MIGRATION 1 NEXT NOW */", `unexpected "NOW"`},
		{"/*+ convoy MIGRATION 4096 NEXT */", "is not a shard number"},
	}
	for sql, n := range map[string]int{"/*+ convoy PLAN EXPANSION */": 0, "/*+ convoy plan expansion to 16 datasources */": 16} {
		d, _, err := Parse(sql)
		if err != nil || d.Kind != PlanExpansion || d.MinDatasources != n {
			t.Errorf("Parse(%q) = %+v, %v", sql, d, err)
		}
	}
	if d, _, err := Parse("/*+ convoy SHOW SHARD SIZES */"); err != nil || d.Kind != ShowShardSizes {
		t.Errorf("SHOW SHARD SIZES: %+v, %v", d, err)
	}
	for sql, pct := range map[string]int64{"/*+ convoy MIGRATION 441 READ PERCENT 10 */": 10, "/*+ convoy migration 441 read percent 0 */": 0} {
		d, _, err := Parse(sql)
		if err != nil || d.Kind != MigrationCommand || d.Verb != "READ" || d.Percent != pct || d.Shard != 441 {
			t.Errorf("Parse(%q) = %+v, %v", sql, d, err)
		}
	}
	for _, tc := range bad {
		_, isDir, err := Parse(tc.sql)
		if !isDir || err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("Parse(%q) = %v, %v; want an error containing %q", tc.sql, isDir, err, tc.err)
		}
		if err != nil && len(err.Error()) > 512 {
			t.Errorf("Parse(%q): error is %d bytes, over MySQL's 512", tc.sql, len(err.Error()))
		}
	}
}

func TestParseArchive(t *testing.T) {
	for sql, want := range map[string]Directive{
		"/*+ convoy SHOW ARCHIVE */":           {Kind: ShowArchive, Shard: -1},
		"/*+ convoy SHOW SEARCH STATUS */":     {Kind: ShowSearchStatus, Shard: -1},
		"/*+ convoy show archive */":           {Kind: ShowArchive, Shard: -1},
		"/*+ convoy ARCHIVE SHARD 441 NOW */":  {Kind: ArchiveCommand, Shard: 441, Verb: "NOW"},
		"/*+ convoy archive shard 0007 now */": {Kind: ArchiveCommand, Shard: 7, Verb: "NOW"},
		"/*+ convoy ARCHIVE PAUSE */":          {Kind: ArchiveCommand, Shard: -1, Verb: "PAUSE"},
		"/*+ convoy archive resume */":         {Kind: ArchiveCommand, Shard: -1, Verb: "RESUME"},
	} {
		d, ok, err := Parse(sql)
		if !ok || err != nil || d.Kind != want.Kind || d.Shard != want.Shard || d.Verb != want.Verb {
			t.Errorf("Parse(%q) = %+v, %v, %v; want %+v", sql, d, ok, err, want)
		}
	}
	for sql, msg := range map[string]string{
		"/*+ convoy ARCHIVE */":                "expected SHARD N NOW, PAUSE or RESUME, got end of directive",
		"/*+ convoy ARCHIVE SHARD 1024 NOW */": "is not a shard number",
		"/*+ convoy ARCHIVE SHARD 12 */":       "ARCHIVE SHARD N takes NOW",
		"/*+ convoy ARCHIVE SHARD 12 LATER */": "ARCHIVE SHARD N takes NOW",
		"/*+ convoy ARCHIVE PAUSE 3 */":        `unexpected "3"`,
		"/*+ convoy ARCHIVE SHARD -1 NOW */":   "is not a shard number",
		"/*+ convoy SHOW ARCHIVES */":          "unknown directive SHOW",
		"/*+ convoy SHOW ARCHIVE WHERE x */":   "unexpected",
		"/*+ convoy ARCHIVE NOW */":            "expected SHARD N NOW",
	} {
		_, ok, err := Parse(sql)
		if !ok || err == nil || !strings.Contains(err.Error(), msg) || len(err.Error()) > 512 {
			t.Errorf("Parse(%q) = %v, %v; want an error containing %q", sql, ok, err, msg)
		}
	}
}
