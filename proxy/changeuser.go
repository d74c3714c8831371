package proxy

import (
	"bytes"
	"crypto/subtle"
	"fmt"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// COM_CHANGE_USER (PHP's mysqli_change_user, MySQLdb's change_user,
// connection pools that hand a connection to another account) logs the
// connection in again as another account, or the same one, and starts a
// new session, as COM_RESET_CONNECTION does. go-mysql's server does not
// know the command. The client proves the password against the
// handshake's scramble (the greeting's, kept by greetingConn), as MariaDB
// asks:
//
//	client: COM_CHANGE_USER (user, auth response, database, charset, plugin)
//	Convoy: OK (go-mysql writes it when the handler returns), or
//	Convoy: AuthSwitchRequest (mysql_native_password, the same scramble)
//	        when the client answered for a plugin Convoy does not check,
//	client: auth response
//	Convoy: OK or 1045.
//
// A refused change leaves the connection open with its session as it was,
// as MariaDB does.

// changeUserRequest is a decoded COM_CHANGE_USER payload.
type changeUserRequest struct {
	user, db, plugin string
	auth             []byte
	charset          uint16 // 0: not sent
}

// parseChangeUser decodes a COM_CHANGE_USER payload (after the command
// byte): user NUL, auth response (length-prefixed with
// CLIENT_SECURE_CONNECTION, else NUL-terminated), database NUL, then
// optionally the character set (2), the plugin name NUL and attributes.
func parseChangeUser(data []byte, secure bool) (changeUserRequest, bool) {
	var r changeUserRequest
	i := bytes.IndexByte(data, 0)
	if i < 0 {
		return r, false
	}
	r.user, data = string(data[:i]), data[i+1:]
	if secure {
		if len(data) < 1 || len(data) < 1+int(data[0]) {
			return r, false
		}
		r.auth, data = data[1:1+int(data[0])], data[1+int(data[0]):]
	} else {
		if i = bytes.IndexByte(data, 0); i < 0 {
			return r, false
		}
		r.auth, data = data[:i], data[i+1:]
	}
	if i = bytes.IndexByte(data, 0); i < 0 {
		r.db = string(data) // old clients end the packet after the database
		return r, true
	}
	r.db, data = string(data[:i]), data[i+1:]
	if len(data) >= 2 {
		r.charset, data = uint16(data[0])|uint16(data[1])<<8, data[2:]
		if i = bytes.IndexByte(data, 0); i >= 0 {
			r.plugin = string(data[:i])
		}
	}
	return r, true
}

// scrambleFor is the auth response a client sends for password and salt
// with plugin ("" is mysql_native_password); ok false: a plugin Convoy
// does not check.
func scrambleFor(plugin string, salt []byte, password string) ([]byte, bool) {
	switch plugin {
	case "", mysql.AUTH_NATIVE_PASSWORD:
		if password == "" {
			return nil, true
		}
		return mysql.CalcNativePassword(salt, []byte(password)), true
	case mysql.AUTH_CACHING_SHA2_PASSWORD:
		if password == "" {
			return nil, true
		}
		return mysql.CalcCachingSha2Password(salt, []byte(password)), true
	}
	return nil, false
}

// changeUser runs COM_CHANGE_USER; nil means go-mysql writes the OK, an
// error is written as the refusal.
func (h *handler) changeUser(data []byte) error {
	const cmd = "COM_CHANGE_USER"
	req, ok := parseChangeUser(data, h.conn.HasCapability(mysql.CLIENT_SECURE_CONNECTION))
	if !ok || len(h.salt) != 20 || h.cc == nil {
		return h.fail(&mysql.MyError{Code: 1835, State: "HY000", Message: "Malformed communication packet"}, cmd, "")
	}
	host := hostOf(h.conn.RemoteAddr())
	if h.s.auth.blocked(host) {
		return h.fail(&mysql.MyError{Code: mysql.ER_HOST_IS_BLOCKED, State: "HY000", Message: "Host '" + host + "' is blocked because of many failed logins; retry later"}, cmd, "")
	}
	u, known := h.s.users[req.user]
	password := h.s.decoy // the same work for a name no account has
	if known {
		password = u.Password
	}
	resp := req.auth
	want, checked := scrambleFor(req.plugin, h.salt, password)
	if !checked && h.conn.HasCapability(mysql.CLIENT_PLUGIN_AUTH) {
		// Ask for the native answer to the same scramble.
		sw := append([]byte{0, 0, 0, 0, 0xfe}, mysql.AUTH_NATIVE_PASSWORD+"\x00"...)
		sw = append(append(sw, h.salt...), 0)
		if err := h.conn.WritePacket(sw); err != nil {
			return err
		}
		if err := h.cc.Flush(); err != nil {
			return err
		}
		h.cc.raw = true // an auth response is not a command
		var err error
		if resp, err = h.conn.ReadPacket(); err != nil {
			return err
		}
		want, checked = scrambleFor("", h.salt, password)
	}
	if !checked || !known || subtle.ConstantTimeCompare(resp, want) != 1 {
		h.s.auth.fail(host)
		using := "YES"
		if len(resp) == 0 {
			using = "NO"
		}
		return h.fail(&mysql.MyError{Code: mysql.ER_ACCESS_DENIED_ERROR, State: "28000",
			Message: fmt.Sprintf("Access denied for user '%s'@'%s' (using password: %s)", req.user, host, using)}, cmd, "")
	}
	if req.db != "" && !u.privileges().MayUseDatabase(req.db) {
		return h.fail(&mysql.MyError{Code: mysql.ER_DBACCESS_DENIED_ERROR, State: "42000",
			Message: fmt.Sprintf("Access denied for user '%s'@'%s' to database '%s'", u.Name, host, req.db)}, cmd, "")
	}
	sess := h.s.eng.NewSession("")
	if req.db != "" {
		if err := sess.UseDB(req.db); err != nil {
			sess.Close()
			return h.fail(err, cmd, "")
		}
	}
	if req.charset > 0 && req.charset < 256 {
		if err := sess.SetClientCollation(uint8(req.charset)); err != nil {
			sess.Close()
			return h.fail(err, cmd, "")
		}
	}
	if u.Name != h.user.Name {
		if me := h.s.admitUser(u.Name); me != nil {
			sess.Close()
			return h.fail(me, cmd, "")
		}
		h.s.leave(h.user.Name)
		h.user = u
	}
	h.replaceSession(sess)
	return nil
}
