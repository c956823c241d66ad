package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"net"
	"strings"

	"github.com/chainsync-go/chainsync/secure"
)

const certsUsage = `Usage: chainsync certs --dir DIR (--chain NAME=HOST:PORT,... | --nodes NAME,...) [--force]

Makes a small certificate authority (DIR/ca.pem, DIR/ca-key.pem) and, for
each node, a certificate valid as TLS server and client (DIR/NAME.pem,
DIR/NAME-key.pem; keys are written 0600), with the node's host as subject
alternative name. Prints each node's key pin for --pin-prev/--pin-next.
Keep ca-key.pem offline; copy to each node only ca.pem and its own pair.

Example:
  chainsync certs --dir certs --chain A=10.0.0.1:7000,B=10.0.0.2:7000,C=10.0.0.3:7000
  chainsync run --chain A=10.0.0.1:7000,B=10.0.0.2:7000,C=10.0.0.3:7000 --name B \
    --tls-cert certs/B.pem --tls-key certs/B-key.pem --tls-ca certs/ca.pem -- ./task.sh

Flags:
`

type certsOpts struct {
	dir, chain, nodes string
	force             bool
}

func (o *certsOpts) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.dir, "dir", "", "output `DIR` (created if missing)")
	fs.StringVar(&o.chain, "chain", "", "the chain, `NAME=HOST:PORT,...` as given to chainsync run --chain")
	fs.StringVar(&o.nodes, "nodes", "", "node `NAMES`, comma-separated, for a chain on this machine (SANs localhost, 127.0.0.1, ::1)")
	fs.BoolVar(&o.force, "force", false, "replace existing files")
}

func certsFlags(fs *flag.FlagSet) { (&certsOpts{}).flags(fs) }

func certsMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("certs", flag.ContinueOnError)
	quietFlags(fs)
	var o certsOpts
	o.flags(fs)
	dir, chain, nodes, force := &o.dir, &o.chain, &o.nodes, &o.force
	if err := fs.Parse(args); err != nil {
		return flagFailed(stdout, stderr, fs, "certs", err)
	}
	var specs []secure.NodeSpec
	switch {
	case *dir == "" || fs.NArg() > 0:
		fmt.Fprintln(stderr, "chainsync certs: give --dir DIR and no other arguments (see --help)")
		return ExitUsage
	case (*chain == "") == (*nodes == ""):
		fmt.Fprintln(stderr, "chainsync certs: give exactly one of --chain or --nodes")
		return ExitUsage
	case *chain != "":
		ms, err := parseChain(*chain)
		if err != nil {
			fmt.Fprintln(stderr, "chainsync certs:", err)
			return ExitUsage
		}
		for _, m := range ms {
			host, _, _ := net.SplitHostPort(m.Addr)
			specs = append(specs, secure.NodeSpec{Name: m.Name, Host: host})
		}
	default:
		for _, nm := range strings.Split(*nodes, ",") {
			specs = append(specs, secure.NodeSpec{Name: strings.TrimSpace(nm)})
		}
	}
	gen, err := secure.GenerateCerts(*dir, specs, *force)
	if pe := (*iofs.PathError)(nil); errors.Is(err, iofs.ErrExist) && errors.As(err, &pe) {
		fmt.Fprintf(stderr, "chainsync certs: %s exists; nothing written (give --force to replace every certificate and key in %s with a new CA: every node then needs its new files; or choose another --dir)\n", pe.Path, *dir)
		return ExitError
	}
	if err != nil {
		fmt.Fprintln(stderr, "chainsync certs:", err)
		return ExitError
	}
	fmt.Fprintf(stdout, "CA: %s (keep %s offline)\n", gen[0].CAFile, strings.TrimSuffix(gen[0].CAFile, ".pem")+"-key.pem")
	for _, g := range gen {
		fmt.Fprintf(stdout, "%-8s %s %s  SANs %s\n         pin %s\n", g.Name, g.CertFile, g.KeyFile, strings.Join(g.SANs, ","), g.Pin)
	}
	return ExitOK
}

const pinUsage = `Usage: chainsync pin CERTFILE

Prints the key pin of the first certificate in CERTFILE (PEM): sha256// and
the base64 of the SHA-256 of its SubjectPublicKeyInfo, as curl's
--pinnedpubkey writes it. Give it to the neighbours as --pin-prev/--pin-next.

Example:
  chainsync pin certs/B.pem
  chainsync run --name A --next 10.0.0.2:7000 --tls-cert A.pem --tls-key A-key.pem \
    --pin-next "$(chainsync pin certs/B.pem)" -- ./task.sh
`

func pinMain(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 || strings.HasPrefix(args[0], "-") {
		if len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			fmt.Fprint(stdout, pinUsage)
			return ExitOK
		}
		fmt.Fprint(stderr, pinUsage)
		return ExitUsage
	}
	pin, err := secure.PinFile(args[0])
	if err != nil {
		fmt.Fprintln(stderr, "chainsync pin:", err)
		return ExitError
	}
	fmt.Fprintln(stdout, pin)
	return ExitOK
}
