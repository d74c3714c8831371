package main

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	"gopkg.in/yaml.v3"
)

// TestShippedConfigs: the configs of make run and docker compose load with
// the strict decoder and run the system as designed (hot tier on; a log a
// person can read for make run).
func TestShippedConfigs(t *testing.T) {
	t.Setenv("CONVOY_LOG_FORMAT", "")
	dev, err := loadConfig("../../config/dev.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !dev.HotTier.Enabled || !reflect.DeepEqual(dev.HotTier.Addrs, []string{"127.0.0.1:16379"}) {
		t.Errorf("dev.yaml hot_tier = %+v, want enabled on the Redis of dev-up.sh (127.0.0.1:16379)", dev.HotTier)
	}
	if dev.LogFormat != "console" {
		t.Errorf("dev.yaml log_format = %q, want console", dev.LogFormat)
	}
	docker, err := loadConfig("../../config/docker.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !docker.HotTier.Enabled || docker.LogFormat != "json" {
		t.Errorf("docker.yaml: hot_tier %+v, log_format %q; want the tier on and json", docker.HotTier, docker.LogFormat)
	}
	if !docker.Cold.Enabled || !strings.HasPrefix(docker.Cold.Store, "s3://convoy-cold?endpoint=http://minio:9000") || strings.Contains(docker.Cold.Store, "secret") {
		t.Errorf("docker.yaml: cold %+v; want the archiver on the compose MinIO, credentials from the environment", docker.Cold)
	}
	if dev.Cold.Enabled || dev.Cold.Budget != 800*time.Millisecond || dev.Cold.Prefix != "history" {
		t.Errorf("dev.yaml: cold %+v; want it off by default, budget 800ms, prefix history", dev.Cold)
	}
	if url, err := coldStoreURL(dev); err != nil || !strings.HasPrefix(url, "file:///") || !strings.HasSuffix(url, "/.state/cold") {
		t.Errorf("default cold store %q, %v; want file://<dir>/.state/cold", url, err)
	}
}

// commentedKey is a line of dev.yaml that shows a key commented out.
var commentedKey = regexp.MustCompile(`^(\s*)# (\s*(?:- )?[a-z0-9_]+:.*)$`)

// TestDevConfigDocumentsEveryKey: config/dev.yaml with its commented-out
// keys switched on still loads, and then names every key Config has, so
// the file stays the reference it claims to be.
func TestDevConfigDocumentsEveryKey(t *testing.T) {
	b, err := os.ReadFile("../../config/dev.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		lines = append(lines, commentedKey.ReplaceAllString(l, "$1$2"))
	}
	all := strings.Join(lines, "\n")
	f, err := os.CreateTemp(t.TempDir(), "dev-all-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(all); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := loadConfig(f.Name()); err != nil {
		t.Fatalf("dev.yaml with every commented key switched on: %v", err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(all), &doc); err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	yamlPaths(doc, "", have)
	var missing []string
	for _, p := range structPaths(reflect.TypeOf(Config{}), "") {
		if !have[p] {
			missing = append(missing, p)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("config/dev.yaml does not mention these keys (add them, commented out with their default): %s", strings.Join(missing, ", "))
	}
}

func yamlPaths(v any, prefix string, out map[string]bool) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			out[prefix+k] = true
			yamlPaths(x, prefix+k+".", out)
		}
	case []any:
		for _, x := range v {
			yamlPaths(x, prefix, out)
		}
	}
}

// structPaths lists the yaml keys of t (nested structs and lists of structs
// as a.b; maps are values).
func structPaths(t reflect.Type, prefix string) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := strings.Split(f.Tag.Get("yaml"), ",")[0]
		if name == "" || name == "-" {
			continue
		}
		out = append(out, prefix+name)
		ft := f.Type
		if ft.Kind() == reflect.Slice {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft.PkgPath() != "time" {
			out = append(out, structPaths(ft, prefix+name+".")...)
		}
	}
	return out
}

func TestLogFormatEnv(t *testing.T) {
	t.Setenv("CONVOY_LOG_FORMAT", "console")
	c, err := loadConfig("")
	if err != nil || c.LogFormat != "console" {
		t.Fatalf("CONVOY_LOG_FORMAT=console: %q %v", c.LogFormat, err)
	}
	t.Setenv("CONVOY_LOG_FORMAT", "")
	if c, _ := loadConfig(""); c.LogFormat != "json" {
		t.Fatalf("default log_format %q, want json", c.LogFormat)
	}
}

// isoTime is the start of an ISO-8601 time as zap's encoder writes it.
var isoTime = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d{4})`)

func TestLoggerFormats(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger("info", "console", zapcore.AddSync(&buf))
	if err != nil {
		t.Fatal(err)
	}
	log.Named("proxy").Info("convoy serving", zapcore.Field{Key: "listen", Type: zapcore.StringType, String: "127.0.0.1:3307"})
	line := buf.String()
	if !isoTime.MatchString(line) || !strings.Contains(line, "\tINFO\tproxy\t") || !strings.Contains(line, "convoy serving") || !strings.Contains(line, `{"listen": "127.0.0.1:3307"}`) {
		t.Errorf("console line %q: want ISO-8601 time, INFO, logger, message, fields", line)
	}

	buf.Reset()
	if log, err = newLogger("debug", "json", zapcore.AddSync(&buf)); err != nil {
		t.Fatal(err)
	}
	log.Debug("x")
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatalf("json line %q: %v", buf.String(), err)
	}
	if ts, _ := m["ts"].(string); !isoTime.MatchString(ts) || m["level"] != "debug" || m["msg"] != "x" {
		t.Errorf("json line %v: want an ISO-8601 ts, level and msg", m)
	}

	if _, err := newLogger("info", "text", zapcore.AddSync(&buf)); err == nil {
		t.Error(`log_format "text" accepted`)
	}
}

// users[].txn sets the account's default convoy_txn; anything but single
// or outbox is refused when the config loads.
func TestUserTxnDefault(t *testing.T) {
	var c Config
	c.Users = []UserConfig{{Name: "a", Password: "x"}, {Name: "b", Password: "x", Txn: "outbox"}, {Name: "c", Password: "x", Txn: "Single"}}
	users, err := configUsers(c)
	if err != nil {
		t.Fatal(err)
	}
	if users[0].Outbox || !users[1].Outbox || users[2].Outbox {
		t.Fatalf("outbox defaults %v %v %v, want false true false", users[0].Outbox, users[1].Outbox, users[2].Outbox)
	}
	c.Users = []UserConfig{{Name: "d", Password: "x", Txn: "2pc"}}
	if _, err := configUsers(c); err == nil || !strings.Contains(err.Error(), "user d") {
		t.Fatalf("txn 2pc: %v, want an error naming the user", err)
	}
}
