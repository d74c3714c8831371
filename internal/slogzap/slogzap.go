// Package slogzap routes log/slog records into a zap logger. Libraries that
// log through slog's default logger or the standard log package (go-mysql
// does both) then write into Convoy's log in its format, instead of plain
// text on stderr.
package slogzap

import (
	"context"
	"log/slog"
	"runtime"
	"slices"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Handler returns a slog.Handler writing each record to log, at the zap
// level nearest the record's, with the caller the record names.
// slog.SetDefault(slog.New(Handler(log))) also captures the standard log
// package (at Info).
func Handler(log *zap.Logger) slog.Handler {
	return &handler{log: log.WithOptions(zap.WithCaller(false))}
}

type handler struct {
	log    *zap.Logger
	prefix string // open groups, "a.b."
	fields []zap.Field
}

func level(l slog.Level) zapcore.Level {
	switch {
	case l < slog.LevelInfo:
		return zapcore.DebugLevel
	case l < slog.LevelWarn:
		return zapcore.InfoLevel
	case l < slog.LevelError:
		return zapcore.WarnLevel
	}
	return zapcore.ErrorLevel
}

func (h *handler) Enabled(_ context.Context, l slog.Level) bool {
	return h.log.Core().Enabled(level(l))
}

func (h *handler) Handle(_ context.Context, r slog.Record) error {
	ce := h.log.Check(level(r.Level), r.Message)
	if ce == nil {
		return nil
	}
	if r.PC != 0 {
		f, _ := runtime.CallersFrames([]uintptr{r.PC}).Next()
		ce.Caller = zapcore.EntryCaller{Defined: true, PC: f.PC, File: f.File, Line: f.Line, Function: f.Function}
	}
	fields := slices.Clip(h.fields)
	r.Attrs(func(a slog.Attr) bool {
		fields = appendAttr(fields, h.prefix, a)
		return true
	})
	ce.Write(fields...)
	return nil
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	n := *h
	n.fields = slices.Clip(h.fields)
	for _, a := range attrs {
		n.fields = appendAttr(n.fields, h.prefix, a)
	}
	return &n
}

func (h *handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	n := *h
	n.prefix = h.prefix + name + "."
	return &n
}

// appendAttr appends a as zap fields, a group flattened into dotted keys.
func appendAttr(fields []zap.Field, prefix string, a slog.Attr) []zap.Field {
	v := a.Value.Resolve()
	key := prefix + a.Key
	switch v.Kind() {
	case slog.KindGroup:
		if a.Key != "" {
			prefix = key + "."
		}
		for _, g := range v.Group() {
			fields = appendAttr(fields, prefix, g)
		}
		return fields
	case slog.KindString:
		return append(fields, zap.String(key, v.String()))
	case slog.KindInt64:
		return append(fields, zap.Int64(key, v.Int64()))
	case slog.KindUint64:
		return append(fields, zap.Uint64(key, v.Uint64()))
	case slog.KindFloat64:
		return append(fields, zap.Float64(key, v.Float64()))
	case slog.KindBool:
		return append(fields, zap.Bool(key, v.Bool()))
	case slog.KindDuration:
		return append(fields, zap.Duration(key, v.Duration()))
	case slog.KindTime:
		return append(fields, zap.Time(key, v.Time()))
	}
	if err, ok := v.Any().(error); ok {
		return append(fields, zap.NamedError(key, err))
	}
	return append(fields, zap.Any(key, v.Any()))
}
