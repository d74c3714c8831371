package integration

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
)

var idleConns = flag.Int("idle.conns", 2000, "client connections BenchmarkIdleConnections holds open")

// rssBytes reads a process's resident set size from /proc.
func rssBytes(tb testing.TB, pid int) int64 {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return kb << 10
		}
	}
	tb.Fatal("no VmRSS in /proc status")
	return 0
}

// BenchmarkIdleConnections (docs/design.md §7: 2000 idle client connections, Convoy
// RSS < 150 MB): opens -idle.conns authenticated client connections, each
// runs one statement, then all stay idle; reports Convoy's RSS before and
// with them, and the cost per connection. Run with -benchtime 1x.
func BenchmarkIdleConnections(b *testing.B) {
	s := newStack(b)
	s.convoy.kill()
	s.convoy = startConvoy(b, s.etcd.Endpoints(), fmt.Sprintf("max_connections: %d", *idleConns+100))
	pid := s.convoy.cmd.Process.Pid
	for range b.N {
		time.Sleep(500 * time.Millisecond)
		before := rssBytes(b, pid)
		conns := make([]*client.Conn, *idleConns)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var firstErr error
		sem := make(chan struct{}, 32)
		for i := range conns {
			wg.Add(1)
			sem <- struct{}{}
			go func(i int) {
				defer func() { <-sem; wg.Done() }()
				c, err := client.Connect(s.convoy.addr, "app", "app secret", "im", func(c *client.Conn) error { return c.SetCollation("utf8mb4_general_ci") })
				if err == nil {
					_, err = c.Execute("SELECT msg_id FROM conv_msg WHERE conv_id = 42 AND seq = 1")
				}
				mu.Lock()
				defer mu.Unlock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				conns[i] = c
			}(i)
		}
		wg.Wait()
		if firstErr != nil {
			b.Fatalf("opening %d connections: %v", *idleConns, firstErr)
		}
		time.Sleep(2 * time.Second) // idle
		with := rssBytes(b, pid)
		b.ReportMetric(float64(before)/(1<<20), "MB-rss-before")
		b.ReportMetric(float64(with)/(1<<20), "MB-rss-idle")
		b.ReportMetric(float64(with-before)/float64(*idleConns)/1024, "KB/conn")
		b.Logf("%d idle connections: Convoy RSS %.1f MB (%.1f MB before; %.1f KB per connection)",
			*idleConns, float64(with)/(1<<20), float64(before)/(1<<20), float64(with-before)/float64(*idleConns)/1024)
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}
}
