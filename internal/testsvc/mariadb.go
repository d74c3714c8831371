// Package testsvc starts real backing services (MariaDB, Redis, etcd) for
// tests, each on its own loopback port and in its own directory, and tears
// them down with t.Cleanup. Tests never skip when a binary is missing: they
// fail and name the Debian package to install (scripts/test.sh installs them).
package testsvc

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // registers the "mysql" driver used by DSN
)

const (
	mariadbdPath  = "/usr/sbin/mariadbd"
	mariadbPkg    = "mariadb-server"
	mariadbReady  = 20 * time.Second // bound on "SELECT 1 works" after exec
	mariadbStopTO = 30 * time.Second // graceful shutdown bound before SIGKILL
)

// mariadbFileArgs are the settings that shape files in the datadir. They are
// given to mariadb-install-db and to every mariadbd start, so a copied
// template never has to be converted (a redo log of another size would be
// rebuilt on first start) and they are part of the template cache key.
var mariadbFileArgs = []string{
	"--innodb-log-file-size=48M",
	"--innodb-buffer-pool-size=64M",
	"--character-set-server=utf8mb4",
	"--collation-server=utf8mb4_general_ci",
}

// MariaDB is one mariadbd process with its own datadir, socket and port.
// root has an empty password and may connect over TCP.
type MariaDB struct {
	t        testing.TB
	dir      string // instance directory: data/, sock, error.log, binlog.*
	port     int
	serverID int
	extra    []string

	mu   sync.Mutex
	proc *exec.Cmd
	done chan struct{} // closed when proc has exited
	db   *sql.DB       // lazily opened admin pool for Exec
}

// MariaDBOption customises StartMariaDB.
type MariaDBOption func(*MariaDB)

// WithServerID sets --server-id (default: unique per test process). Binlog
// consumers need distinct ids when they replicate from several instances.
func WithServerID(id int) MariaDBOption { return func(m *MariaDB) { m.serverID = id } }

// WithMariaDBArgs appends raw mariadbd flags; later flags win, so this can
// override any default below (e.g. "--max-connections=2000").
func WithMariaDBArgs(args ...string) MariaDBOption {
	return func(m *MariaDB) { m.extra = append(m.extra, args...) }
}

// WithMariaDBPort fixes the TCP port instead of picking a free one.
func WithMariaDBPort(port int) MariaDBOption { return func(m *MariaDB) { m.port = port } }

var mariadbServerIDs atomic.Int64

