package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"

	"github.com/chainsync-go/chainsync/worker"
)

// A stage that opens what is expensive once and then takes round after
// round: chainsync run --worker -- ./stage. Its log goes to standard
// error; standard output is the protocol's.
func ExampleServe() {
	log.SetOutput(os.Stderr)
	out, err := os.OpenFile("batches.log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		log.Fatal(err) // before Serve: the worker exits, and the node says it could not start
	}
	err = worker.Serve(func(ctx context.Context, req worker.Request) error {
		_, err := fmt.Fprintf(out, "%s %s\n", req.Node, req.Round)
		return err // an error fails the round at this node
	})
	if err != nil {
		log.Fatal(err)
	}
}

// What a worker reads and writes, as a node would drive it.
func ExampleWorker_Serve() {
	w := &worker.Worker{
		Start: func(h worker.Hello) error {
			fmt.Fprintf(os.Stdout, "starting as %s (%s)\n", h.Node, h.Role)
			return nil
		},
		Run: func(ctx context.Context, req worker.Request) error {
			if req.Round == "r3" {
				return errors.New("disk full")
			}
			return nil
		},
	}
	in := strings.NewReader(`{"id":0,"op":"hello","version":1,"node":"B","role":"middle"}
{"id":1,"op":"run","round":"r2"}
`)
	_ = w.Serve(in, os.Stdout)
	_ = w.Serve(strings.NewReader(`{"id":2,"op":"run","round":"r3","future":"ignored"}`+"\n"), os.Stdout)
	// Output:
	// starting as B (middle)
	// {"id":0,"ok":true,"version":1}
	// {"id":1,"ok":true}
	// {"id":2,"ok":false,"error":"disk full"}
}
