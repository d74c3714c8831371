package integration

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/routecfg"
	"github.com/convoy-im/convoy/router"
)

// questions sums MariaDB's Questions counter over the datasources.
func questions(b *testing.B, ds ...*testsvc.MariaDB) int64 {
	var total int64
	for _, m := range ds {
		var name string
		var v int64
		if err := m.Open(b, "").QueryRow("SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&name, &v); err != nil {
			b.Fatal(err)
		}
		total += v
	}
	return total
}

// runParallel runs op from conns goroutines for d and reports QPS and p99.
func runParallel(b *testing.B, conns int, d time.Duration, op func(i int) error) {
	reportLatencies(b, "", d, parallelLatencies(b, conns, d, op))
}

// parallelLatencies runs op from conns goroutines for d (i numbers the
// calls, distinct across goroutines) and returns their latencies, sorted;
// any error fails the benchmark.
func parallelLatencies(b *testing.B, conns int, d time.Duration, op func(i int) error) []time.Duration {
	return pacedLatencies(b, conns, d, 0, op)
}

// reportLatencies reports QPS, p99 and p50 of lat (sorted, taken over d),
// their names after prefix.
func reportLatencies(b *testing.B, prefix string, d time.Duration, lat []time.Duration) {
	b.ReportMetric(float64(len(lat))/d.Seconds(), prefix+"qps")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), prefix+"p99-us")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), prefix+"p50-us")
}

// BenchmarkFirstScreen compares the first-screen history page served from
// the hot tier with the same page served from MySQL through Convoy: same
// stack, same data, same concurrency, one run (go test -run x -bench
// FirstScreen ./integration/). It also reports MySQL statements per page.
func BenchmarkFirstScreen(b *testing.B) {
	s := newStack(b)
	r := testsvc.StartRedis(b)
	hot := startConvoy(b, s.etcd.Endpoints(), hotTierYAML(r))
	cold := startConvoy(b, s.etcd.Endpoints())
	load := openDSN(b, hot.dsn("convoy", "convoy", "im"))
	const convs = 64
	for c := 1; c <= convs; c++ {
		for i := 0; i < 60; i++ {
			if _, err := load.Exec("INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, 1, 1, NOW(3))", c, c*1000+i); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, v := range []struct {
		name string
		p    *convoyProc
	}{{"mysql", cold}, {"hot", hot}} {
		b.Run(v.name, func(b *testing.B) {
			db := openDSN(b, v.p.dsn("convoy", "convoy", "im"))
			db.SetMaxIdleConns(8)
			stmt, err := db.Prepare(firstScreen)
			if err != nil {
				b.Fatal(err)
			}
			for c := 1; c <= convs; c++ { // warm: learn metadata, fill
				for k := 0; k < 3; k++ {
					if _, err := readStmt(stmt, c); err != nil {
						b.Fatal(err)
					}
				}
				time.Sleep(5 * time.Millisecond)
			}
			q0 := questions(b, s.ds[0], s.ds[1])
			b.ResetTimer()
			var pages int64
			var mu sync.Mutex
			runParallel(b, 8, 8*time.Second, func(i int) error {
				_, err := readStmt(stmt, 1+i%convs)
				mu.Lock()
				pages++
				mu.Unlock()
				return err
			})
			b.StopTimer()
			b.ReportMetric(float64(questions(b, s.ds[0], s.ds[1])-q0)/float64(pages), "mysql-stmts/page")
		})
	}
}

func readStmt(stmt *sql.Stmt, conv int) (int, error) {
	rows, err := stmt.Query(conv, int64(1)<<62)
	if err != nil {
		return 0, err
	}
	n := 0
	for rows.Next() {
		n++
	}
	rows.Close()
	if n != 20 {
		return n, fmt.Errorf("page of %d rows", n)
	}
	return n, rows.Err()
}

// BenchmarkScatter1024 reads every one of the 1024 shards of the production
// layout (8 databases x 128 tables over two MariaDB servers): COUNT(*) and
// ORDER BY ... LIMIT 20.
func BenchmarkScatter1024(b *testing.B) {
	ds0, ds1 := testsvc.StartMariaDB(b, testsvc.WithServerID(1)), testsvc.StartMariaDB(b, testsvc.WithServerID(2))
	et := testsvc.StartEtcd(b)
	cli, err := clientv3.New(clientv3.Config{Endpoints: et.Endpoints(), DialTimeout: 3 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	doc, _ := router.DefaultLayout([]router.Datasource{{Name: "ds0", Addr: ds0.Addr(), User: "root"}, {Name: "ds1", Addr: ds1.Addr(), User: "root"}}, 8)
	if err := routecfg.NewStore(cli, testCluster).Init(context.Background(), doc); err != nil {
		b.Fatal(err)
	}
	ds0.Exec(b, "CREATE DATABASE im")
	p := startConvoy(b, et.Endpoints())
	db := openDSN(b, p.dsn("convoy", "convoy", "im"))
	for _, stmt := range readSchema(b) {
		if _, err := db.Exec(stmt); err != nil {
			b.Fatal(err)
		}
	}
	for c := 0; c < 2000; c += 100 { // 2000 messages over 2000 conversations
		q := "INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES "
		for i := c; i < c+100; i++ {
			if i > c {
				q += ","
			}
			q += fmt.Sprintf("(%d, 1, %d, %d, 1, NOW(3))", i, i, i%7)
		}
		if _, err := db.Exec(q); err != nil {
			b.Fatal(err)
		}
	}
	for _, q := range []struct{ name, sql string }{
		{"count", "SELECT COUNT(*) FROM conv_msg"},
		{"order-limit-20", "SELECT conv_id, seq, msg_id FROM conv_msg ORDER BY msg_id DESC LIMIT 20"},
	} {
		b.Run(q.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				rows, err := db.Query(q.sql)
				if err != nil {
					b.Fatal(err)
				}
				n := 0
				for rows.Next() {
					n++
				}
				rows.Close()
				if n == 0 {
					b.Fatal("no rows")
				}
			}
		})
	}
}
