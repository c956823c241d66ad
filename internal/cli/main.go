package cli

import (
	"flag"
	"fmt"
	"io"
	"runtime/debug"
)

// Version is the release version; builds from a module add their VCS
// revision in chainsync version.
const Version = "0.1.0"

const mainUsage = `chainsync runs a fixed chain of processes A -> B -> ... -> N so that their
tasks run strictly in order, and only once every one of them is ready
(draft-dohmeyer-chainsync: a READY wave forward, a START wave back, tasks in
order, a COMPLETE exit wave back).

Usage:
  chainsync demo [-n N] [--rounds R]     a live local demo: N nodes over loopback TCP
  chainsync run [flags] -- COMMAND...    run one node of a real chain
  chainsync certs [flags]                make a CA and per-node TLS certificates
  chainsync bench [--n 2,4,16] [flags]   measure rounds against a raw-TCP floor
  chainsync pin CERTFILE                 print a certificate's key pin
  chainsync psk [--force] FILE           write a new pre-shared key for --psk-file
  chainsync version                      print the version

Examples:
  chainsync demo                         start here: watch a 4-node chain run
  # a three-node chain on one machine, one command per terminal, any order:
  chainsync run --chain A=127.0.0.1:7000,B=127.0.0.1:7001,C=127.0.0.1:7002 --name C -- ./task.sh
  chainsync run --chain A=127.0.0.1:7000,B=127.0.0.1:7001,C=127.0.0.1:7002 --name B -- ./task.sh
  chainsync run --chain A=127.0.0.1:7000,B=127.0.0.1:7001,C=127.0.0.1:7002 --name A -- ./task.sh

Run "chainsync COMMAND --help" for a command's flags and examples.
`

// Main runs the chainsync command with args (without the program name) and
// returns its exit status.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, mainUsage)
		return ExitUsage
	}
	if len(args) > 1 && isHelp(args[1:]) {
		switch args[0] {
		case "run":
			printUsage(stdout, runUsage, (&runOpts{}).flags)
			return ExitOK
		case "demo":
			printUsage(stdout, demoUsage, demoFlags)
			return ExitOK
		case "certs":
			printUsage(stdout, certsUsage, certsFlags)
			return ExitOK
		case "bench":
			printUsage(stdout, benchUsage, (&benchOpts{}).flags)
			return ExitOK
		case "psk":
			printUsage(stdout, pskUsage, pskFlags)
			return ExitOK
		}
	}
	switch args[0] {
	case "run":
		return runMain(args[1:], stderr)
	case "demo":
		return demoMain(args[1:], stdout, stderr)
	case "certs":
		return certsMain(args[1:], stdout, stderr)
	case "pin":
		return pinMain(args[1:], stdout, stderr)
	case "bench":
		return benchMain(args[1:], stdout, stderr)
	case benchAgentCommand: // hidden: one node of chainsync bench --mode procs
		return benchAgentMain(stdout, stderr)
	case "psk":
		return pskMain(args[1:], stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, versionString())
		return ExitOK
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, mainUsage)
		return ExitOK
	}
	fmt.Fprintf(stderr, "chainsync: unknown command %q\n\n%s", args[0], mainUsage)
	return ExitUsage
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
	fs.SetOutput(w)
	fmt.Fprint(w, usage)
	fs.PrintDefaults()
}
