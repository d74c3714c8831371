package routecfg

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"gopkg.in/yaml.v3"

	"github.com/convoy-im/convoy/internal/etcdtest"
	"github.com/convoy-im/convoy/router"
)

func runCLI(t *testing.T, cli *clientv3.Client, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := RunCLI(etcdtest.Ctx(t), args, cli, "clitest", &out)
	return out.String(), err
}

// findKeys collects every object key in a decoded JSON value.
func findKeys(v any, keys map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			keys[k] = true
			findKeys(e, keys)
		}
	case []any:
		for _, e := range x {
			findKeys(e, keys)
		}
	}
}

func TestCLI(t *testing.T) {
	_, cli := etcdtest.Start(t)
	t.Setenv("DS0_PW", "s3cret-from-env")
	dir := t.TempDir()

	// Bad flags fail before touching etcd, with a sentence saying why.
	for _, tc := range []struct{ args, want string }{
		{"init", "at least one --datasource"},
		{"init --datasource ds0=app@10.0.0.1:3306,password=hunter2", "passwords are never stored in etcd"},
		{"init --datasource ds0=10.0.0.1:3306", "needs a user"},
		{"init --datasource ds0=app@10.0.0.1", "HOST:PORT"},
		{"init --datasource ds0=app@10.0.0.1:3306 --dbs 3", "cannot split"},
		{"init --datasource ds0=app@10.0.0.1:3306,tls=maybe", "tls mode"},
		{"init --datasource ds0=app@10.0.0.1:3306,tls_cert=/c.pem", "both cert_file and key_file"},
		{"init --file x.json --dbs 4", "drop --dbs"},
		{"apply", "exactly one argument"},
		{"frobnicate", "unknown command"},
		{"show", "has no route document yet"},
	} {
		if _, err := runCLI(t, cli, strings.Fields(tc.args)...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("routes %s: err = %v, want it to mention %q", tc.args, err, tc.want)
		}
	}

	out, err := runCLI(t, cli, "init",
		"--datasource", "ds0=app@127.0.0.1:3306,password_env=DS0_PW",
		"--datasource", "ds1=app@127.0.0.2:3306,password_file=/etc/convoy/ds1.pw,tls=verify-ca,tls_ca=/etc/convoy/ca.pem")
	if err != nil || !strings.Contains(out, "version 1") {
		t.Fatalf("routes init = %q, %v", out, err)
	}
	if _, err := runCLI(t, cli, "init", "--datasource", "ds0=app@127.0.0.1:3306"); err == nil ||
		!strings.Contains(err.Error(), "already has a route document (version 1)") {
		t.Fatalf("second init: err = %v, want 'already has a route document (version 1)'", err)
	}

	shown, err := runCLI(t, cli, "show")
	if err != nil {
		t.Fatalf("routes show: %v", err)
	}
	var doc router.Document
	dec := json.NewDecoder(strings.NewReader(shown))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("show output does not parse back as a document: %v\n%s", err, shown)
	}
	if _, err := router.NewSnapshot(doc); err != nil {
		t.Fatalf("show output is not a valid document: %v", err)
	}
	if doc.Datasources[1].TLS != (router.DatasourceTLS{Mode: router.TLSVerifyCA, CAFile: "/etc/convoy/ca.pem"}) || doc.Datasources[0].TLS.Mode != "" {
		t.Fatalf("TLS options did not reach the document:\n%s", shown)
	}
	if doc.Version != 1 || len(doc.Datasources) != 2 || len(doc.Shards) != 8 || doc.Shards[0].Table != nil ||
		doc.Shards[0].Database != "im_0" || doc.Shards[3].Datasource != "ds0" || doc.Shards[4].Datasource != "ds1" {
		t.Fatalf("init did not build the default 8x128 layout over two datasources:\n%s", shown)
	}
	var generic any
	_ = json.Unmarshal([]byte(shown), &generic)
	keys := map[string]bool{}
	findKeys(generic, keys)
	if keys["password"] || strings.Contains(shown, "s3cret") || !strings.Contains(shown, `"password_env": "DS0_PW"`) {
		t.Fatalf("show output must name password sources and never hold a password:\n%s", shown)
	}

	// Edit (move im_7 to ds0) and apply.
	doc.Shards[7].Datasource = "ds0"
	b, _ := json.MarshalIndent(doc, "", "  ")
	edited := filepath.Join(dir, "routes.json")
	if err := os.WriteFile(edited, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := runCLI(t, cli, "apply", edited); err != nil || !strings.Contains(out, "version 2") {
		t.Fatalf("routes apply = %q, %v; want version 2", out, err)
	}
	// The same file again was edited from version 1: refused, clearly.
	_, err = runCLI(t, cli, "apply", edited)
	if err == nil || !strings.Contains(err.Error(), "edited from version 1 but etcd holds version 2") ||
		!strings.Contains(err.Error(), "routes show") {
		t.Fatalf("apply of a stale file: err = %v, want a version-conflict sentence", err)
	}

	// YAML works too; a misspelt field is an error, not a silent drop.
	doc.Version = 2
	doc.DefaultDatasource = "ds1"
	y, _ := yaml.Marshal(doc)
	yml := filepath.Join(dir, "routes.yaml")
	if err := os.WriteFile(yml, y, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := runCLI(t, cli, "apply", yml); err != nil || !strings.Contains(out, "version 3") {
		t.Fatalf("routes apply (YAML) = %q, %v; want version 3", out, err)
	}
	typo := filepath.Join(dir, "typo.yaml")
	_ = os.WriteFile(typo, bytes.Replace(y, []byte("default_datasource"), []byte("default_datasorce"), 1), 0o600)
	if _, err := runCLI(t, cli, "apply", typo); err == nil || !strings.Contains(err.Error(), "not a valid route document") {
		t.Fatalf("apply with a misspelt field: err = %v", err)
	}
	withPw := filepath.Join(dir, "pw.json")
	_ = os.WriteFile(withPw, bytes.Replace(b, []byte(`"password_env"`), []byte(`"password"`), 1), 0o600)
	if _, err := runCLI(t, cli, "apply", withPw); err == nil || !strings.Contains(err.Error(), "contains a password") {
		t.Fatalf("apply of a file with a password: err = %v", err)
	}

	// init --force replaces the document as the next version.
	if out, err := runCLI(t, cli, "init", "--force", "--tables-per-db", "4",
		"--datasource", "ds0=app@127.0.0.1:3306"); err != nil || !strings.Contains(out, "version 4") {
		t.Fatalf("routes init --force = %q, %v; want version 4", out, err)
	}
	shown, _ = runCLI(t, cli, "show")
	doc = router.Document{}
	if err := json.Unmarshal([]byte(shown), &doc); err != nil || len(doc.Shards) != 32 || doc.Shards[1].Table == nil {
		t.Fatalf("after init --force --tables-per-db 4 show = %s (%v); want 32 shared-table ranges", shown, err)
	}
}
