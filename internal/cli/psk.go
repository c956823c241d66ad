package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"

	"github.com/chainsync-go/chainsync/secure"
)

const pskUsage = `Usage: chainsync psk [--force] FILE

Writes a new pre-shared key for chainsync run --psk-file: 32 random bytes
from the system's secure random source, as base64, in FILE with mode 0600.
It never replaces an existing FILE unless --force is given. Copy the same
file to every node of the chain over a channel you trust, keeping it
readable only by the node's user: a node refuses a key file that group or
others can read, and any key that is a passphrase or shorter than 32 bytes.

PSK mode needs --chain and --name on every node: each link's proof covers
the names of its two ends, so a connection redirected to another node of
the chain is refused.

Example:
  chainsync psk chain.psk
  scp -p chain.psk 10.0.0.2:/etc/chainsync/chain.psk
  chainsync run --chain A=10.0.0.1:7000,B=10.0.0.2:7000,C=10.0.0.3:7000 --name B \
    --psk-file /etc/chainsync/chain.psk -- ./task.sh

Exit status: 0 written; 1 not written (FILE exists, or cannot be written); 2 usage error.

Flags:
`

func pskFlags(fs *flag.FlagSet) {
	fs.Bool("force", false, "replace FILE if it exists (the old key stops working: give every node the new file)")
}

// pskMain is chainsync psk.
func pskMain(args []string, stdout, stderr io.Writer) int {
	fset := flag.NewFlagSet("psk", flag.ContinueOnError)
	quietFlags(fset)
	force := fset.Bool("force", false, "")
	// Flags may come before or after FILE.
	var files []string
	for rest := args; ; {
		if err := fset.Parse(rest); err != nil {
			return flagFailed(stdout, stderr, fset, "psk", err)
		}
		if fset.NArg() == 0 {
			break
		}
		files = append(files, fset.Arg(0))
		rest = fset.Args()[1:]
	}
	if len(files) != 1 {
		fmt.Fprintln(stderr, "chainsync psk: give exactly one FILE to write the key to (see chainsync psk --help)")
		return ExitUsage
	}
	path := files[0]
	if err := secure.WritePSKFile(path, *force); err != nil {
		if errors.Is(err, fs.ErrExist) {
			fmt.Fprintf(stderr, "chainsync psk: %s exists; nothing written (remove it, or give --force to replace it: every node then needs the new file)\n", path)
		} else {
			fmt.Fprintln(stderr, "chainsync psk:", err)
		}
		return ExitError
	}
	fmt.Fprintf(stdout, "wrote a new 32-byte key to %s (mode 0600); copy it to every node of the chain and give it as --psk-file\n", path)
	return ExitOK
}

// chainNames returns the names of name's neighbours in the chain ("" for
// none), for the PSK proof and the logs.
func chainNames(ms []member, name string) (prev, next string) {
	for i, m := range ms {
		if m.Name != name {
			continue
		}
		if i > 0 {
			prev = ms[i-1].Name
		}
		if i < len(ms)-1 {
			next = ms[i+1].Name
		}
	}
	return prev, next
}
