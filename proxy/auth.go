package proxy

import (
	"errors"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/server"
)

// authHandler is go-mysql's AuthenticationHandler over the configured
// users. Its hooks run inside the handshake, before go-mysql writes the
// handshake's OK or error, so what they do holds for every transport: under
// TLS those packets are encrypted below any net.Conn Convoy could wrap.
type authHandler struct{ s *Server }

var _ server.AuthenticationHandler = authHandler{}

// GetCredential gives a user name no account has the decoy password, which
// no client knows: the login goes through the same exchange and gets
// MariaDB's 1045 (counted by the login throttle). Reporting it as unknown
// makes go-mysql answer 1449 ("The user specified as a definer ... does not
// exist") at once, telling a scanner which names exist.
func (a authHandler) GetCredential(name string) (server.Credential, bool, error) {
	password := a.s.decoy
	if u, ok := a.s.users[name]; ok {
		password = u.Password
	}
	// An empty password is a password too: []string{""} lets exactly the
	// clients that send none in.
	return server.Credential{Passwords: []string{password}, AuthPluginName: a.s.cfg.AuthMethod}, true, nil
}

// OnAuthSuccess gives the handshake's OK the status a new session really
// has. go-mysql sends 0x0000 there, and clients that keep that status as
// the session's (libmariadb, so Python mysqlclient; MariaDB Connector/J)
// then believe autocommit is off: with their default autocommit=0 they skip
// SET autocommit=0 and every statement of a "transaction" commits on its
// own.
func (a authHandler) OnAuthSuccess(c *server.Conn) error {
	c.SetStatus(initialStatus)
	// The greeting does not offer session tracking (hiddenCapabilities): a
	// client that asks for it all the same must get OK packets without the
	// tracking suffix.
	c.UnsetCapability(hiddenCapabilities)
	return nil
}

// OnAuthFailure counts a refused password for the login throttle before the
// error goes out, so the client cannot be faster with its next try.
func (a authHandler) OnAuthFailure(c *server.Conn, err error) {
	var me *mysql.MyError
	if errors.As(err, &me) && me.Code == mysql.ER_ACCESS_DENIED_ERROR {
		a.s.auth.fail(hostOf(c.RemoteAddr()))
	}
}
