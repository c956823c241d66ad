package cli

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/chainsync-go/chainsync/internal/bug"
	"github.com/chainsync-go/chainsync/internal/taskrun"

	"github.com/chainsync-go/chainsync"
)

// Version is the release version; builds from a module add their VCS
// revision in chainsync version.
const Version = "0.1.0"

// command is one entry of the command table: Main dispatches on it, the
// main help lists it, and the shell completion scripts are generated from
// it and from each command's flag set, so none of them can go stale.
type command struct {
	name    string
	args    string // synopsis after the name
	summary string // one line for the main help
	usage   string // the help text before the flag list
	// flags defines the command's flags on fs (nil: none).
	flags func(fs *flag.FlagSet)
	// main runs the command with the arguments after its name.
	main func(args []string, stdout, stderr io.Writer) int
	// hidden commands are internal: not in the help or the completions.
	hidden bool
}

// commands is the command table, in the order the main help lists it. It
// is filled in init because completion, one of its entries, reads it.
var commands []*command

func init() {
	commands = []*command{
		{name: "demo", args: "[-n N] [--rounds R]", summary: "a live local demo: N nodes over loopback TCP",
			usage: demoUsage, flags: demoFlags, main: demoMain},
		{name: "run", args: "[flags] -- COMMAND...", summary: "run one node of a real chain",
			usage: runUsage, flags: func(fs *flag.FlagSet) { (&runOpts{}).flags(fs) },
			main: func(args []string, _, stderr io.Writer) int { return runMain(args, stderr) }},
		{name: "supervise", args: "[--max-restarts N] [--backoff D] -- chainsync run ...", summary: "run a node, and start it again when it dies without an outcome",
			usage: superviseUsage, flags: func(fs *flag.FlagSet) { (&superviseOpts{}).flags(fs) }, main: superviseMain},
		{name: "open", args: "--control ADDR [--id ID | --retry ID | --wait-for ID] [--wait]", summary: "open a round at a served Head (run --control)",
			usage: openUsage, flags: func(fs *flag.FlagSet) { (&openOpts{}).flags(fs) }, main: openMain},
	}
	commands = append(commands, steerCommands()...)
	commands = append(commands, receiptCommands()...)
	commands = append(commands, []*command{
		{name: "check", args: "[run flags]", summary: "preflight: check the configuration and both links, start nothing",
			usage: checkUsage, flags: func(fs *flag.FlagSet) { (&checkOpts{}).flags(fs) }, main: checkMain},
		{name: "status", args: "ADDR[,ADDR...]", summary: "ask running nodes (--status-addr) where they stand",
			usage: statusUsage, flags: statusFlags, main: statusMain},
		{name: "dashboard", args: "[--listen ADDR] ADDR[,ADDR...]", summary: "serve a live web page of the chain (and steer your node)",
			usage: dashboardUsage, flags: func(fs *flag.FlagSet) { (&dashboardOpts{}).flags(fs) }, main: dashboardMain},
		{name: "journal", args: "DIR [--json]", summary: "show what a state directory (--state-dir) remembers; starts no node",
			usage: journalUsage, flags: journalFlags, main: journalMain},
		{name: "trace", args: "render FILE... -o OUT", summary: "draw nodes' --trace files as one ladder diagram (SVG)",
			usage: traceUsage, flags: traceFlags, main: traceMain},
		{name: "certs", args: "[flags]", summary: "make a CA and per-node TLS certificates",
			usage: certsUsage, flags: certsFlags, main: certsMain},
		{name: "bench", args: "[--n 2,4,16] [flags]", summary: "measure rounds against a raw-TCP floor",
			usage: benchUsage, flags: func(fs *flag.FlagSet) { (&benchOpts{}).flags(fs) }, main: benchMain},
		{name: benchAgentCommand, hidden: true, // one node of chainsync bench --mode procs
			main: func(_ []string, stdout, stderr io.Writer) int { return benchAgentMain(stdout, stderr) }},
		{name: "pin", args: "CERTFILE", summary: "print a certificate's key pin", usage: pinUsage, main: pinMain},
		{name: "psk", args: "[--force] FILE", summary: "write a new pre-shared key for --psk-file",
			usage: pskUsage, flags: pskFlags, main: pskMain},
		{name: "completion", args: "bash|zsh", summary: "print a shell completion script",
			usage: completionUsage, main: completionMain},
		{name: "version", summary: "print the version", usage: versionUsage, main: versionMain},
	}...)
}

// visibleCommands are the commands a user sees in help and completions.
func visibleCommands() []*command {
	var out []*command
	for _, c := range commands {
		if !c.hidden {
			out = append(out, c)
		}
	}
	return out
}