// StartMariaDB starts a fresh MariaDB from a copy of a cached, freshly
// installed datadir and waits until SELECT 1 works over TCP. The instance is
// killed and its directory removed when the test ends.
func StartMariaDB(t testing.TB, opts ...MariaDBOption) *MariaDB {
	t.Helper()
	NeedsServers(t)
	tmpl, err := mariadbTemplate()
	if err != nil {
		t.Fatalf("testsvc: %v", err)
	}
	// Not t.TempDir(): the unix socket lives inside and sun_path is limited
	// to 107 bytes, which long (sub)test names exceed.
	dir, err := os.MkdirTemp("", "convoy-mariadb-")
	if err != nil {
		t.Fatalf("testsvc: %v", err)
	}
	m := &MariaDB{t: t, dir: dir, serverID: 1000 + int(mariadbServerIDs.Add(1))}
	for _, o := range opts {
		o(m)
	}
	t.Cleanup(func() {
		m.kill()
		m.closeDB()
		if t.Failed() && os.Getenv("CONVOY_KEEP_TESTDIRS") != "" {
			t.Logf("testsvc: keeping MariaDB dir %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	if err := copyTree(tmpl, filepath.Join(dir, "data")); err != nil {
		t.Fatalf("testsvc: copy MariaDB template: %v", err)
	}
	fixedPort := m.port != 0
	// freePort closes its listener before mariadbd binds, so another process
	// can take the port in between; retry with a new port on a bind failure.
	for attempt := 0; ; attempt++ {
		if !fixedPort {
			m.port = freePort(t)
		}
		err := m.start()
		if err == nil {
			return m
		}
		if fixedPort || attempt == 2 || !errors.Is(err, errAddrInUse) {
			t.Fatalf("testsvc: start MariaDB: %v", err)
		}
	}
}

// Addr is host:port of the TCP listener.
func (m *MariaDB) Addr() string { return "127.0.0.1:" + strconv.Itoa(m.port) }

// Port is the TCP port.
func (m *MariaDB) Port() int { return m.port }

// Dir is the instance directory (data/, error.log, binlog.*), for debugging.
func (m *MariaDB) Dir() string { return m.dir }

// DSN returns a go-sql-driver/mysql DSN for root on database db ("" for
// none). Choices:
//   - collation=utf8mb4_general_ci: the driver would otherwise ask for
//     utf8mb4_0900_ai_ci (255), which MariaDB does not know; it then falls
//     back to latin1 for the connection.
//   - interpolateParams=false (the default, spelled out): parameterised
//     queries use server-side prepared statements, as applications do, so
//     direct-vs-proxy comparisons exercise the same protocol path.
//   - multiStatements=true: fixtures and schema files (schema/im.sql) can be
//     sent in one Exec. Direct MariaDB only; through the proxy, build your
//     own DSN and decide whether multi-statements are under test.
//   - parseTime is left off: DATETIME(3) values come back as their exact
//     text, which compares byte-for-byte between MariaDB and the proxy.
func (m *MariaDB) DSN(db string) string {
	return fmt.Sprintf("root@tcp(%s)/%s?collation=utf8mb4_general_ci&interpolateParams=false&multiStatements=true&timeout=5s",
		m.Addr(), db)
}

// Open returns a *sql.DB for root on db, closed at the end of the test.
func (m *MariaDB) Open(t testing.TB, db string) *sql.DB {
	t.Helper()
	h, err := sql.Open("mysql", m.DSN(db))
	if err != nil {
		t.Fatalf("testsvc: open %s: %v", m.Addr(), err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// Exec runs each statement in order as root (no default database; qualify
// names or send "USE x" in the same string, multiStatements is on) and fails
// the test on the first error.
func (m *MariaDB) Exec(t testing.TB, stmts ...string) {
	t.Helper()
	db := m.adminDB(t)
	for _, s := range stmts {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		_, err := db.ExecContext(ctx, s)
		cancel()
		if err != nil {
			t.Fatalf("testsvc: MariaDB %s: %v\nSQL: %s", m.Addr(), err, s)
		}
	}
}

// Kill sends SIGKILL (a crash: no shutdown, no flush) and waits for exit.
func (m *MariaDB) Kill() {
	m.closeDB()
	m.kill()
}

// Pause stops the server process (SIGSTOP) without closing anything: its
// sockets accept connections (the kernel completes the TCP handshake) and
// never answer, as a hung server does. It returns once the process is
// stopped. Resume continues it (SIGCONT).
func (m *MariaDB) Pause() {
	m.t.Helper()
	if err := waitStopped(m.signal(syscall.SIGSTOP)); err != nil {
		m.t.Fatalf("testsvc: MariaDB %s: %v", m.Addr(), err)
	}
}

// Resume continues a paused server.
func (m *MariaDB) Resume() {
	m.t.Helper()
	m.signal(syscall.SIGCONT)
}

func (m *MariaDB) signal(sig syscall.Signal) int {
	m.t.Helper()
	m.mu.Lock()
	p := m.proc
	m.mu.Unlock()
	if p == nil {
		m.t.Fatalf("testsvc: MariaDB %s: %v while not running", m.Addr(), sig)
	}
	if err := p.Process.Signal(sig); err != nil {
		m.t.Fatalf("testsvc: MariaDB %s: %v: %v", m.Addr(), sig, err)
	}
	return p.Process.Pid
}

// Stop shuts the server down gracefully (SIGTERM), waiting up to 30 s.
func (m *MariaDB) Stop() {
	m.t.Helper()
	m.closeDB()
	m.mu.Lock()
	p, done := m.proc, m.done
	m.mu.Unlock()
	if p == nil {
		return
	}
	_ = p.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(mariadbStopTO):
		m.kill()
		m.t.Errorf("testsvc: MariaDB %s did not stop within %s; killed", m.Addr(), mariadbStopTO)
	}
	m.mu.Lock()
	m.proc = nil
	m.mu.Unlock()
}

// Start restarts a stopped or killed server on the same datadir and port.
func (m *MariaDB) Start() {
	m.t.Helper()
	m.mu.Lock()
	running := m.proc != nil
	m.mu.Unlock()
	if running {
		m.t.Fatalf("testsvc: MariaDB %s: Start while running", m.Addr())
	}
	if err := m.start(); err != nil {
		m.t.Fatalf("testsvc: restart MariaDB: %v", err)
	}
}

var errAddrInUse = errors.New("address already in use")

func (m *MariaDB) args() []string {
	a := []string{
		"--no-defaults", // must be first: ignore /etc/mysql (the system server's config)
		"--user=root",
		"--datadir=" + filepath.Join(m.dir, "data"),
		"--port=" + strconv.Itoa(m.port),
		"--bind-address=127.0.0.1",
		"--socket=" + filepath.Join(m.dir, "sock"),
		"--pid-file=" + filepath.Join(m.dir, "mariadbd.pid"),
		"--log-error=" + filepath.Join(m.dir, "error.log"),
		// A tmpdir of its own: mariadbd deletes every #sql* file in its
		// tmpdir when it starts, so instances sharing /tmp removed each
		// other's internal temporary tables (errno 6 "Error on delete of
		// '/tmp/#sql-temptable-...'" on information_schema queries).
		"--tmpdir=" + m.dir,
		"--skip-name-resolve",
		"--log-bin=" + filepath.Join(m.dir, "binlog"),
		"--binlog-format=ROW",
		// Binlog consumers (package binlog) need whole rows with column
		// names: FULL row images (MariaDB's default, spelled out) and FULL
		// row metadata (names, signedness, primary key in TABLE_MAP events).
		"--binlog-row-image=FULL",
		"--binlog-row-metadata=FULL",
		"--server-id=" + strconv.Itoa(m.serverID),
		"--max-connections=500",
		// Small and fast: tests need correctness, not durability against
		// power loss. Committed data still survives SIGKILL of mariadbd
		// (the OS has it), which is what crash tests exercise.
		"--performance-schema=OFF",
		"--innodb-flush-log-at-trx-commit=2",
		"--sync-binlog=0",
		"--innodb-doublewrite=0",
	}
	a = append(a, mariadbFileArgs...)
	return append(a, m.extra...)
}

// start execs mariadbd and waits until it answers over TCP: this
// instance (its datadir), not another that took the port first.
func (m *MariaDB) start() error {
	if _, err := os.Stat(mariadbdPath); err != nil {
		return fmt.Errorf("%s not found: apt-get install %s", mariadbdPath, mariadbPkg)
	}
	errLog := filepath.Join(m.dir, "error.log")
	// Remember where this start's log begins so a failure shows only it.
	var logOff int64
	if fi, err := os.Stat(errLog); err == nil {
		logOff = fi.Size()
	}
	cmd := exec.Command(mariadbdPath, m.args()...)
	var out bytes.Buffer // mariadbd writes almost nothing here (log-error is a file)
	cmd.Stdout, cmd.Stderr = &out, &out
	done, err := spawn(cmd)
	if err != nil {
		return fmt.Errorf("exec %s: %v", mariadbdPath, err)
	}
	m.mu.Lock()
	m.proc, m.done = cmd, done
	m.mu.Unlock()

	db, err := sql.Open("mysql", fmt.Sprintf("root@tcp(%s)/?timeout=1s", m.Addr()))
	if err != nil {
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(mariadbReady)
	var lastErr error
	for {
		select {
		case <-done:
			m.mu.Lock()
			m.proc = nil
			m.mu.Unlock()
			tail := mariadbLogTail(errLog, logOff) + out.String()
			if strings.Contains(tail, "Address already in use") || strings.Contains(tail, "Do you already have another server running") {
				return fmt.Errorf("mariadbd on %s: %w\n%s", m.Addr(), errAddrInUse, tail)
			}
			return fmt.Errorf("mariadbd on %s exited (%v) before accepting connections; %s tail:\n%s",
				m.Addr(), cmd.ProcessState, errLog, tail)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		var datadir string
		lastErr = db.QueryRowContext(ctx, "SELECT @@datadir").Scan(&datadir)
		cancel()
		if lastErr == nil && filepath.Clean(datadir) == filepath.Join(m.dir, "data") {
			return nil
		}
		if lastErr == nil {
			// Another test's server holds the port (picked free, taken
			// before this one bound it): this one exits with "Address
			// already in use" and the caller retries on another port.
			lastErr = fmt.Errorf("another server (datadir %s) answers on the port", datadir)
		}
		if time.Now().After(deadline) {
			m.kill()
			return fmt.Errorf("mariadbd on %s: not answering after %s: %v; %s tail:\n%s",
				m.Addr(), mariadbReady, lastErr, errLog, mariadbLogTail(errLog, logOff))
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func (m *MariaDB) kill() {
	m.mu.Lock()
	p, done := m.proc, m.done
	m.proc = nil
	m.mu.Unlock()
	if p == nil {
		return
	}
	_ = p.Process.Kill()
	<-done
}

func (m *MariaDB) adminDB(t testing.TB) *sql.DB {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.db == nil {
		db, err := sql.Open("mysql", m.DSN(""))
		if err != nil {
			t.Fatalf("testsvc: %v", err)
		}
		m.db = db
	}
	return m.db
}

func (m *MariaDB) closeDB() {
	m.mu.Lock()
	db := m.db
	m.db = nil
	m.mu.Unlock()
	if db != nil {
		db.Close()
	}
}

// mariadbLogTail returns the last ~40 lines written to path after offset.
func mariadbLogTail(path string, off int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)\n", path, err)
	}
	if off > 0 && off <= int64(len(b)) {
		b = b[off:]
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n") + "\n"
}

// ---- datadir template -------------------------------------------------

var (
	mariadbTmplOnce sync.Once
	mariadbTmplDir  string
	mariadbTmplErr  error
)

// mariadbTemplate returns a freshly installed, never-started datadir, shared
// by every test process on the machine: it lives in os.TempDir() under a name
// keyed by the mariadbd version and the install flags, so an upgrade or a
// flag change installs a new one. Instances copy it (a ~60 MB copy) instead
// of running mariadb-install-db each time.
func mariadbTemplate() (string, error) {
	mariadbTmplOnce.Do(func() { mariadbTmplDir, mariadbTmplErr = buildMariaDBTemplate() })
	return mariadbTmplDir, mariadbTmplErr
}

const mariadbTmplMarker = ".convoy-template-complete"

func buildMariaDBTemplate() (string, error) {
	install, err := exec.LookPath("mariadb-install-db")
	if err != nil {
		return "", fmt.Errorf("mariadb-install-db not found: apt-get install %s", mariadbPkg)
	}
	if _, err := os.Stat(mariadbdPath); err != nil {
		return "", fmt.Errorf("%s not found: apt-get install %s", mariadbdPath, mariadbPkg)
	}
	ver, err := exec.Command(mariadbdPath, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %v", mariadbdPath, err)
	}
	installArgs := append([]string{
		"--no-defaults",
		"--auth-root-authentication-method=normal", // root@localhost, empty password, TCP allowed
		"--skip-test-db",
		"--user=root",
	}, mariadbFileArgs...)
	h := sha256.Sum256([]byte(string(ver) + "\x00" + strings.Join(installArgs, "\x00")))
	dir := filepath.Join(os.TempDir(), "convoy-mariadb-template-"+hex.EncodeToString(h[:6]))
	if _, err := os.Stat(filepath.Join(dir, mariadbTmplMarker)); err == nil {
		return dir, nil
	}
	// Install into a private directory and rename it into place, so
	// concurrent test processes never see a half-installed template.
	tmp, err := os.MkdirTemp(os.TempDir(), "convoy-mariadb-install-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	data := filepath.Join(tmp, "data")
	args := append(installArgs, "--datadir="+data)
	out, err := exec.Command(install, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s %s: %v\n%s", install, strings.Join(args, " "), err, out)
	}
	if err := os.WriteFile(filepath.Join(data, mariadbTmplMarker), nil, 0o644); err != nil {
		return "", err
	}
	if err := os.Rename(data, dir); err != nil {
		// Another process won the race; use its template if complete.
		if _, serr := os.Stat(filepath.Join(dir, mariadbTmplMarker)); serr == nil {
			return dir, nil
		}
		// A stale, incomplete directory (a process died mid-rename is
		// impossible, but someone may have created it by hand): replace it.
		os.RemoveAll(dir)
		if err := os.Rename(data, dir); err != nil {
			return "", fmt.Errorf("install MariaDB template: %v", err)
		}
	}
	return dir, nil
}

// copyTree copies regular files and directories from src to dst (which must
// not exist), skipping the template marker.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		if rel == mariadbTmplMarker || !d.Type().IsRegular() {
			return nil
		}
		return copyFile(path, target)
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o660)
	if err != nil {
		return err
	}
	// io.Copy uses copy_file_range on Linux: in-kernel, and sparse-aware
	// on filesystems that support it.
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
