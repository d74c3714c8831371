package integration

import (
	"context"
	"strings"
	"testing"
)

// TestPrivileges: Convoy's own accounts get what their privileges allow and
// MariaDB's errnos for the rest, over text and prepared statements; DROP /
// TRUNCATE of a sharded table needs the admin privilege; a database outside
// an account's list is refused at USE and at login (1044).
func TestPrivileges(t *testing.T) {
	s := newStack(t)
	p := startConvoyUsers(t, s.etcd.Endpoints(), `  - {name: convoy, password: convoy, admin: true}
  - {name: reader, password: r, privileges: [read]}
  - {name: writer, password: w, privileges: [read, write], databases: [im]}
  - {name: dba, password: d, privileges: [read, write, ddl]}`)
	ctx := context.Background()
	admin := openDSN(t, p.dsn("convoy", "convoy", "im"))
	mustExec(t, admin, "INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (9, 1, 90001, 1, 1, NOW(3))")

	type tc struct {
		user, pw, sql string
		errno         uint16 // 0: must succeed
		contains      string
	}
	for _, c := range []tc{
		{"reader", "r", "SELECT COUNT(*) FROM conv_msg WHERE conv_id = 9", 0, ""},
		{"reader", "r", "SHOW TABLES", 0, ""},
		{"reader", "r", "INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (9, 2, 90002, 1, 1, NOW(3))", 1142, "INSERT command denied to user 'reader'@'127.0.0.1' for table `conv_msg`"},
		{"reader", "r", "DELETE FROM conv_msg WHERE conv_id = 9", 1142, `"write"`},
		{"reader", "r", "CREATE TABLE app_notes (id INT PRIMARY KEY)", 1142, `"ddl"`},
		{"reader", "r", "/*+ convoy SHOW ROUTES */", 1227, "admin"},
		{"writer", "w", "UPDATE conv_msg SET msg_type = 2 WHERE conv_id = 9", 0, ""},
		{"writer", "w", "ALTER TABLE conv_msg ADD COLUMN x INT", 1142, "ALTER command denied"},
		{"writer", "w", "USE mysql", 1044, "to database 'mysql'"},
		{"writer", "w", "SELECT * FROM mysql.user", 1044, "to database 'mysql'"},
		{"writer", "w", "SELECT COUNT(*) FROM information_schema.TABLES", 0, ""},
		// The datasources' system databases (their accounts and password
		// hashes) are an admin's only, whatever the account's list.
		{"reader", "r", "SELECT User, Password FROM mysql.user", 1044, "to database 'mysql'"},
		{"dba", "d", "SELECT COUNT(*) FROM `mysql`.`db`", 1044, "to database 'mysql'"},
		{"dba", "d", "USE mysql", 1044, "to database 'mysql'"},
		{"reader", "r", "SELECT * FROM sys.version", 1044, "to database 'sys'"},
		{"reader", "r", "SHOW TABLES FROM mysql", 1044, "to database 'mysql'"},
		{"writer", "w", "SHOW TABLE STATUS FROM test", 1044, "to database 'test'"},
		{"convoy", "convoy", "SELECT COUNT(*) FROM mysql.user", 0, ""},
		{"writer", "w", "CREATE USER evil@'%'", 1227, "admin"},
		{"dba", "d", "CREATE FUNCTION f_udf RETURNS INTEGER SONAME 'f_udf.so'", 1227, "admin"}, // a shared library
		{"dba", "d", "CREATE TABLE IF NOT EXISTS app_notes (id INT PRIMARY KEY)", 0, ""},
		{"dba", "d", "TRUNCATE TABLE conv_msg", 1227, "sharded table conv_msg"},
		{"dba", "d", "DROP TABLE conv_msg", 1227, "all 1024 shards"},
		{"dba", "d", "DROP TABLE app_notes", 0, ""},
	} {
		for _, prepared := range []bool{false, true} {
			if prepared && strings.HasPrefix(c.sql, "/*+") || prepared && strings.HasPrefix(c.sql, "USE") {
				continue
			}
			params := "&interpolateParams=true"
			if prepared {
				params = "&interpolateParams=false"
			}
			db := openDSN(t, p.dsn(c.user, c.pw, "im")+params)
			var err error
			if prepared {
				// Prepared with an argument, so the driver really prepares.
				var st interface{ Close() error }
				pst, perr := db.PrepareContext(ctx, c.sql+" /* ? */")
				err = perr
				if perr == nil {
					st = pst
					st.Close()
				}
			} else {
				_, err = db.ExecContext(ctx, c.sql)
			}
			db.Close()
			switch {
			case c.errno == 0 && err != nil:
				t.Errorf("%s (prepared %v): %s: %v", c.user, prepared, c.sql, err)
			case c.errno != 0 && (errno(err) != c.errno || !strings.Contains(err.Error(), c.contains)):
				t.Errorf("%s (prepared %v): %s: err = %v, want %d containing %q", c.user, prepared, c.sql, err, c.errno, c.contains)
			}
		}
	}

	// The row survived every refused statement.
	var n int
	if err := admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM conv_msg WHERE conv_id = 9").Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows of conversation 9 = %d, %v; want 1", n, err)
	}
	// Login naming a database outside the account's list: 1044.
	db := openDSN(t, p.dsn("writer", "w", "mysql"))
	if err := db.PingContext(ctx); errno(err) != 1044 {
		t.Fatalf("login of writer into mysql: %v, want 1044", err)
	}
	// SHOW GRANTS: the Convoy account's privileges in MariaDB's words, not
	// the datasources' grants of Convoy's backend account; another
	// account's for an admin only.
	grants := func(user, pw, q string) ([]string, error) {
		db := openDSN(t, p.dsn(user, pw, "im"))
		defer db.Close()
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		cols, _ := rows.Columns()
		out := []string{strings.Join(cols, ",")}
		for rows.Next() {
			var g string
			if err := rows.Scan(&g); err != nil {
				return nil, err
			}
			out = append(out, g)
		}
		return out, rows.Err()
	}
	for _, c := range []struct {
		user, pw, q string
		want        []string
		errno       uint16
	}{
		{"reader", "r", "SHOW GRANTS", []string{"Grants for reader@%", "GRANT SELECT, SHOW VIEW ON *.* TO `reader`@`%`"}, 0},
		{"writer", "w", "SHOW GRANTS FOR CURRENT_USER()", []string{"Grants for writer@%", "GRANT USAGE ON *.* TO `writer`@`%`",
			"GRANT SELECT, INSERT, UPDATE, DELETE, EXECUTE, SHOW VIEW ON `im`.* TO `writer`@`%`"}, 0},
		{"dba", "d", "SHOW GRANTS FOR CURRENT_USER", []string{"Grants for dba@%", "GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, INDEX, ALTER, CREATE TEMPORARY TABLES, EXECUTE, CREATE VIEW, SHOW VIEW, CREATE ROUTINE, ALTER ROUTINE, EVENT, TRIGGER ON *.* TO `dba`@`%`"}, 0},
		{"convoy", "convoy", "SHOW GRANTS", []string{"Grants for convoy@%", "GRANT ALL PRIVILEGES ON *.* TO `convoy`@`%` WITH GRANT OPTION"}, 0},
		{"convoy", "convoy", "SHOW GRANTS FOR reader", []string{"Grants for reader@%", "GRANT SELECT, SHOW VIEW ON *.* TO `reader`@`%`"}, 0},
		{"convoy", "convoy", "SHOW GRANTS FOR 'reader'@'%'", []string{"Grants for reader@%", "GRANT SELECT, SHOW VIEW ON *.* TO `reader`@`%`"}, 0},
		{"convoy", "convoy", "SHOW GRANTS FOR nobody", nil, 1141},
		{"reader", "r", "SHOW GRANTS FOR reader", []string{"Grants for reader@%", "GRANT SELECT, SHOW VIEW ON *.* TO `reader`@`%`"}, 0},
		{"reader", "r", "SHOW GRANTS FOR convoy", nil, 1044},
	} {
		got, err := grants(c.user, c.pw, c.q)
		if c.errno != 0 {
			if errno(err) != c.errno {
				t.Errorf("%s: %s: %v, want %d", c.user, c.q, err, c.errno)
			}
			continue
		}
		if err != nil || strings.Join(got, "\n") != strings.Join(c.want, "\n") {
			t.Errorf("%s: %s:\n got %q (%v)\nwant %q", c.user, c.q, got, err, c.want)
		}
	}

	// An admin may still drop or truncate a sharded table.
	mustExec(t, admin, "TRUNCATE TABLE conv_msg")
}
