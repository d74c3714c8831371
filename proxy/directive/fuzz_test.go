package directive

import (
	"strings"
	"testing"

	"github.com/convoy-im/convoy/router"
)

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"/*+ convoy SHOW ROUTES */",
		"/*+ convoy SHOW ROUTES WHERE shard = 441 */;",
		"/*+ convoy SHOW ROUTES WHERE datasource = 'ds1' */",
		"/*+ convoy SHOW SHARD FOR conv_id = 42 */",
		"/*+ convoy SHOW SHARD FOR uid = -7 */",
		"/*+ convoy SHOW SHARD STATS WHERE shard = 1 */",
		"/*+ convoy SHOW SHARD HEALTH ALL */",
		"/*+ convoy MIGRATE SHARD 441 TO `ds2` */",
		"/*+ convoy MIGRATE SHARDS 512-1023 TO ds2 DATABASE im_9 RATE 2000 PARALLEL 4 AUTO */",
		"/*+ convoy MIGRATION 441 RATE 500 */",
		"/*+ convoy shard=441 */ SELECT COUNT(*) FROM conv_msg",
		"/*+ convoy datasource='ds1' */ SELECT 1",
		"/*+ convoy all */ DELETE FROM conv_msg WHERE created_at < '*/'",
		"/*!50000 SELECT 1 */",
		"/* convoy */",
		"/*+ BKA(t) */ SELECT 1",
		"/*+ convoy datasource='a",
		"\n\t/*+CONVOY RELOAD ROUTES*/ ; ",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		d, ok, err := Parse(sql)
		if !ok {
			if d != nil || err != nil {
				t.Fatalf("ok=false with d=%v err=%v", d, err)
			}
			return
		}
		if err != nil {
			if d != nil {
				t.Fatalf("error with a directive: %v", err)
			}
			if len(err.Error()) > 512 {
				t.Fatalf("error longer than 512 bytes: %q", err)
			}
			return
		}
		if d == nil {
			t.Fatal("ok, no error, no directive")
		}
		if d.Shard < -1 || d.Shard >= router.NumShards {
			t.Fatalf("shard %d out of range", d.Shard)
		}
		if d.Kind == Target {
			if !strings.HasSuffix(sql, d.Rest) || blank(d.Rest) {
				t.Fatalf("Rest %q is not a non-blank suffix of %q", d.Rest, sql)
			}
			n := 0
			if d.All {
				n++
			}
			if d.Shard >= 0 {
				n++
			}
			if d.Datasource != "" {
				n++
			}
			if n != 1 {
				t.Fatalf("target with %d selectors: %+v", n, d)
			}
		} else if d.Rest != "" {
			t.Fatalf("command with Rest %q", d.Rest)
		}
		if d.Kind == ShowShardFor && d.Shard != int(router.ShardOf(d.Key)) {
			t.Fatalf("shard %d for key %d", d.Shard, d.Key)
		}
	})
}
