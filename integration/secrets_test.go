package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/convoy-im/convoy/internal/testsvc"
)

// TestNoSecretInOutput: with every secret Convoy handles set (a datasource
// password, client account passwords, a Redis ACL password) and the paths
// that report errors exercised (failed logins with a wrong password, a
// datasource killed under traffic), no secret appears in the log, the
// metrics page, the SHOW directives' output or an error message.
func TestNoSecretInOutput(t *testing.T) {
	const (
		dsPw    = "Ds-S3cret-7f3a"
		appPw   = "App-S3cret-91bc"
		redisPw = "Rd-S3cret-44e1"
		wrongPw = "Wrong-S3cret-0d2e"
	)
	secrets := []string{dsPw, appPw, redisPw, wrongPw}
	s := newStack(t)
	for _, m := range s.ds {
		m.Exec(t, fmt.Sprintf("CREATE USER convoyds@'%%' IDENTIFIED BY '%s'", dsPw), "GRANT ALL ON *.* TO convoyds@'%'")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	doc, err := s.store.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range doc.Datasources {
		doc.Datasources[i].User = "convoyds"
		doc.Datasources[i].PasswordEnv = "IT_DS_PASSWORD"
	}
	if _, err := s.store.Apply(ctx, doc); err != nil {
		t.Fatal(err)
	}
	t.Setenv("IT_DS_PASSWORD", dsPw)
	t.Setenv("IT_REDIS_PASSWORD", redisPw)
	r := testsvc.StartRedis(t, testsvc.WithRedisArgs("--user", "convoy", "on", ">"+redisPw, "~*", "&*", "+@all"))
	p := startConvoyUsers(t, s.etcd.Endpoints(), fmt.Sprintf(`  - {name: convoy, password: convoy, admin: true}
  - {name: app, password: %q}`, appPw),
		fmt.Sprintf("hot_tier: {enabled: true, addrs: [%q], username: convoy, password_env: IT_REDIS_PASSWORD}", r.Addr()))

	var outputs []string
	app := openDSN(t, p.dsn("app", appPw, "im"))
	for i := range 20 {
		if _, err := app.ExecContext(ctx, "INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (?, 1, ?, 1, 1, NOW(3))", i, 1000+i); err != nil {
			t.Fatalf("insert through the datasource account: %v", err)
		}
		if _, err := app.QueryContext(ctx, "SELECT seq FROM conv_msg WHERE conv_id = ? AND seq < 100 ORDER BY seq DESC LIMIT 20", i); err != nil {
			t.Fatalf("history read: %v", err)
		}
	}
	for _, user := range []string{"app", "convoy", "nobody"} {
		bad := openDSN(t, p.dsn(user, wrongPw, "im"))
		err := bad.PingContext(ctx)
		if errno(err) != 1045 {
			t.Fatalf("login with a wrong password: %v, want 1045", err)
		}
		outputs = append(outputs, err.Error())
	}
	admin := openDSN(t, p.dsn("convoy", "convoy", "im"))
	for _, q := range []string{"SHOW ROUTES", "SHOW DATASOURCES", "SHOW PROXIES", "SHOW SHARD HEALTH"} {
		outputs = append(outputs, fmt.Sprint(queryRows(t, admin, "/*+ convoy "+q+" */")))
	}
	// A datasource dies under traffic: its errors are logged and returned.
	s.ds[1].Kill()
	for i := range 20 {
		if _, err := app.ExecContext(ctx, "INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (?, 2, ?, 1, 1, NOW(3))", i, 2000+i); err != nil {
			outputs = append(outputs, err.Error())
		}
	}
	outputs = append(outputs, fmt.Sprint(queryRows(t, admin, "/*+ convoy SHOW DATASOURCES */")))
	resp, err := http.Get("http://" + p.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	outputs = append(outputs, string(body))
	time.Sleep(200 * time.Millisecond) // let the log lines of the last errors land
	logText, err := os.ReadFile(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	outputs = append(outputs, string(logText))
	if !strings.Contains(string(logText), "ds1") {
		t.Fatalf("the log says nothing about the dead datasource: the scan would prove little\n%s", p.logTail())
	}
	for _, out := range outputs {
		for _, sec := range secrets {
			if strings.Contains(out, sec) {
				i := strings.Index(out, sec)
				t.Errorf("secret %q leaked: ...%s...", sec, out[max(0, i-200):min(len(out), i+len(sec)+50)])
			}
		}
	}
}
