package integration

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/client"
)

func hostPort(t *testing.T, addr string) (string, string) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return h, p
}

// runCLI feeds script to the mariadb command-line client (libmariadb) in
// batch mode and returns what it printed.
func runCLI(t *testing.T, addr, user, pass, script string, extra ...string) string {
	t.Helper()
	h, p := hostPort(t, addr)
	args := append([]string{"--no-defaults", "-c", "--batch", "--default-character-set=utf8mb4", "-h" + h, "-P" + p, "-u" + user, "im"}, extra...)
	if pass != "" {
		args = append(args, "-p"+pass)
	}
	cmd := exec.Command("mariadb", args...)
	cmd.Stdin = strings.NewReader(script)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	_ = cmd.Run()
	return out.String() + stderr.String()
}

// TestClients drives Convoy with real client libraries other than
// go-sql-driver: the mariadb CLI (libmariadb) and PyMySQL, and compares what
// they print with the same script run against plain MariaDB.
// runClient runs a client program and returns its output; pkgs are the
// Debian packages it needs (scripts/ensure-packages.sh installs them).
func runClient(t *testing.T, cmd *exec.Cmd, pkgs string) string {
	t.Helper()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s (apt-get install %s)", strings.Join(cmd.Args[:1], " "), err, out, pkgs)
	}
	return strings.TrimSpace(string(out))
}

