package testsvc

import (
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	sphinxPkg   = "sphinxsearch"
	sphinxReady = 15 * time.Second
)

// Sphinx is a set of searchd processes (Debian's sphinxsearch 2.2), one per
// search partition, each with the RT index convoy_msgs; the first also has
// the distributed index convoy_msgs_dist over every partition's RT index
// and the RT index convoy_checkpoints, as deploy/sphinx/sphinx.conf
// describes for production.
type Sphinx struct {
	t     testing.TB
	procs []*searchd
}

type searchd struct {
	dir          string
	qlPort, port int
	cmd          *exec.Cmd
	done         chan struct{}
}

// StartSphinx starts n searchd processes on free loopback ports (SphinxQL
// and the agents' API port each) and waits until each answers SphinxQL.
// They are killed and their directories removed when the test ends.
func StartSphinx(t testing.TB, n int) *Sphinx {
	t.Helper()
	NeedsServers(t)
	bin, err := exec.LookPath("searchd")
	if err != nil {
		t.Fatalf("testsvc: searchd not found: apt-get install %s", sphinxPkg)
	}
	s := &Sphinx{t: t}
	t.Cleanup(s.kill)
	for range n {
		dir, err := os.MkdirTemp("", "convoy-sphinx-")
		if err != nil {
			t.Fatalf("testsvc: %v", err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		s.procs = append(s.procs, &searchd{dir: dir, qlPort: freePort(t), port: freePort(t)})
	}
	for i, p := range s.procs {
		conf := filepath.Join(p.dir, "sphinx.conf")
		if err := os.WriteFile(conf, []byte(s.config(i)), 0o600); err != nil {
			t.Fatalf("testsvc: %v", err)
		}
		// --nodetach, not --console: the console mode writes no query log.
		p.cmd = exec.Command(bin, "--config", conf, "--nodetach")
		out, err := os.Create(filepath.Join(p.dir, "console.log"))
		if err != nil {
			t.Fatalf("testsvc: %v", err)
		}
		p.cmd.Stdout, p.cmd.Stderr = out, out
		if p.done, err = spawn(p.cmd); err != nil {
			t.Fatalf("testsvc: exec %s: %v", bin, err)
		}
	}
	for _, p := range s.procs {
		if err := p.wait(); err != nil {
			t.Fatalf("testsvc: searchd: %v", err)
		}
	}
	return s
}

// config is partition i's searchd configuration.
func (s *Sphinx) config(i int) string {
	p := s.procs[i]
	var b strings.Builder
	fmt.Fprintf(&b, `index convoy_msgs {
  type = rt
  path = %s/convoy_msgs
  rt_field = uni
  rt_field = bi
  rt_attr_bigint = mid
  rt_attr_bigint = conv_id
  rt_attr_bigint = seq
  rt_attr_bigint = sender_uid
  rt_attr_uint = msg_type
  rt_attr_bigint = created_ms
  rt_attr_uint = deleted
  rt_mem_limit = 256M
  charset_table = 0..9, a..z
  min_word_len = 1
  dict = keywords
}
`, p.dir)
	if i == 0 {
		fmt.Fprintf(&b, `index convoy_checkpoints {
  type = rt
  path = %s/convoy_checkpoints
  rt_field = name
  rt_attr_string = pos
}
index convoy_msgs_dist {
  type = distributed
  local = convoy_msgs
`, p.dir)
		for _, a := range s.procs[1:] {
			fmt.Fprintf(&b, "  agent = 127.0.0.1:%d:convoy_msgs\n", a.port)
		}
		b.WriteString("}\n")
	}
	fmt.Fprintf(&b, `searchd {
  listen = 127.0.0.1:%d
  listen = 127.0.0.1:%d:mysql41
  log = %[3]s/searchd.log
  query_log = %[3]s/query.log
  query_log_format = sphinxql
  pid_file = %[3]s/searchd.pid
  binlog_path = %[3]s
  workers = threads
  max_children = 32
}
`, p.port, p.qlPort, p.dir)
	return b.String()
}

func (p *searchd) wait() error {
	deadline := time.Now().Add(sphinxReady)
	for {
		select {
		case <-p.done:
			b, _ := os.ReadFile(filepath.Join(p.dir, "console.log"))
			return fmt.Errorf("searchd on %d exited: %s", p.qlPort, b)
		default:
		}
		db, err := sql.Open("mysql", fmt.Sprintf("tcp(127.0.0.1:%d)/?timeout=1s&interpolateParams=true", p.qlPort))
		if err == nil {
			err = db.Ping()
			db.Close()
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("searchd on %d: not answering after %s: %v", p.qlPort, sphinxReady, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Addrs are the partitions' SphinxQL addresses, in partition order.
func (s *Sphinx) Addrs() []string {
	out := make([]string, len(s.procs))
	for i, p := range s.procs {
		out[i] = fmt.Sprintf("127.0.0.1:%d", p.qlPort)
	}
	return out
}

// QueryLog is partition i's query log: which searches reached it.
func (s *Sphinx) QueryLog(i int) string {
	b, _ := os.ReadFile(filepath.Join(s.procs[i].dir, "query.log"))
	return string(b)
}

func (s *Sphinx) kill() {
	for _, p := range s.procs {
		if p.cmd != nil && p.cmd.Process != nil {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}
