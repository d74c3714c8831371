package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"time"
	"unicode/utf8"

	"github.com/go-mysql-org/go-mysql/mysql"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/convoy-im/convoy/internal/lograte"
	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/rewrite"
)

// stmtLog writes one line per error packet a client command gets, so an
// operator can see what the applications hit without a packet capture: the
// errno, why (for Convoy's own errors), who (user, remote address), where
// (the shard, when the statement was routed to one) and what (a digest of
// the statement: rewrite.Digest, literals replaced with `?`). Never the
// statement text or the error message: both may carry the client's values
// (message bodies, tokens, passwords).
//
// Lines are rate-limited per errno: an application retrying a refused
// statement in a loop writes a few lines a second, and the next line let
// through says how many were left out. convoy_client_errors_total still
// counts every one.
type stmtLog struct {
	log *zap.Logger
	lim *lograte.Limiter[uint16]
}

// defaultStatementLogRate is the default number of lines per second and
// errno: enough to show what is going on, few enough that a loop cannot
// drown everything else.
const defaultStatementLogRate = 5

// maxDigestText bounds the statement digest on a line; the digest hash
// still tells longer statements apart.
const maxDigestText = 512

func newStmtLog(log *zap.Logger, perSecond int) *stmtLog {
	return &stmtLog{log: log, lim: lograte.New[uint16](perSecond, time.Second)}
}

// failedCommand is what the log says about one failed client command.
type failedCommand struct {
	cmd    string // COM_QUERY, COM_STMT_EXECUTE, ...
	sql    string // statement text, if the command has one (only its digest is logged)
	user   string
	remote net.Addr     // nil during the handshake
	shard  fmt.Stringer // nil when not routed to a shard
}

// failureClass sorts an error by who should care.
type failureClass int

const (
	classBackend     failureClass = iota // the backend's answer to the application's statement
	classRefused                         // Convoy refused the statement (or command)
	classUnavailable                     // a datasource, the pool or a transaction's connection failed
	classInternal                        // a Convoy bug or an unexpected failure
)

var classText = [...]string{
	classBackend:     "statement failed on the backend",
	classRefused:     "statement refused",
	classUnavailable: "statement failed: backend unavailable",
	classInternal:    "statement failed: internal error",
}

// classLevel: a backend's errors (1062 duplicate key, 1146, deadlocks) are
// normal application behaviour and show at debug only; what Convoy refuses
// is information an operator wants when an application misbehaves; the rest
// means something is broken.
var classLevel = [...]zapcore.Level{
	classBackend:     zapcore.DebugLevel,
	classRefused:     zapcore.InfoLevel,
	classUnavailable: zapcore.WarnLevel,
	classInternal:    zapcore.WarnLevel,
}

// ownErrnos are the MySQL errors the proxy front builds itself (protocol
// refusals) or that mean unavailability whoever sent them; any other
// *mysql.MyError is a backend's answer.
var ownErrnos = map[uint16]failureClass{
	mysql.ER_PARSE_ERROR:                     classRefused,
	mysql.ER_EMPTY_QUERY:                     classRefused,
	mysql.ER_NOT_SUPPORTED_YET:               classRefused,
	mysql.ER_WRONG_VALUE:                     classRefused,
	mysql.ER_TOO_BIG_SELECT:                  classRefused,
	mysql.ER_SPECIFIC_ACCESS_DENIED_ERROR:    classRefused,
	mysql.ER_WRONG_ARGUMENTS:                 classRefused,
	mysql.ER_UNKNOWN_STMT_HANDLER:            classRefused,
	mysql.ER_UNKNOWN_COM_ERROR:               classRefused,
	mysql.ER_MAX_PREPARED_STMT_COUNT_REACHED: classRefused,
	mysql.ER_NET_PACKET_TOO_LARGE:            classRefused,
	mysql.ER_WRONG_VALUE_FOR_VAR:             classRefused,
	mysql.ER_TOO_MANY_USER_CONNECTIONS:       classRefused,
	1835:                                     classRefused, // ER_MALFORMED_PACKET
	3159:                                     classRefused, // ER_SECURE_TRANSPORT_REQUIRED
	mysql.ER_CON_COUNT_ERROR:                 classUnavailable,
	mysql.ER_ERROR_DURING_COMMIT:             classUnavailable,
	mysql.ER_UNKNOWN_ERROR:                   classUnavailable,
}

// classOf says who an error is for and, for Convoy's own errors, names the
// reason (a sqlerr.Code; never the message, which may quote values).
func classOf(err error, errno uint16) (failureClass, string) {
	var ee *sqlerr.Error
	if errors.As(err, &ee) {
		switch ee.Code {
		case sqlerr.Internal:
			return classInternal, ee.Code.String()
		case sqlerr.BackendUnavailable, sqlerr.PoolTimeout, sqlerr.TxnAborted, sqlerr.StatementTimeout,
			sqlerr.ShardHeld, sqlerr.ShardUnavailable:
			return classUnavailable, ee.Code.String()
		}
		return classRefused, ee.Code.String()
	}
	if c, ok := ownErrnos[errno]; ok {
		return c, ""
	}
	return classBackend, ""
}

// failed logs one error packet (me) sent for err, if its level is on and the
// errno's budget allows.
func (l *stmtLog) failed(err error, me *mysql.MyError, fc failedCommand) {
	class, reason := classOf(err, me.Code)
	level := classLevel[class]
	if !l.log.Core().Enabled(level) {
		return
	}
	ok, suppressed := l.lim.Allow(me.Code)
	if !ok {
		return
	}
	fields := make([]zap.Field, 0, 10)
	fields = append(fields, zap.Uint16("errno", me.Code), zap.String("sqlstate", me.State))
	if reason != "" {
		fields = append(fields, zap.String("reason", reason))
	}
	fields = append(fields, zap.String("user", fc.user))
	if fc.remote != nil {
		fields = append(fields, zap.Stringer("remote", fc.remote))
	}
	fields = append(fields, zap.String("command", fc.cmd))
	if fc.shard != nil {
		fields = append(fields, zap.Stringer("shard", fc.shard))
	}
	if fc.sql != "" {
		d := rewrite.Digest(fc.sql)
		sum := sha256.Sum256([]byte(d))
		fields = append(fields, zap.String("digest", hex.EncodeToString(sum[:8])), zap.String("stmt", truncate(d, maxDigestText)))
	}
	if suppressed > 0 {
		fields = append(fields, zap.Uint64("suppressed", suppressed))
	}
	l.log.Log(level, classText[class], fields...)
}

// truncate cuts s to at most n bytes on a character boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
