package integration

import (
	"fmt"
	"strings"
	"testing"
)

// TestSessionIdentityAndCollation: what a session reads about itself through
// Convoy is about the client's session, not a pooled backend connection:
// the Convoy account (CURRENT_USER(), USER()), and the collation the client
// asked for in its handshake, also for MariaDB-only ids and single-byte
// character sets (go-sql-driver's collation= parameter), compared with
// MariaDB.
func TestSessionIdentityAndCollation(t *testing.T) {
	s := newStack(t)
	db := s.convoy.open(t, "app", "app secret", "im")
	var cur, user string
	if err := db.QueryRow("SELECT CURRENT_USER(), USER()").Scan(&cur, &user); err != nil {
		t.Fatal(err)
	}
	if cur != "app@%" || user != "app@127.0.0.1" {
		t.Errorf("CURRENT_USER(), USER() = %q, %q; want the Convoy account app@%%, app@127.0.0.1", cur, user)
	}
	read := func(dsn string) string {
		db := openDSN(t, dsn)
		var cs, cc string
		if err := db.QueryRow("SELECT @@character_set_client, @@collation_connection").Scan(&cs, &cc); err != nil {
			return "error: " + err.Error()
		}
		return cs + "/" + cc
	}
	cvDSN := func(coll string) string {
		return strings.Replace(s.convoy.dsn("app", "app secret", "im"), "collation=utf8mb4_general_ci", "collation="+coll, 1)
	}
	for _, coll := range []string{"utf8mb4_general_ci", "utf8mb4_unicode_ci", "latin1_general_ci", "latin1_swedish_ci", "cp1257_bin", "koi8r_general_ci", "utf8_general_ci"} {
		ref := fmt.Sprintf("root@tcp(%s)/im?collation=%s", s.ref.Addr(), coll)
		if want, got := read(ref), read(cvDSN(coll)); want != got || strings.HasPrefix(got, "error") {
			t.Errorf("handshake collation %s: mariadb %s, convoy %s", coll, want, got)
		}
	}
	if got := read(cvDSN("cp1257_bin")); got != "cp1257/cp1257_bin" {
		t.Errorf("handshake collation cp1257_bin through Convoy: %s", got)
	}
	// GBK-style sets stay refused, with the reason.
	_, err := openDSN(t, cvDSN("gbk_chinese_ci")).Exec("SELECT 1")
	if errno(err) != 1235 || !strings.Contains(err.Error(), "gbk") {
		t.Errorf("handshake with gbk: %v", err)
	}
}