func lookupCommand(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

const mainIntro = `chainsync runs a fixed chain of processes A -> B -> ... -> N so that their
tasks run strictly in order, and only once every one of them is ready
(draft-dohmeyer-chainsync: a READY wave forward, a START wave back, tasks in
order, a COMPLETE exit wave back).

Usage:
`

const mainExamples = `
Examples:
  chainsync demo                         start here: watch a 4-node chain run
  # a three-node chain on one machine, one command per terminal, any order:
  chainsync run --chain A=127.0.0.1:7000,B=127.0.0.1:7001,C=127.0.0.1:7002 --name C -- ./task.sh
  chainsync run --chain A=127.0.0.1:7000,B=127.0.0.1:7001,C=127.0.0.1:7002 --name B -- ./task.sh
  chainsync run --chain A=127.0.0.1:7000,B=127.0.0.1:7001,C=127.0.0.1:7002 --name A -- ./task.sh

Run "chainsync COMMAND --help" (or "chainsync help COMMAND") for a command's
flags and examples.
`

// mainUsage is the top-level help, its command list built from commands.
func mainUsage() string {
	var b strings.Builder
	b.WriteString(mainIntro)
	for _, c := range visibleCommands() {
		syn := strings.TrimSpace("chainsync " + c.name + " " + c.args)
		fmt.Fprintf(&b, "  %-38s %s\n", syn, c.summary)
	}
	b.WriteString(mainExamples)
	return b.String()
}

// Main runs the chainsync command with args (without the program name) and
// returns its exit status. A panic is reported as a bug and returns
// ExitError (see internal/bug), so that exit status 2 always means a usage error.
func Main(args []string, stdout, stderr io.Writer) (code int) {
	bug.SetOutput(stderr)
	// A panic in one of the library's goroutines is a bug too: exit 1.
	chainsync.SetPanicHandler(func(v any, _ []byte) {
		bug.Report(v)
		os.Exit(ExitError)
	})
	defer func() {
		if r := recover(); r != nil {
			bug.Report(r)
			code = ExitError
		}
	}()
	if len(args) == 0 {
		fmt.Fprint(stderr, mainUsage())
		return ExitUsage
	}
	switch args[0] {
	case "--version", "-version":
		return versionMain(nil, stdout, stderr)
	case taskrun.ReaperCommand: // hidden: kills a dead node's task groups
		return taskrun.ReaperMain()
	case "help", "-h", "-help", "--help":
		if len(args) == 2 {
			if c := lookupCommand(args[1]); c != nil && !c.hidden {
				printHelp(stdout, c)
				return ExitOK
			}
			fmt.Fprintf(stderr, "chainsync help: unknown command %q\n\n%s", args[1], mainUsage())
			return ExitUsage
		}
		fmt.Fprint(stdout, mainUsage())
		return ExitOK
	}
	c := lookupCommand(args[0])
	if c == nil {
		fmt.Fprintf(stderr, "chainsync: unknown command %q\n\n%s", args[0], mainUsage())
		return ExitUsage
	}
	if isHelp(args[1:]) {
		printHelp(stdout, c)
		return ExitOK
	}
	if c.name == "run" || c.name == benchAgentCommand {
		nodeThreads()
	}
	return c.main(args[1:], stdout, stderr)
}

// printHelp writes a command's help, with its flags, to w.
func printHelp(w io.Writer, c *command) {
	if c.flags == nil {
		fmt.Fprint(w, c.usage)
		return
	}
	printUsage(w, c.usage, c.flags)
}

const versionUsage = `Usage: chainsync version

Prints the version of chainsync, the Go version it was built with and, for a
build from a git checkout, the revision.

Example:
  chainsync version
`

func versionMain(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintf(stderr, "chainsync version: takes no arguments\n\n%s", versionUsage)
		return ExitUsage
	}
	fmt.Fprintln(stdout, versionString())
	return ExitOK
}

func versionString() string {
	s := "chainsync " + Version
	if bi, ok := debug.ReadBuildInfo(); ok {
		s += " (" + bi.GoVersion
		for _, kv := range bi.Settings {
			if kv.Key == "vcs.revision" && len(kv.Value) >= 12 {
				s += ", " + kv.Value[:12]
			}
		}
		s += ")"
	}
	return s
}

// isHelp reports whether a subcommand's arguments ask for help (before any
// "--", so a task's own -h is left alone).
func isHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// printUsage writes a subcommand's help, with its flags, to w (stdout, so
// that "chainsync run --help | less" works).
func printUsage(w io.Writer, usage string, define func(*flag.FlagSet)) {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	define(fs)
	fmt.Fprint(w, usage)
	printFlags(w, fs)
}

// printFlags writes fs's flags as the docs spell them, instead of the flag
// package's single-dash form: "--name VALUE", the usage, and the default
// where it is not the zero value, e.g.
//
//	--fault-policy POLICY      what a neighbour's fault ... (default halt)
//
// VALUE is the usage's back-quoted word, or by type D (a duration such as
// 30s or 5m) or N (a number).
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		value, usage := flag.UnquoteUsage(f)
		head := "  --" + f.Name
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
			switch value {
			case "duration":
				value = "D"
			case "int", "uint", "int64", "uint64", "float":
				value = "N"
			case "string", "value", "":
				value = "VALUE"
			}
			head += " " + value
		}
		switch f.DefValue {
		case "", "0", "0s", "false":
		default:
			usage += " (default " + f.DefValue + ")"
		}
		if len(head) <= 28 {
			fmt.Fprintf(w, "%-28s %s\n", head, usage)
		} else {
			fmt.Fprintf(w, "%s\n%29s%s\n", head, "", usage)
		}
	})
}
