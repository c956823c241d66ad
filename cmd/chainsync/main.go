// Command chainsync runs one node of a ChainSync chain (chainsync run), a
// one-command local demo (chainsync demo), and the certificate helpers
// (chainsync certs, chainsync pin). See chainsync help.
package main

import (
	"os"

	"github.com/chainsync-go/chainsync/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
