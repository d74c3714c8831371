package slogzap

import (
	"errors"
	"log"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestHandler: slog records and standard log lines (what go-mysql writes)
// arrive in zap with their level, attributes (groups flattened) and caller;
// levels below the logger's are dropped.
func TestHandler(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	prev := slog.Default()
	defer slog.SetDefault(prev)
	slog.SetDefault(slog.New(Handler(zap.New(core).Named("lib"))))

	slog.Debug("dropped")
	slog.Warn("out of order binlog", slog.Any("error", errors.New("boom")), slog.Int("n", 3),
		slog.Group("pos", slog.String("file", "binlog.000001"), slog.Duration("lag", time.Second)))
	slog.With("conn", 7).WithGroup("g").Error("failed", "k", true)
	log.Printf("go-mysql: failed to send LOCAL INFILE terminator: %v", "x")

	got := logs.All()
	if len(got) != 3 {
		t.Fatalf("%d entries, want 3: %+v", len(got), got)
	}
	w := got[0]
	if w.Level != zapcore.WarnLevel || w.Message != "out of order binlog" || w.LoggerName != "lib" {
		t.Errorf("warn entry: %+v", w.Entry)
	}
	m := w.ContextMap()
	if m["error"] != "boom" || m["n"] != int64(3) || m["pos.file"] != "binlog.000001" || m["pos.lag"] != time.Second {
		t.Errorf("warn fields: %v", m)
	}
	if !w.Caller.Defined || !strings.HasSuffix(w.Caller.File, "slogzap_test.go") {
		t.Errorf("caller: %+v", w.Caller)
	}
	if e := got[1]; e.Level != zapcore.ErrorLevel || e.ContextMap()["conn"] != int64(7) || e.ContextMap()["g.k"] != true {
		t.Errorf("error entry: %+v %v", e.Entry, e.ContextMap())
	}
	if l := got[2]; l.Level != zapcore.InfoLevel || !strings.Contains(l.Message, "LOCAL INFILE terminator: x") {
		t.Errorf("standard log entry: %+v", l.Entry)
	}
}
