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

// newLogger returns the logger for --log-format text|json and --quiet.
func newLogger(w io.Writer, format string, quiet bool, node string) (*slog.Logger, error) {
	level := slog.LevelInfo
	if quiet {
		level = slog.LevelWarn
	}
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
