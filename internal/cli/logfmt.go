package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// parseLevel reads --log-level; --quiet raises it to at least warn.
func parseLevel(s string, quiet bool) (slog.Level, error) {
	var level slog.Level
	switch strings.ToLower(s) {
	case "debug":
		level = slog.LevelDebug
	case "info", "":
		level = slog.LevelInfo
	case "warn", "warning":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	default:
		return 0, fmt.Errorf("--log-level %q: use debug, info, warn or error", s)
	}
	if quiet {
		level = max(level, slog.LevelWarn)
	}
	return level, nil
}

// logger returns run's (and check's) logger on w, from --log-format,
// --log-level and --quiet.
func (o *runOpts) logger(w io.Writer) (*slog.Logger, error) {
	level, err := parseLevel(o.logLevel, o.quiet)
	if err != nil {
		return nil, err
	}
	return newLogger(w, o.logFormat, level, o.name)
}

// logEnv logs, at debug level, which settings came from the environment.
func logEnv(log *slog.Logger, fromEnv []envSetting) {
	for _, s := range fromEnv {
		log.Debug("setting from the environment", "flag", "--"+s.Flag, "var", s.Var)
	}
}

// newLogger returns the logger for --log-format text|json at level.
func newLogger(w io.Writer, format string, level slog.Level, node string) (*slog.Logger, error) {
	var h slog.Handler
	switch format {
	case "text", "":
		h = &humanHandler{w: w, level: level, mu: new(sync.Mutex)}
	case "json":
		h = slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})
	default:
		return nil, fmt.Errorf("--log-format %q: use text or json", format)
	}
	l := slog.New(h)
	if node != "" {
		l = l.With("node", node)
	}
	return l, nil
}

// humanHandler writes one short line per record for people watching a
// terminal: "15:04:05.000 B  sent READY round=r1 to=succ".
type humanHandler struct {
	w     io.Writer
	level slog.Level
	mu    *sync.Mutex
	node  string
	attrs []slog.Attr
}

func (h *humanHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *humanHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	t := r.Time
	if t.IsZero() {
		t = time.Now()
	}
	b.WriteString(t.Format("15:04:05.000"))
	if h.node != "" {
		b.WriteString(" " + h.node)
	}
	if r.Level != slog.LevelInfo {
		b.WriteString(" " + r.Level.String())
	}
	var round, msg, from, to string
	hasRound := false
	rest := append([]slog.Attr(nil), h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "round":
			round, hasRound = a.Value.String(), true
		case "msg":
			msg = a.Value.String()
		case "from":
			from = a.Value.String()
		case "to":
			to = a.Value.String()
		default:
			rest = append(rest, a)
		}
		return true
	})
	b.WriteString("  " + r.Message)
	if msg != "" {
		b.WriteString(" " + msg)
	}
	switch {
	case r.Message == "state":
		b.WriteString(" " + from + " -> " + to)
	case to != "":
		b.WriteString(" to " + to)
	case from != "":
		b.WriteString(" from " + from)
	}
	if hasRound {
		if round == "" {
			round = "(unnamed)"
		}
		b.WriteString(" round=" + round)
	}
	for _, a := range rest {
		if a.Key == "resend" && !a.Value.Bool() {
			continue
		}
		v := a.Value.String()
		if strings.ContainsAny(v, " \t\"=") || v == "" {
			v = fmt.Sprintf("%q", v)
		}
		b.WriteString(" " + a.Key + "=" + v)
	}
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

func (h *humanHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append([]slog.Attr(nil), h.attrs...)
	for _, a := range as {
		if a.Key == "node" {
			c.node = a.Value.String()
			continue
		}
		c.attrs = append(c.attrs, a)
	}
	return &c
}

func (h *humanHandler) WithGroup(string) slog.Handler { return h }
