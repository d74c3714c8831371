package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/client"
)

// TestDDLFieldListAndSysbench: DDL fan-out reports per-target failures and
// can be re-run; COM_FIELD_LIST answers for a logical table; sysbench
// (libmariadb, server-side prepared statements) runs error-free through
// Convoy.
func TestDDLFieldListAndSysbench(t *testing.T) {
	s := newStack(t)
	db := s.convoy.open(t, "convoy", "convoy", "im")

	mustExec(t, db, "ALTER TABLE conv_msg ADD COLUMN extra INT NULL")
	for i, m := range s.ds {
		dbName := []string{"im_0", "im_1"}[i]
		var n int
		if err := m.Open(t, dbName).QueryRow("SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND COLUMN_NAME = 'extra' AND TABLE_NAME LIKE 'conv_msg%'", dbName).Scan(&n); err != nil || n != 4 {
			t.Fatalf("ds%d: column on %d physical tables (err %v), want 4", i, n, err)
		}
	}
	_, err := db.Exec("ALTER TABLE conv_msg ADD COLUMN extra INT NULL")
	if errno(err) != 1060 || !strings.Contains(err.Error(), "failed on 8 of 8 physical targets") {
		t.Fatalf("repeated ALTER: %v", err)
	}
	mustExec(t, db, "ALTER TABLE conv_msg DROP COLUMN extra")
	mustExec(t, db, "CREATE TABLE IF NOT EXISTS msg_content (msg_id BIGINT UNSIGNED PRIMARY KEY)") // converges: no-op

	// An INSERT without a column list takes the columns from the backends,
	// after checking that every physical table has the same ones: one that
	// differs (a DDL run around Convoy, or half-failed) refuses it, since
	// values would land in other columns than the client meant.
	mustExec(t, db, "INSERT INTO im_inbox VALUES (5, 1, 1, 10, '2026-01-01 00:00:00')")
	s.ds[1].Exec(t, "ALTER TABLE im_1.im_inbox_0640 ADD COLUMN stray INT NULL")
	mustExec(t, db, "ALTER TABLE im_conv_seq COMMENT 'drops the cached column lists'")
	_, err = db.Exec("INSERT INTO im_inbox VALUES (6, 1, 1, 11, '2026-01-01 00:00:00')")
	if errno(err) != 1235 || !strings.Contains(err.Error(), "im_1.im_inbox_0640") || !strings.Contains(err.Error(), "stray") {
		t.Fatalf("positional INSERT with physical tables that disagree: %v", err)
	}
	mustExec(t, db, "INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (6, 1, 1, 11, '2026-01-01 00:00:00')") // named: unaffected
	s.ds[1].Exec(t, "ALTER TABLE im_1.im_inbox_0640 DROP COLUMN stray")
	mustExec(t, db, "ALTER TABLE im_conv_seq COMMENT ''")
	mustExec(t, db, "INSERT INTO im_inbox VALUES (7, 1, 1, 12, '2026-01-01 00:00:00')")

	c, err := client.Connect(s.convoy.addr, "convoy", "convoy", "im", func(c *client.Conn) error { return c.SetCollation("utf8mb4_general_ci") })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fs, err := c.FieldList("conv_msg", "")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range fs {
		names = append(names, string(f.Name))
		if string(f.Table) != "conv_msg" || string(f.OrgTable) != "conv_msg" {
			t.Errorf("field %s names table %s (%s)", f.Name, f.Table, f.OrgTable)
		}
	}
	if strings.Join(names, ",") != "conv_id,seq,msg_id,sender_uid,msg_type,created_at" {
		t.Errorf("COM_FIELD_LIST conv_msg: %v", names)
	}

	if _, err := exec.LookPath("sysbench"); err != nil {
		t.Fatal("sysbench is required (apt-get install sysbench)")
	}
	h, p := hostPort(t, s.convoy.addr)
	sb := func(args ...string) string {
		base := []string{"oltp_point_select", "--db-driver=mysql", "--mysql-host=" + h, "--mysql-port=" + p,
			"--mysql-user=convoy", "--mysql-password=convoy", "--mysql-db=im", "--tables=1", "--table-size=500"}
		out, err := exec.Command("sysbench", append(base, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("sysbench %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	sb("prepare")
	// sysbench (libmariadb) binds once and re-EXECUTEs with
	// new_params_bound_flag = 0; the backend must see the values every time
	// (go-mysql alone turned them into NULL). The general log of the default
	// datasource shows what actually ran.
	logFile := filepath.Join(t.TempDir(), "general.log")
	s.ds[0].Exec(t, "SET GLOBAL general_log_file = '"+logFile+"'", "SET GLOBAL general_log = 1")
	out := sb("--threads=2", "--time=2", "--db-ps-mode=auto", "run")
	s.ds[0].Exec(t, "SET GLOBAL general_log = 0")
	if !strings.Contains(out, "ignored errors:                      0") || !strings.Contains(out, "queries:") {
		t.Fatalf("sysbench prepared run:\n%s", out)
	}
	glog, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	withValue := regexp.MustCompile(`Execute\s+SELECT c FROM sbtest1 WHERE id=\d+`).FindAll(glog, -1)
	withNull := regexp.MustCompile(`Execute\s+SELECT c FROM sbtest1 WHERE id=NULL`).FindAll(glog, -1)
	if len(withValue) < 100 || len(withNull) > 0 {
		t.Fatalf("sysbench prepared point selects on the backend: %d with a value, %d with NULL (want all with a value)", len(withValue), len(withNull))
	}
	t.Logf("sysbench prepared: %d backend EXECUTEs, all with their value", len(withValue))
	out = sb("--threads=2", "--time=1", "--db-ps-mode=disable", "run")
	if !strings.Contains(out, "ignored errors:                      0") {
		t.Fatalf("sysbench text run:\n%s", out)
	}
	sb("cleanup")
}
