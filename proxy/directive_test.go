package proxy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// outcome renders what a client got for one statement: an error's errno,
// SQLSTATE and message, a result set's columns and rows, or an OK's
// affected rows.
func outcome(r *mysql.Result, err error) string {
	if err != nil {
		if me, ok := err.(*mysql.MyError); ok {
			return fmt.Sprintf("ERROR %d (%s): %s", me.Code, me.State, me.Message)
		}
		return "ERROR " + err.Error()
	}
	if r == nil || r.Resultset == nil || len(r.Fields) == 0 {
		return fmt.Sprintf("OK %d", r.AffectedRows)
	}
	var cols []string
	for _, f := range r.Fields {
		cols = append(cols, string(f.Name))
	}
	out := strings.Join(cols, ",")
	for i := range r.RowNumber() {
		var cells []string
		for j := range cols {
			v, _ := r.GetString(i, j)
			cells = append(cells, v)
		}
		out += " | " + strings.Join(cells, ",")
	}
	return out
}

// TestDirectivesOnTheWire: the handler answers Convoy's directives on
// COM_QUERY (the admin's only; a malformed one is a syntax error for
// anyone; SHOW WARNINGS then shows its error), refuses them at
// COM_STMT_PREPARE, and reads them statement by statement in a
// multi-statement query; Convoy's reserved variables are refused before
// a directive is read. The statement log names no shard for a refused
// PREPARE, whatever the statement before it was routed to.
func TestDirectivesOnTheWire(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	addr := serveProxy(t, Config{Users: []User{{Name: "app", Password: "pw"}, {Name: "adm", Password: "pw", Admin: true}}, StatementLogRate: 1000}, fuzzBackends{}, zap.New(core))
	connect := func(user string, opts ...client.Option) *client.Conn {
		t.Helper()
		c, err := client.ConnectWithTimeout(addr, user, "pw", "im", 5*time.Second, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	var got []string
	query := func(c *client.Conn, who, q string) {
		r, err := c.Execute(q)
		got = append(got, who+" "+q+" => "+outcome(r, err))
	}
	adm, app := connect("adm"), connect("app")
	for _, q := range []string{
		"/*+ convoy SHOW ROUTES WHERE shard = 3 */",
		"/*+ convoy SHOW SHARD FOR conv_id = 42 */",
		"/*+ convoy SHOW TABLES */",
		"SHOW WARNINGS",
		"/*+ convoy shard=3 */ SELECT @convoy_x",
		"/*+ convoy shard=3 */ SELECT 1",
		"/*+ convoy shard=3 */ SELECT COUNT(*) FROM conv_msg",
		"/*+ convoy all */ DELETE FROM conv_msg",
		"/*+ convoy datasource=ds1 */ SELECT 1",
		"/*+ convoy datasource=ds9 */ SELECT 1",
		"/*+ convoy SHOW PROXIES */",
		"/*+ convoy RELOAD ROUTES */",
		"/*+ convoy SHOW MIGRATIONS */",
		"/*+ convoy MIGRATE SHARD 5 TO ds1 */",
		"/*+ convoy SHOW ARCHIVE */",
		"/*+ convoy SHOW SHARD SIZES */",
		"/*+ convoy SHOW SEARCH STATUS */",
		"/*+ convoy SHOW SHARD HEALTH */",
	} {
		query(adm, "adm", q)
	}
	for _, q := range []string{"/*+ convoy SHOW ROUTES */", "/*+ convoy SHOW TABLES */", "/*+ convoy shard=3 */ SELECT @convoy_x"} {
		query(app, "app", q)
	}
	// A statement routed to a shard, then directives prepared.
	query(adm, "adm", "SELECT * FROM conv_msg WHERE conv_id = 42")
	for _, q := range []string{"/*+ convoy SHOW ROUTES */", "/*+ convoy shard=3 */ SELECT * FROM conv_msg WHERE conv_id = ?"} {
		_, err := adm.Prepare(q)
		got = append(got, "adm PREPARE "+q+" => "+outcome(nil, err))
	}
	multi := connect("adm", func(c *client.Conn) error { return c.SetCapability(mysql.CLIENT_MULTI_STATEMENTS) })
	for _, q := range []string{
		"/*+ convoy SHOW ROUTES WHERE shard = 3 */;",
		"/*+ convoy SHOW ROUTES WHERE shard = 3 */; SELECT 1",
		"SELECT 1; /*+ convoy SHOW ROUTES WHERE shard = 3 */",
		"/*+ convoy shard=3 */ SELECT COUNT(*) FROM conv_msg; SELECT 2",
		"SELECT 2; /*+ convoy shard=3 */ SELECT COUNT(*) FROM conv_msg",
		// Tables of both shard keys: refused unless the directive is read.
		"SELECT 2; /*+ convoy shard=3 */ SELECT COUNT(*) FROM conv_msg c JOIN im_inbox i ON i.conv_id = c.conv_id",
		"/*+ convoy shard=3 */ SELECT COUNT(*) FROM conv_msg c JOIN im_inbox i ON i.conv_id = c.conv_id; SELECT 2",
		"SELECT 2; SELECT COUNT(*) FROM conv_msg c JOIN im_inbox i ON i.conv_id = c.conv_id",
	} {
		var outs []string
		_, err := multi.ExecuteMultiple(q, func(r *mysql.Result, err error) { outs = append(outs, outcome(r, err)) })
		if err != nil {
			outs = append(outs, outcome(nil, err))
		}
		got = append(got, "multi "+q+" => "+strings.Join(outs, " ;; "))
	}
	for _, l := range statementLines(logs) {
		m := l.ContextMap()
		got = append(got, fmt.Sprintf("log %v %v shard=%v %v", m["command"], m["errno"], m["shard"], m["stmt"]))
	}
	want := strings.TrimSpace(directiveTranscript)
	if g := strings.Join(got, "\n"); g != want {
		t.Errorf("transcript:\n%s\n\nwant:\n%s", g, want)
	}
}

const directiveTranscript = `
adm /*+ convoy SHOW ROUTES WHERE shard = 3 */ => shard,datasource,database,table,state,route_version | 0003,ds0,im_0,*_0003,serving,1
adm /*+ convoy SHOW SHARD FOR conv_id = 42 */ => key_column,key,shard,logical_table,datasource,database,table,check_with | conv_id,42,0136,conv_msg,ds0,im_1,conv_msg_0136,SELECT CRC32(42) % 1024 | conv_id,42,0136,msg_content,ds0,im_1,msg_content_0136,SELECT CRC32(42) % 1024 | conv_id,42,0136,im_conv_seq,ds0,im_1,im_conv_seq_0136,SELECT CRC32(42) % 1024
adm /*+ convoy SHOW TABLES */ => ERROR 1064 (42000): convoy directive: unknown directive SHOW TABLES; valid directives /*+ convoy ... */: SHOW ROUTES [WHERE ...], SHOW SHARD FOR {conv_id|uid} = KEY, SHOW SHARD {STATS|HEALTH [ALL]|SIZES}, PLAN EXPANSION [...], SHOW DATASOURCES, SHOW PROXIES, SHOW MIGRATIONS|MIGRATION N|ARCHIVE|SEARCH STATUS|OUTBOX, RELOAD ROUTES, MIGRATE SHARD[S] N[-M] TO NAME [...], MIGRATION N VERB, OUTBOX VERB ID; as a statement prefix: shard=N | datasource=NAME | all, then a statement (N is a shard 0..1023)
adm SHOW WARNINGS => Level,Code,Message
adm /*+ convoy shard=3 */ SELECT @convoy_x => ERROR 1235 (42000): user variables named @convoy_* are reserved for Convoy's own sessions on the datasources
adm /*+ convoy shard=3 */ SELECT 1 => ERROR 1235 (42000): /*+ convoy shard=3 */ needs a statement on a sharded table
adm /*+ convoy shard=3 */ SELECT COUNT(*) FROM conv_msg => 1 | 1
adm /*+ convoy all */ DELETE FROM conv_msg => OK 1024
adm /*+ convoy datasource=ds1 */ SELECT 1 => 1 | 1
adm /*+ convoy datasource=ds9 */ SELECT 1 => ERROR 1235 (42000): unknown datasource "ds9"
adm /*+ convoy SHOW PROXIES */ => ERROR 1235 (42000): SHOW PROXIES is not available in this process
adm /*+ convoy RELOAD ROUTES */ => ERROR 1235 (42000): RELOAD ROUTES is not available in this process
adm /*+ convoy SHOW MIGRATIONS */ => ERROR 1235 (42000): SHOW MIGRATIONS is not available in this process (no etcd)
adm /*+ convoy MIGRATE SHARD 5 TO ds1 */ => ERROR 1235 (42000): MIGRATE SHARD is not available in this process (no etcd)
adm /*+ convoy SHOW ARCHIVE */ => ERROR 1235 (42000): SHOW ARCHIVE is not available in this process (cold.enabled is off, or no etcd)
adm /*+ convoy SHOW SHARD SIZES */ => ERROR 1235 (42000): SHOW SHARD SIZES is not available in this process
adm /*+ convoy SHOW SEARCH STATUS */ => ERROR 1235 (42000): SHOW SEARCH STATUS: message search is off in this process (search.enabled)
adm /*+ convoy SHOW SHARD HEALTH */ => scope,metric,value,threshold,status,config_key | datasource ds0,disk_bytes,1,capacity not configured,unknown,health.disk_capacity | datasource ds1,disk_bytes,1,capacity not configured,unknown,health.disk_capacity
app /*+ convoy SHOW ROUTES */ => ERROR 1227 (42000): Access denied; you need the Convoy admin privilege for SHOW ROUTES
app /*+ convoy SHOW TABLES */ => ERROR 1064 (42000): convoy directive: unknown directive SHOW TABLES; valid directives /*+ convoy ... */: SHOW ROUTES [WHERE ...], SHOW SHARD FOR {conv_id|uid} = KEY, SHOW SHARD {STATS|HEALTH [ALL]|SIZES}, PLAN EXPANSION [...], SHOW DATASOURCES, SHOW PROXIES, SHOW MIGRATIONS|MIGRATION N|ARCHIVE|SEARCH STATUS|OUTBOX, RELOAD ROUTES, MIGRATE SHARD[S] N[-M] TO NAME [...], MIGRATION N VERB, OUTBOX VERB ID; as a statement prefix: shard=N | datasource=NAME | all, then a statement (N is a shard 0..1023)
app /*+ convoy shard=3 */ SELECT @convoy_x => ERROR 1235 (42000): user variables named @convoy_* are reserved for Convoy's own sessions on the datasources
adm SELECT * FROM conv_msg WHERE conv_id = 42 => 1 | 1
adm PREPARE /*+ convoy SHOW ROUTES */ => ERROR 1235 (42000): Convoy directives cannot be prepared; send them as plain queries
adm PREPARE /*+ convoy shard=3 */ SELECT * FROM conv_msg WHERE conv_id = ? => ERROR 1235 (42000): Convoy directives cannot be prepared; send them as plain queries
multi /*+ convoy SHOW ROUTES WHERE shard = 3 */; => shard,datasource,database,table,state,route_version | 0003,ds0,im_0,*_0003,serving,1
multi /*+ convoy SHOW ROUTES WHERE shard = 3 */; SELECT 1 => ERROR 1064 (42000): convoy directive: SHOW ROUTES must be the whole statement; unexpected "; SELECT 1" after */
multi SELECT 1; /*+ convoy SHOW ROUTES WHERE shard = 3 */ => 1 | 1
multi /*+ convoy shard=3 */ SELECT COUNT(*) FROM conv_msg; SELECT 2 => 1 | 1 ;; 1 | 1
multi SELECT 2; /*+ convoy shard=3 */ SELECT COUNT(*) FROM conv_msg => 1 | 1 ;; 1 | 1
multi SELECT 2; /*+ convoy shard=3 */ SELECT COUNT(*) FROM conv_msg c JOIN im_inbox i ON i.conv_id = c.conv_id => 1 | 1 ;; 1 | 1
multi /*+ convoy shard=3 */ SELECT COUNT(*) FROM conv_msg c JOIN im_inbox i ON i.conv_id = c.conv_id; SELECT 2 => 1 | 1 ;; 1 | 1
multi SELECT 2; SELECT COUNT(*) FROM conv_msg c JOIN im_inbox i ON i.conv_id = c.conv_id => 1 | 1 ;; ERROR 1235 (42000): statement mixes sharded tables with different shard keys (conv_msg by conv_id, im_inbox by uid): they live on different shards
log COM_QUERY 1064 shard=<nil> /*+ convoy SHOW TABLES */
log COM_QUERY 1235 shard=<nil> /*+ convoy shard=? */ SELECT @convoy_x
log COM_QUERY 1235 shard=<nil> /*+ convoy shard=? */ SELECT ?
log COM_QUERY 1235 shard=<nil> /*+ convoy datasource=ds9 */ SELECT ?
log COM_QUERY 1235 shard=<nil> /*+ convoy SHOW PROXIES */
log COM_QUERY 1235 shard=<nil> /*+ convoy RELOAD ROUTES */
log COM_QUERY 1235 shard=<nil> /*+ convoy SHOW MIGRATIONS */
log COM_QUERY 1235 shard=<nil> /*+ convoy MIGRATE SHARD ? TO ds1 */
log COM_QUERY 1235 shard=<nil> /*+ convoy SHOW ARCHIVE */
log COM_QUERY 1235 shard=<nil> /*+ convoy SHOW SHARD SIZES */
log COM_QUERY 1235 shard=<nil> /*+ convoy SHOW SEARCH STATUS */
log COM_QUERY 1227 shard=<nil> /*+ convoy SHOW ROUTES */
log COM_QUERY 1064 shard=<nil> /*+ convoy SHOW TABLES */
log COM_QUERY 1235 shard=<nil> /*+ convoy shard=? */ SELECT @convoy_x
log COM_STMT_PREPARE 1235 shard=<nil> /*+ convoy SHOW ROUTES */
log COM_STMT_PREPARE 1235 shard=<nil> /*+ convoy shard=? */ SELECT * FROM conv_msg WHERE conv_id = ?
log COM_QUERY 1064 shard=<nil> /*+ convoy SHOW ROUTES WHERE shard = ? */; SELECT ?
log COM_QUERY 1235 shard=<nil> SELECT COUNT(*) FROM conv_msg c JOIN im_inbox i ON i.conv_id = c.conv_id
`
