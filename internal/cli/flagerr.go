package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// A bad flag is one line that names it as the docs spell it (--heartbeat,
// not -heartbeat), says what is wrong and, where there is one, how to
// write it, then one line pointing at the command's --help: never the
// whole flag list, in which the one line that matters is lost.

// quietFlags makes fs report nothing itself: the command words the error
// (see flagFailed).
func quietFlags(fs *flag.FlagSet) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
}

// flagFailed reports err, from parsing fs, the flag set of chainsync cmd
// ("run", "trace render"), and returns the exit status: ExitOK for a
// request for help (printed on stdout), else ExitUsage.
func flagFailed(stdout, stderr io.Writer, fs *flag.FlagSet, cmd string, err error) int {
	if errors.Is(err, flag.ErrHelp) {
		name, _, _ := strings.Cut(cmd, " ")
		if c := lookupCommand(name); c != nil {
			printHelp(stdout, c)
		}
		return ExitOK
	}
	fmt.Fprintf(stderr, "chainsync %s: %s\n(see chainsync %s --help)\n", cmd, flagErrorText(fs, err), firstWord(cmd))
	return ExitUsage
}

func firstWord(s string) string {
	w, _, _ := strings.Cut(s, " ")
	return w
}

// flagErrorText restates an error of the flag package in one line.
func flagErrorText(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		name = strings.TrimLeft(name, "-")
		s := "unknown flag --" + name
		if best := closestFlag(fs, name); best != "" {
			s += " (did you mean --" + best + "?)"
		}
		return s
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: "); ok {
		name = strings.TrimLeft(name, "-")
		s := "--" + name + " needs a value"
		if f := fs.Lookup(name); f != nil {
			if h := valueKind(f); h != "" {
				s += ": " + h
			}
		}
		return s
	}
	if rest, ok := strings.CutPrefix(msg, "bad flag syntax: "); ok {
		return fmt.Sprintf("bad flag syntax %q: write --name VALUE or --name=VALUE", rest)
	}
	// invalid value "5" for flag -heartbeat: parse error
	// invalid boolean value "x" for -quiet: parse error
	for _, p := range []string{"invalid value ", "invalid boolean value "} {
		rest, ok := strings.CutPrefix(msg, p)
		if !ok {
			continue
		}
		val, err := strconv.QuotedPrefix(rest)
		if err != nil {
			break
		}
		rest = strings.TrimPrefix(rest[len(val):], " for ")
		rest = strings.TrimPrefix(rest, "flag ")
		name, why, _ := strings.Cut(rest, ": ")
		name = strings.TrimLeft(name, "-")
		v, _ := strconv.Unquote(val)
		f := fs.Lookup(name)
		if f == nil {
			break
		}
		return "--" + name + " " + strconv.Quote(v) + ": " + valueReason(f, v, why)
	}
	return strings.ReplaceAll(msg, " -", " --")
}

// valueReason says what is wrong with v as a value of f, and how to
// write one; why is the flag package's reason.
func valueReason(f *flag.Flag, v, why string) string {
	s := ""
	g, _ := f.Value.(flag.Getter)
	var kind any
	if g != nil {
		kind = g.Get()
	}
	switch kind.(type) {
	case time.Duration:
		if _, err := strconv.ParseFloat(v, 64); err == nil {
			return s + fmt.Sprintf("a duration needs a unit: %ss (seconds), %sms or %sm", v, v, v)
		}
		return s + "not a duration: write it with a unit, e.g. 5s, 500ms, 2m or 1h30m"
	case bool:
		return s + "not true or false (a switch needs no value: --" + f.Name + " alone is true)"
	case int, int64, uint, uint64:
		return s + "not a whole number"
	case float64:
		return s + "not a number"
	}
	if why == "" || why == "parse error" {
		return s + "not a valid value"
	}
	return s + why
}

// valueKind says what kind of value f takes, for "--x needs a value".
func valueKind(f *flag.Flag) string {
	g, _ := f.Value.(flag.Getter)
	if g == nil {
		return ""
	}
	switch g.Get().(type) {
	case time.Duration:
		return "a duration with a unit, e.g. 5s"
	case int, int64, uint, uint64:
		return "a whole number"
	case float64:
		return "a number"
	}
	if placeholder, _ := flag.UnquoteUsage(f); placeholder != "" && placeholder != "string" && placeholder != "value" {
		return placeholder
	}
	return ""
}

// closestFlag returns the flag of fs nearest to name (at most two edits
// away, or one that starts with it), or "".
func closestFlag(fs *flag.FlagSet, name string) string {
	best, bestD := "", 3
	fs.VisitAll(func(f *flag.Flag) {
		d := editDistance(name, f.Name)
		if len(name) >= 3 && strings.HasPrefix(f.Name, name) {
			d = min(d, 1)
		}
		if d < bestD {
			best, bestD = f.Name, d
		}
	})
	return best
}
