package cli

import (
	"bytes"
	"flag"
	"strings"
	"testing"
)

// Every command's --help lists each of its flags as the docs write them,
// "--name VALUE" (no VALUE for a switch), and shows a non-zero default as
// "(default X)", never as the value's placeholder.
func TestHelpFlagForms(t *testing.T) {
	for _, c := range visibleCommands() {
		if c.flags == nil {
			continue
		}
		var b bytes.Buffer
		printHelp(&b, c)
		help := b.String()
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		c.flags(fs)
		fs.VisitAll(func(f *flag.Flag) {
			var line string
			for _, l := range strings.Split(help, "\n") {
				if strings.HasPrefix(l, "  --"+f.Name+" ") || l == "  --"+f.Name {
					line = l
				}
			}
			if line == "" {
				t.Errorf("chainsync %s --help has no line for --%s:\n%s", c.name, f.Name, help)
				return
			}
			fields := strings.Fields(line)
			_, isBool := f.Value.(interface{ IsBoolFlag() bool })
			if !isBool && (len(fields) < 2 || fields[1] == f.DefValue && f.DefValue != "") {
				t.Errorf("chainsync %s: %q: want --%s VALUE with a placeholder, not the default", c.name, line, f.Name)
			}
			switch f.DefValue {
			case "", "0", "0s", "false":
			default:
				if !strings.Contains(line, "(default "+f.DefValue+")") {
					t.Errorf("chainsync %s: %q does not show the default %s", c.name, line, f.DefValue)
				}
			}
		})
	}
}
