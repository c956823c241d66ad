// Package cli is the chainsync command: flag parsing, validation and the
// run, demo, certs, pin and version subcommands. cmd/chainsync only calls
// Main, so tests can run the whole command in process.
package cli
