package histcache

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestRedisLoggerInZap: with RedisLogger installed, go-redis's complaint
// about a Redis it cannot reach is a zap line (not plain text on stderr),
// and a burst of them is one line.
func TestRedisLoggerInZap(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now

	core, logs := observer.New(zapcore.DebugLevel)
	redis.SetLogger(RedisLogger(zap.New(core).Named("redis")))
	t.Cleanup(func() { redis.SetLogger(RedisLogger(zap.NewNop())) })

	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer rdb.Close()
	for i := 0; i < 5; i++ {
		if err := rdb.Ping(context.Background()).Err(); err == nil {
			t.Fatal("PING to a closed port succeeded")
		}
	}
	lines := logs.All()
	if len(lines) != 1 {
		t.Fatalf("%d lines for 5 failed dials, want 1 (rate-limited): %+v", len(lines), lines)
	}
	l := lines[0]
	if l.Level != zapcore.WarnLevel || l.LoggerName != "redis" || !strings.Contains(l.Message, "failed to dial") || strings.HasPrefix(l.Message, "redis: ") {
		t.Errorf("line: %s %s %q", l.Level, l.LoggerName, l.Message)
	}
}
