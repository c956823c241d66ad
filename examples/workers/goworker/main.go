// Command goworker is a ChainSync persistent worker in Go
// (docs/WORKERS.md):
//
//	chainsync run --worker ... -- goworker [FILE]
//
// For every round it appends "NODE ROUND PID ID" to FILE, if given, which
// it opens once: the stand-in for what a real stage keeps between rounds.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"

	"github.com/chainsync-go/chainsync/worker"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("goworker: ")
	out := io.Discard
	if len(os.Args) > 1 {
		f, err := os.OpenFile(os.Args[1], os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			log.Fatal(err) // before hello: the node reports it and exits 1
		}
		defer f.Close()
		out = f
	}
	pid := os.Getpid()
	err := worker.Serve(func(ctx context.Context, req worker.Request) error {
		_, err := fmt.Fprintf(out, "%s %s %d %d\n", req.Node, req.Round, pid, req.ID)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
}
