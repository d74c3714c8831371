package cold_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/convoy-im/convoy/cold"
	"github.com/convoy-im/convoy/internal/testsvc"
)

// textResult is a result set as the text protocol carried it: column
// definitions and each value's exact bytes (nil = NULL).
type textResult struct {
	cols []cold.Column
	rows [][][]byte
}

// textQuery runs sql with COM_QUERY (no arguments: go-mysql would prepare
// the statement and answer in the binary protocol).
func textQuery(t testing.TB, c *client.Conn, sql string) textResult {
	t.Helper()
	r, err := c.Execute(sql)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	defer r.Close()
	var out textResult
	for _, f := range r.Fields {
		out.cols = append(out.cols, cold.ColumnFromField(f))
	}
	if out.rows, err = cold.TextRows(r.Resultset); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return out
}

// fixture is a MariaDB with conv_msg / msg_content (schema/im.sql) filled
// with messages over two days, and the rows archived from it.
type fixture struct {
	db     *testsvc.MariaDB
	conn   *client.Conn
	tables cold.Tables
	// byDay are the archived rows (what an archiver reads) per UTC day.
	byDay map[string][]cold.Row
}

// Conversations of the fixture: convA has many messages over both days
// (several row groups with small groups), the others are small, convMax is
// the largest BIGINT UNSIGNED (unsigned ordering in page indexes).
const (
	convA   = 1001
	convB   = 1002
	convC   = 1003
	convMax = 18446744073709551615
	nA      = 300
)

func startFixture(t testing.TB) *fixture {
	t.Helper()
	db := testsvc.StartMariaDB(t)
	_, file, _, _ := runtime.Caller(0)
	schema, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "schema", "im.sql"))
	if err != nil {
		t.Fatal(err)
	}
	db.Exec(t, "CREATE DATABASE coldtest", "USE coldtest;\n"+string(schema))
	var sb strings.Builder
	msgID := uint64(5_000_000)
	add := func(conv, seq uint64, day int, ms int, body string, withBody bool) {
		msgID++
		at := fmt.Sprintf("2026-01-0%d 10:%02d:%02d.%03d", day, seq/60%60, seq%60, ms)
		fmt.Fprintf(&sb, "INSERT INTO coldtest.conv_msg VALUES (%d,%d,%d,%d,%d,'%s');\n", conv, seq, msgID, 7000+seq%5, 1+seq%3, at)
		if withBody {
			fmt.Fprintf(&sb, "INSERT INTO coldtest.msg_content VALUES (%d,%d,%d,%d,%s,'%s');\n", msgID, conv, 7000+seq%5, 1+seq%3, body, at)
		}
	}
	for seq := uint64(1); seq <= nA; seq++ {
		day := 1
		if seq > nA/2 {
			day = 2
		}
		body := fmt.Sprintf("X'%x'", []byte(fmt.Sprintf("msg %d of A \x00\xff 你好 ", seq)))
		switch {
		case seq%50 == 0:
			body = "''" // empty payload
		case seq%77 == 0:
			body = "REPEAT(X'41FF00', 1365)" // 4095 bytes, near VARBINARY(4096)
		}
		add(convA, seq, day, int(seq%1000), body, seq%31 != 0) // some messages have no body row
	}
	for seq := uint64(1); seq <= 5; seq++ {
		add(convB, seq, 1+int(seq%2), 0, fmt.Sprintf("'b%d'", seq), true)
	}
	add(convC, 1, 2, 999, "'c'", true)
	for seq := uint64(1); seq <= 3; seq++ {
		add(convMax, seq, 1, 1, "'max'", true)
	}
	db.Exec(t, sb.String())

	conn, err := client.Connect(db.Addr(), "root", "", "coldtest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	f := &fixture{db: db, conn: conn, byDay: map[string][]cold.Row{}}
	msg := textQuery(t, conn, "SELECT * FROM conv_msg ORDER BY conv_id, seq")
	content := textQuery(t, conn, "SELECT * FROM msg_content")
	f.tables = cold.Tables{Msg: msg.cols, Content: content.cols}
	bodies := map[string][][]byte{}
	for _, r := range content.rows {
		bodies[string(r[0])] = r
	}
	for _, r := range msg.rows {
		day := string(r[5][:10])
		f.byDay[day] = append(f.byDay[day], cold.Row{Msg: r, Content: bodies[string(r[2])]})
	}
	return f
}

// archive writes one file per day of the fixture to store, verifies each
// and returns a catalog of them.
func (f *fixture) archive(t testing.TB, ctx context.Context, store cold.Store, opt cold.WriterOptions) (*cold.MemCatalog, []cold.FileInfo) {
	t.Helper()
	cat := cold.NewMemCatalog()
	var infos []cold.FileInfo
	for _, day := range []string{"2026-01-01", "2026-01-02"} {
		d, _ := time.Parse("2006-01-02", day)
		data, info := writeFile(t, f.tables, d, f.byDay[day], opt)
		info.Key = cold.ObjectKey("archive", 441, d, 0)
		if err := store.PutIfAbsent(ctx, info.Key, data); err != nil {
			t.Fatal(err)
		}
		if err := cold.Verify(ctx, store, info.Key, info); err != nil {
			t.Fatal(err)
		}
		cat.Add(info)
		infos = append(infos, info)
	}
	return cat, infos
}

func writeFile(t testing.TB, tables cold.Tables, day time.Time, rows []cold.Row, opt cold.WriterOptions) ([]byte, cold.FileInfo) {
	t.Helper()
	w, err := cold.NewWriter(tables, 441, day, opt)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if err := w.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	data, info, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return data, info
}
