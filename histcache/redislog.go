package histcache

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/convoy-im/convoy/internal/lograte"
)

// RedisLogger returns a logger for redis.SetLogger that writes go-redis's
// own lines (a dial that failed, pool trouble) into log instead of plain
// text on stderr, so Convoy's log stays one format.
//
// While Redis is down every hot-tier read that misses the pool tries a dial
// and go-redis reports each failure; the tier falls back to MySQL and
// counts that in convoy_histcache_fallbacks_total, so the log needs only a
// reminder: one line per kind of message every redisLogEvery, with the
// number left out since.
func RedisLogger(log *zap.Logger) interface {
	Printf(ctx context.Context, format string, v ...any)
} {
	return &redisLogger{log: log, lim: lograte.New[string](1, redisLogEvery)}
}

const redisLogEvery = 10 * time.Second

type redisLogger struct {
	log *zap.Logger
	lim *lograte.Limiter[string]
}

func (l *redisLogger) Printf(_ context.Context, format string, v ...any) {
	if !l.log.Core().Enabled(zap.WarnLevel) {
		return
	}
	// The format is the same for every line of one kind (the values
	// differ), which makes it the key to limit on.
	ok, suppressed := l.lim.Allow(format)
	if !ok {
		return
	}
	msg := strings.TrimPrefix(strings.TrimSpace(fmt.Sprintf(format, v...)), "redis: ")
	if suppressed > 0 {
		l.log.Warn(msg, zap.Uint64("suppressed", suppressed))
		return
	}
	l.log.Warn(msg)
}