func TestClients(t *testing.T) {
	s := newStack(t)
	if _, err := exec.LookPath("mariadb"); err != nil {
		t.Fatal("the mariadb client is required (apt-get install mariadb-client)")
	}
	script := `INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (11, 1, 1101, 3, 1, '2026-02-01 00:00:00.000'), (12, 1, 1201, 3, 1, '2026-02-01 00:00:01.000');
INSERT INTO msg_content (msg_id, conv_id, sender_uid, msg_type, content, created_at) VALUES (1101, 11, 3, 1, 'hi 👋🏽 ünïcödé \\ ''q''', '2026-02-01 00:00:00.000');
SELECT * FROM conv_msg WHERE conv_id = 11;
SELECT content, HEX(content) FROM msg_content WHERE conv_id = 11 AND msg_id = 1101;
/* a comment the CLI keeps with -c */ SELECT seq FROM conv_msg WHERE conv_id = 12;
BEGIN;
UPDATE conv_msg SET msg_type = 2 WHERE conv_id = 12 AND seq = 1;
SELECT msg_type FROM conv_msg WHERE conv_id = 12;
ROLLBACK;
SELECT msg_type FROM conv_msg WHERE conv_id = 12;
SELECT @@autocommit, DATABASE();
SELECT * FROM conv_msg WHERE conv_id = -5;
`
	want := runCLI(t, s.ref.Addr(), "root", "", script)
	got := runCLI(t, s.convoy.addr, "convoy", "convoy", script)
	// The last statement is an error on Convoy (negative shard key) but an
	// empty result on MariaDB; compare everything before it, then check it.
	cut := func(s string) string {
		for _, marker := range []string{"--------------\n", "ERROR"} {
			if i := strings.Index(s, marker); i >= 0 {
				s = s[:i]
			}
		}
		return strings.TrimSpace(s)
	}
	if cut(got) != cut(want) {
		t.Errorf("mariadb CLI output differs\n--- mariadb:\n%s\n--- convoy:\n%s", want, got)
	}
	if !strings.Contains(got, "ERROR 1525") || !strings.Contains(got, "negative") {
		t.Errorf("CLI did not print the shard key error: %s", got)
	}

	t.Run("wrong password", func(t *testing.T) {
		out := runCLI(t, s.convoy.addr, "convoy", "wrong", "SELECT 1;")
		if !strings.Contains(out, "ERROR 1045") {
			t.Errorf("wrong password: %s", out)
		}
	})

	t.Run("pymysql", func(t *testing.T) {
		py := `
import sys, json, pymysql
host, port, user, pw = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
c = pymysql.connect(host=host, port=port, user=user, password=pw, database="im", charset="utf8mb4", autocommit=True)
cur = c.cursor()
out = []
cur.execute("INSERT INTO msg_content (msg_id, conv_id, sender_uid, msg_type, content, created_at) VALUES (%s, %s, %s, %s, %s, %s)",
            (1301, 13, 4, 1, "py 🐍 'x' \\ y".encode("utf8"), "2026-02-02 00:00:00.000"))
out.append(cur.rowcount)
cur.executemany("INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (%s, %s, %s, %s, %s)",
                [(u, 13, 1, 1301, "2026-02-02 00:00:00.000") for u in (4, 5, 6, 18446744073709551615)])
out.append(cur.rowcount)
cur.execute("SELECT content, HEX(content) FROM msg_content WHERE conv_id = %s AND msg_id = %s", (13, 1301))
r = cur.fetchone()
out.append([r[0].decode("utf8"), r[1]])
for u in (4, 5, 6, 18446744073709551615):
    cur.execute("SELECT uid, conv_id, seq, msg_id, send_time FROM im_inbox WHERE uid = %s", (u,))
    out.append([str(x) for x in cur.fetchall()])
c.begin()
cur.execute("UPDATE im_inbox SET seq = 2 WHERE uid = %s AND conv_id = 13", (5,))
c.rollback()
cur.execute("SELECT seq FROM im_inbox WHERE uid = 5")
out.append(cur.fetchall())
try:
    cur.execute("SELECT COUNT(*) FROM im_inbox")  # no shard key: every shard, merged
    out.append(cur.fetchall()[0][0] == 4 and "no error" or "wrong count")
except pymysql.MySQLError as e:
    out.append(["error", e.args[0]])
print(json.dumps(out, ensure_ascii=False))
`
		runPy := func(addr, user, pw string) string {
			h, p := hostPort(t, addr)
			return runClient(t, exec.Command("/usr/bin/python3", "-c", py, h, p, user, pw), "python3-pymysql")
		}
		got := runPy(s.convoy.addr, "app", "app secret")
		want := runPy(s.ref.Addr(), "root", "")
		if got != want || !strings.HasSuffix(got, `"no error"]`) {
			t.Errorf("pymysql results differ\nmariadb: %s\nconvoy:  %s", want, got)
		}
	})

	// libmariadb through mysqlclient (MySQLdb): the warning count the C
	// client reads from the OK / EOF packets, and COM_STATISTICS (its
	// stat(), mysqladmin status) answered in sequence, the session going on.
	t.Run("mysqlclient warnings and stat", func(t *testing.T) {
		py := `
import sys, json, re, MySQLdb
host, port, user, pw = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
c = MySQLdb.connect(host=host, port=port, user=user, passwd=pw, db="im", charset="utf8mb4", autocommit=True)
cur = c.cursor()
out = []
cur.execute("SELECT CAST('x' AS SIGNED), CAST('y' AS SIGNED)")
out.append(c.warning_count())
cur.execute("INSERT IGNORE INTO im_conv_seq (conv_id, max_seq) VALUES (9090, 1), (9090, 2)")
out.append(c.warning_count())
cur.execute("SHOW WARNINGS")
out.append([list(r) for r in cur.fetchall()])
cur.execute("SET @x = 1")
out.append(c.warning_count())
out.append(bool(re.match(r"^Uptime: \d+  Threads: \d+  Questions: \d+  Slow queries: \d+  Opens: \d+  Open tables: \d+  Queries per second avg: [0-9.]+$", c.stat())))
cur.execute("SELECT 7")
out.append(cur.fetchall()[0][0])
print(json.dumps(out))
`
		got, want := mysqldbBoth(t, s, py)
		if got != want || !strings.Contains(got, "true, 7]") {
			t.Errorf("mysqlclient results differ\nmariadb: %s\nconvoy:  %s", want, got)
		}
		out, err := exec.Command("mariadb-admin", "--no-defaults", "-h", strings.Split(s.convoy.addr, ":")[0], "-P", strings.Split(s.convoy.addr, ":")[1],
			"-uconvoy", "-pconvoy", "status").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "Uptime: ") {
			t.Errorf("mariadb-admin status: %v %s", err, out)
		}
	})

	// The info text of OK packets (mysqlclient's info(), PHP's
	// mysqli_info; Node's mysql / mysql2 take an UPDATE's changedRows from
	// it): MariaDB's for every write shape, summed where Convoy splits a
	// statement over shards (conversations 9101-9106 hash to different
	// shards), absent where MariaDB sends none (one-row INSERT, DELETE).
	t.Run("mysqlclient info", func(t *testing.T) {
		py := `
import sys, json, MySQLdb
host, port, user, pw = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
c = MySQLdb.connect(host=host, port=port, user=user, passwd=pw, db="im", charset="utf8mb4", autocommit=True)
cur = c.cursor()
out = []
def run(q):
    cur.execute(q)
    out.append([q[:40], c.affected_rows(), c.info(), c.warning_count()])
run("DELETE FROM im_conv_seq WHERE conv_id IN (9101, 9102, 9103, 9104, 9105, 9106)")
run("INSERT INTO im_conv_seq (conv_id, max_seq) VALUES (9101, 1)")
run("INSERT INTO im_conv_seq (conv_id, max_seq) VALUES (9102, 1), (9103, 1), (9104, 1)")
run("INSERT IGNORE INTO im_conv_seq (conv_id, max_seq) VALUES (9101, 5), (9102, 5), (9105, 5)")
run("INSERT INTO im_conv_seq (conv_id, max_seq) VALUES (9101, 1), (9103, 7), (9106, 1) ON DUPLICATE KEY UPDATE max_seq = VALUES(max_seq)")
run("REPLACE INTO im_conv_seq (conv_id, max_seq) VALUES (9104, 2), (9106, 2)")
run("UPDATE im_conv_seq SET max_seq = 7 WHERE conv_id = 9103")
run("UPDATE im_conv_seq SET member_cnt = 3 WHERE conv_id = 9102")
run("UPDATE im_conv_seq SET max_seq = 7 WHERE conv_id IN (9101, 9102, 9103, 9104)")
run("UPDATE im_conv_seq SET max_seq = 8 WHERE max_seq = 7 AND conv_id IN (9101, 9102, 9103, 9104, 9105, 9106)")
run("UPDATE IGNORE im_conv_seq SET max_seq = 'x' WHERE conv_id IN (9105, 9106)")
run("DELETE FROM im_conv_seq WHERE conv_id IN (9101, 9102, 9103, 9104, 9105, 9106)")
print(json.dumps(out))
`
		got, want := mysqldbBoth(t, s, py)
		if got != want || !strings.Contains(got, "Rows matched: 4  Changed: 3  Warnings: 0") {
			t.Errorf("info texts differ\nmariadb: %s\nconvoy:  %s", want, got)
		}
	})

	// COM_CHANGE_USER through libmariadb (mysqlclient's change_user): the
	// connection becomes the other account's, with a new session (user
	// variables, autocommit back to 1); a wrong password gets 1045 and the
	// connection stays the old account's, as on MariaDB.
	t.Run("mysqlclient change_user", func(t *testing.T) {
		py := `
import sys, json, MySQLdb
host, port = sys.argv[1], int(sys.argv[2])
c = MySQLdb.connect(host=host, port=port, user="convoy", passwd="convoy", db="im", charset="utf8mb4")
cur = c.cursor()
cur.execute("SET @v = 5")
cur.execute("SET autocommit = 0")
out = []
c.change_user("app", "app secret", "im")
cur = c.cursor()
cur.execute("SELECT CURRENT_USER(), @v, @@autocommit, DATABASE()")
out.append(list(cur.fetchone()))
try:
    c.change_user("convoy", "wrong", "im")
    out.append("changed with a wrong password")
except MySQLdb.OperationalError as e:
    out.append(e.args[0])
cur = c.cursor()
cur.execute("SELECT CURRENT_USER()")
out.append(cur.fetchone()[0])
c.change_user("convoy", "convoy", "")
cur = c.cursor()
cur.execute("SELECT CURRENT_USER(), DATABASE()")
out.append(list(cur.fetchone()))
print(json.dumps(out))
`
		h, p := hostPort(t, s.convoy.addr)
		got := runClient(t, exec.Command("/usr/bin/python3", "-c", py, h, p), "python3-mysqldb")
		if want := `[["app@%", null, 1, "im"], 1045, "app@%", ["convoy@%", null]]`; got != want {
			t.Errorf("change_user through Convoy: %s, want %s", got, want)
		}
	})

	// PyMySQL's default (autocommit=False) and SQLAlchemy rely on the
	// greeting's status flags: they send SET autocommit=0 only when the
	// greeting says autocommit is on. With 0x0000 there, every statement of
	// a "transaction" committed on its own and rollback() undid nothing.
	t.Run("pymysql rollback", func(t *testing.T) {
		py := `
import sys, json, pymysql
host, port, user, pw = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def connect():
    return pymysql.connect(host=host, port=port, user=user, password=pw, database="im", charset="utf8mb4")
c = connect()
out = [c.server_status & 2, c.get_autocommit()]
cur = c.cursor()
cur.execute("INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (801, 80, 1, 8001, '2026-02-03 00:00:00')")
c.commit()
cur.execute("INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (801, 80, 2, 8002, '2026-02-03 00:00:01')")
cur.execute("DELETE FROM im_inbox WHERE uid = 801 AND seq = 1")
cur.execute("SELECT @@autocommit, @@in_transaction")
out.append(list(cur.fetchone()))
c.rollback()
other = connect()
oc = other.cursor()
oc.execute("SELECT seq, msg_id FROM im_inbox WHERE uid = 801 ORDER BY seq")
out.append([list(r) for r in oc.fetchall()])
print(json.dumps(out))
`
		runPy := func(addr, user, pw string) string {
			h, p := hostPort(t, addr)
			return runClient(t, exec.Command("/usr/bin/python3", "-c", py, h, p, user, pw), "python3-pymysql")
		}
		got := runPy(s.convoy.addr, "app", "app secret")
		want := runPy(s.ref.Addr(), "root", "")
		if got != want || !strings.HasSuffix(got, "[[1, 8001]]]") {
			t.Errorf("pymysql rollback differs\nmariadb: %s\nconvoy:  %s", want, got)
		}
	})

	// Ruby mysql2 (libmariadb, server-side prepared statements): Time values
	// travel as binary DATETIME parameters, results as binary rows.
	t.Run("ruby mysql2", func(t *testing.T) {
		rb := `
require "mysql2"
require "json"
host, port, user, pw = ARGV
c = Mysql2::Client.new(host: host, port: port.to_i, username: user, password: pw, database: "im", encoding: "utf8mb4")
out = []
ins = c.prepare("INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, ?, ?, ?, ?)")
(1..6).each { |i| ins.execute(1400 + i % 2, i, 140000 + i, 7, 1, Time.utc(2026, 3, 3, 10, 0, i, 250000)) }
out << ins.affected_rows
sel = c.prepare("SELECT seq, msg_id, created_at FROM conv_msg WHERE conv_id = ? AND seq <= ? ORDER BY seq")
[[1400, 6], [1401, 6], [1400, 2], [1401, 3]].each do |conv, s|
  out << sel.execute(conv, s).map { |r| [r["seq"], r["msg_id"], r["created_at"].strftime("%F %T.%L")] }
end
cnt = c.prepare("SELECT COUNT(*) AS n FROM conv_msg WHERE conv_id = ? AND created_at >= ?")
out << cnt.execute(1400, Time.utc(2026, 3, 3, 10, 0, 4)).first["n"]
upd = c.prepare("UPDATE conv_msg SET msg_type = ? WHERE conv_id = ? AND seq = ?")
upd.execute(2, 1401, 1)
out << upd.affected_rows
out << c.query("SELECT msg_type FROM conv_msg WHERE conv_id = 1401 AND seq = 1").first["msg_type"]
out << c.query("SELECT msg_id FROM conv_msg WHERE conv_id = 1400 AND seq = 4").first["msg_id"]
puts JSON.generate(out)
`
		runRb := func(addr, user, pw string) string {
			h, p := hostPort(t, addr)
			return runClient(t, exec.Command("ruby", "-e", rb, h, p, user, pw), "ruby-mysql2")
		}
		got := runRb(s.convoy.addr, "app", "app secret")
		want := runRb(s.ref.Addr(), "root", "")
		t.Logf("mysql2: %s", got)
		if got != want || !strings.Contains(got, "140004") {
			t.Errorf("ruby mysql2 results differ\nmariadb: %s\nconvoy:  %s", want, got)
		}
	})

	// MariaDB Connector/J (Debian libmariadb-java): text and server-side
	// prepared statements, batches, Timestamp and byte[] parameters.
	t.Run("connector/j", func(t *testing.T) {
		const jar = "/usr/share/java/mariadb-java-client.jar"
		runJ := func(addr, user, pw string) string {
			h, p := hostPort(t, addr)
			return runClient(t, exec.Command("java", "-cp", jar, "testdata/clients/ConvoyJ.java", h, p, user, pw), "default-jdk-headless libmariadb-java")
		}
		got := runJ(s.convoy.addr, "app", "app secret")
		want := runJ(s.ref.Addr(), "root", "")
		t.Logf("Connector/J:\n%s", got)
		if got != want || strings.Count(got, "batch=[1, 1, 1, 1, 1, 1]") != 2 || !strings.Contains(got, "error=1146/42S02") {
			t.Errorf("Connector/J results differ\nmariadb: %s\nconvoy:  %s", want, got)
		}
	})

	// mysqljs (Debian node-mysql): its own protocol code, values escaped by
	// the client, multi-row VALUES ?, multi-statements, Buffers.
	t.Run("node mysql", func(t *testing.T) {
		js := `
const mysql = require("mysql");
const [host, port, user, password] = process.argv.slice(1);
const c = mysql.createConnection({host, port: +port, user, password, database: "im", charset: "utf8mb4_general_ci",
  multipleStatements: true, supportBigNumbers: true, bigNumberStrings: true, dateStrings: true});
const q = (sql, args) => new Promise((ok, fail) => c.query(sql, args, (e, r) => e ? fail(e) : ok(r)));
(async () => {
  const out = [];
  out.push((await q("INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES ?",
    [[[1700, 1, 170001, 9, 1, "2026-03-05 10:00:00.500"], [1700, 2, 170002, 9, 1, "2026-03-05 10:00:01.500"],
      [1701, 1, 170101, 9, 1, "2026-03-05 10:00:02.500"]]])).affectedRows);
  out.push((await q("INSERT INTO msg_content (msg_id, conv_id, sender_uid, msg_type, content, created_at) VALUES (?, ?, ?, ?, ?, ?)",
    [170001, 1700, 9, 1, Buffer.from([0xff, 0, 0x27, 0x5c, 0x41]), "2026-03-05 10:00:00.500"])).affectedRows);
  out.push(await q("SELECT seq, msg_id, created_at FROM conv_msg WHERE conv_id = ? ORDER BY seq DESC", [1700]));
  out.push(await q("SELECT HEX(content) AS h, content FROM msg_content WHERE conv_id = ? AND msg_id = ?", [1700, 170001]));
  out.push(await q("SELECT msg_id FROM conv_msg WHERE conv_id = 1700 AND seq = 1; SELECT msg_id FROM conv_msg WHERE conv_id = 1701 AND seq = 1"));
  await q("START TRANSACTION");
  await q("UPDATE conv_msg SET msg_type = 7 WHERE conv_id = ? AND seq = ?", [1701, 1]);
  await q("ROLLBACK");
  out.push(await q("SELECT msg_type FROM conv_msg WHERE conv_id = 1701 AND seq = 1"));
  try { await q("SELECT * FROM no_such_table"); out.push("no error"); } catch (e) { out.push([e.errno, e.sqlState]); }
  console.log(JSON.stringify(out));
  c.end();
})().catch(e => { console.error(String(e)); process.exit(1); });
`
		runJS := func(addr, user, pw string) string {
			h, p := hostPort(t, addr)
			cmd := exec.Command("node", "-e", js, h, p, user, pw)
			cmd.Env = append(os.Environ(), "NODE_PATH=/usr/share/nodejs")
			return runClient(t, cmd, "nodejs node-mysql")
		}
		got := runJS(s.convoy.addr, "app", "app secret")
		want := runJS(s.ref.Addr(), "root", "")
		t.Logf("node mysql: %s", got)
		if got != want || !strings.Contains(got, `"h":"FF00275C41"`) || !strings.HasSuffix(got, `[1146,"42S02"]]`) {
			t.Errorf("node mysql results differ\nmariadb: %s\nconvoy:  %s", want, got)
		}
	})

	t.Run("go-mysql client sees logical metadata", func(t *testing.T) {
		conn := func(addr, user, pass string) *client.Conn {
			c, err := client.Connect(addr, user, pass, "im", func(c *client.Conn) error { return c.SetCollation("utf8mb4_general_ci") })
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}
		ref := conn(s.ref.Addr(), "root", "")
		cv := conn(s.convoy.addr, "convoy", "convoy")
		for _, q := range []string{
			"SELECT seq, msg_id AS m, created_at FROM conv_msg WHERE conv_id = 11",
			"SELECT c.seq FROM conv_msg c WHERE c.conv_id = 11",
		} {
			want, err := ref.Execute(q)
			if err != nil {
				t.Fatal(err)
			}
			got, err := cv.Execute(q)
			if err != nil {
				t.Fatal(err)
			}
			for i, f := range want.Fields {
				g := got.Fields[i]
				w := fmt.Sprintf("%s.%s(%s).%s(%s) type=%d flag=%d len=%d charset=%d", f.Schema, f.Table, f.OrgTable, f.Name, f.OrgName, f.Type, f.Flag, f.ColumnLength, f.Charset)
				gs := fmt.Sprintf("%s.%s(%s).%s(%s) type=%d flag=%d len=%d charset=%d", g.Schema, g.Table, g.OrgTable, g.Name, g.OrgName, g.Type, g.Flag, g.ColumnLength, g.Charset)
				if w != gs {
					t.Errorf("%s column %d metadata\nmariadb: %s\nconvoy:  %s", q, i, w, gs)
				}
			}
		}
	})
}

// mysqldbBoth runs a Python MySQLdb script (argv: host, port, user,
// password) through Convoy and against the reference; it returns both
// outputs.
func mysqldbBoth(t *testing.T, s *stack, py string) (convoy, mariadb string) {
	t.Helper()
	run := func(addr, user, pw string) string {
		h, p := hostPort(t, addr)
		return runClient(t, exec.Command("/usr/bin/python3", "-c", py, h, p, user, pw), "python3-mysqldb")
	}
	return run(s.convoy.addr, "convoy", "convoy"), run(s.ref.Addr(), "root", "")
}
