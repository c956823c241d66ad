package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os/signal"
	"strings"
	"time"

	"github.com/chainsync-go/chainsync/internal/bug"
	"github.com/chainsync-go/chainsync/internal/control"
	"github.com/chainsync-go/chainsync/internal/dashboard"
	"github.com/chainsync-go/chainsync/internal/status"
	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/secure"
)

const dashboardUsage = `Usage: chainsync dashboard [--listen ADDR] [--control ADDR [--node NAME]] ADDR[,ADDR...]

Serves one web page that shows the chain live: a box per node (its role,
its links up, down or silent, a restart and the grace left, holds, pauses
and approval waits with who and why, its faults and when they cleared, or
that it does not answer); each round in flight, where it stands in the
words of chainsync status, with the messages it has sent so far as a
ladder; and the recent rounds as a grid, a row per round and a cell per
node coloured by how it ended there, with the task's time (click a row for
its ladder and how it ended). The page updates by itself within a second
of a change, and reconnects by itself.

ADDR is each node's --status-addr, in chain order (Head first), as for
chainsync status; the TLS flags are status's too: a node given as
http://HOST:PORT is read over plain HTTP whatever they say. The dashboard
asks each node at most once a second, however many pages are open.

The page is read-only, unless --control names the control socket of one
node (your organisation's, the one this dashboard runs beside; the
dashboard asks it which node it is, or --node NAME says): then the page
has buttons for what that node takes (hold, release, approve, deny; at
the Head also pause, resume, cancel, open and retry). Each asks for a
reason, and is sent as --user, recorded as chainsync hold, approve ...
--by record it ("approved at C by ann", with the reason). A request the
node refuses shows its reason on the page.

It listens on loopback (127.0.0.1:3100; --listen :PORT is loopback too).
To serve it to other machines, --listen on their network needs HTTPS with
client certificates: --tls-cert and --tls-key, and --tls-ca (people with a
certificate from that CA) or --page-pin (people whose key has that pin).
A steering request must come from the page itself (it carries the page's
token; another site's request gets 403 and changes nothing), and only a
POST changes anything. With --control, whoever can open the page can
steer the node, as whoever can reach a TCP --control can: on loopback,
every user of this machine.

Examples:
  chainsync dashboard 127.0.0.1:9000,127.0.0.1:9001,127.0.0.1:9002,127.0.0.1:9003
  # organisation C's view, with buttons for its own node
  chainsync dashboard --control unix:/run/c.sock --user ann \
    --tls-cert c.pem --tls-key c-key.pem --tls-ca ca.pem 10.0.0.1:9000,10.0.0.2:9000,10.0.0.3:9000,10.0.0.4:9000

Exit status: 0 stopped (Ctrl-C, SIGTERM); 1 cannot listen; 2 usage error.

Flags:
`

type dashboardOpts struct {
	listen, control, node, user string
	pagePin                     string
	timeout                     time.Duration
	https                       secure.HTTPSOptions
}

func (o *dashboardOpts) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.listen, "listen", dashboard.DefaultListen, "serve the page at `ADDR` (HOST:PORT; :PORT is loopback); off loopback it needs --tls-cert, --tls-key and --tls-ca or --page-pin")
	fs.StringVar(&o.control, "control", "", "steer the node whose --control is `ADDR` (unix:PATH or HOST:PORT); without it the page is read-only")
	fs.StringVar(&o.node, "node", "", "which node --control belongs to: its `NAME` (or its status ADDR); by default the dashboard asks the socket")
	fs.StringVar(&o.user, "user", "", "who steers, a `NAME` recorded with each request (default: the login name)")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Second, "how long to wait for each node's answer (a node slower than a second keeps its last answer on the page meanwhile)")
	fs.StringVar(&o.https.CertFile, "tls-cert", "", "this dashboard's certificate (PEM `FILE`): shown to the nodes (HTTPS status) and to browsers off loopback")
	fs.StringVar(&o.https.KeyFile, "tls-key", "", "its private key (PEM `FILE`)")
	fs.StringVar(&o.https.CAFile, "tls-ca", "", "accept nodes, and browsers off loopback, whose certificate is from this CA (PEM `FILE`)")
	fs.StringVar(&o.https.Pins, "pin", "", "accept a node whose key has this `PIN` (sha256//BASE64, several joined by ;; see chainsync pin)")
	fs.StringVar(&o.pagePin, "page-pin", "", "off loopback, accept browsers whose client certificate's key has this `PIN` (several joined by ;)")
}

// dashboardMain is chainsync dashboard.
func dashboardMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dashboard", flag.ContinueOnError)
	quietFlags(fs)
	var o dashboardOpts
	o.flags(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return flagFailed(stdout, stderr, fs, "dashboard", err)
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "chainsync dashboard: "+format+"\n(see chainsync dashboard --help)\n", a...)
		return ExitUsage
	}
	var addrs []string
	for _, a := range pos {
		for _, s := range strings.Split(a, ",") {
			if s = strings.TrimSpace(s); s != "" {
				addrs = append(addrs, s)
			}
		}
	}
	if len(addrs) == 0 {
		return bad("give the --status-addr of every node in chain order, e.g. chainsync dashboard 127.0.0.1:9000,127.0.0.1:9001")
	}
	for _, a := range addrs {
		if _, err := status.URL(a); err != nil {
			return bad("%v", err)
		}
	}
	if o.timeout <= 0 {
		return bad("--timeout must be positive")
	}
	listen, loopback, err := dashboard.ListenAddr(o.listen)
	if err != nil {
		return bad("%v", err)
	}
	var steer dashboard.Steerer
	if o.control != "" {
		if _, _, err := control.Network(o.control); err != nil {
			return bad("%v", err)
		}
		if o.node == "" && len(addrs) == 1 {
			o.node = addrs[0]
		}
		steer = controlSteerer{addr: o.control}
	} else if o.node != "" {
		return bad("--node names the node of --control: give --control too")
	}
	if o.user == "" {
		o.user = defaultBy()
	}
	if len(o.user) > protocol.MaxNoticeName || protocol.NoticeName(o.user) != o.user {
		return bad("--user %q: at most %d of A-Z a-z 0-9 - _ . : @ [ ]", o.user, protocol.MaxNoticeName)
	}
	client := &http.Client{Timeout: o.timeout}
	h := o.https
	if h.CertFile != "" || h.KeyFile != "" || h.CAFile != "" || h.Pins != "" {
		h.CAFlag, h.PinFlag = "--tls-ca", "--pin"
		tc, err := secure.StatusClientTLS(h)
		if err != nil {
			return bad("%v", err)
		}
		client.Transport = &http.Transport{TLSClientConfig: tc}
	}
	pageTLS := !loopback || o.pagePin != ""
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10,
		ErrorLog: log.New(io.Discard, "", 0)}
	if pageTLS {
		if h.CertFile == "" || h.KeyFile == "" || h.CAFile == "" && o.pagePin == "" {
			if loopback {
				return bad("--page-pin serves the page over HTTPS: give --tls-cert and --tls-key too")
			}
			return bad("--listen %s is not loopback: anyone who reaches it would see the chain. Give --tls-cert and --tls-key, and --tls-ca or --page-pin (the client certificates of the people who may open the page), or listen on loopback (--listen 127.0.0.1:PORT)", o.listen)
		}
		tc, err := secure.StatusServerTLS(secure.HTTPSOptions{CertFile: h.CertFile, KeyFile: h.KeyFile, CAFile: h.CAFile,
			Pins: o.pagePin, CAFlag: "--tls-ca", PinFlag: "--page-pin"})
		if err != nil {
			return bad("%v", err)
		}
		srv.TLSConfig = tc
	}

	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintf(stderr, "chainsync dashboard: --listen %s: %v\n", o.listen, err)
		return ExitError
	}
	ctx, stop := signal.NotifyContext(context.Background(), stopSignals...)
	defer stop()
	poller := dashboard.NewPoller(addrs, func(ctx context.Context, addr string) (*status.Doc, error) {
		d, err := status.Fetch(ctx, client, addr)
		if err != nil {
			return nil, err
		}
		return &d, nil
	}, o.timeout, o.node, o.user)
	if steer != nil && o.node == "" {
		poller.AskControl(steer.(controlSteerer).name) // which node it is, asked of its socket
	}
	srv.Handler = dashboard.NewServer(poller, steer, o.user, loopback).Handler()
	srv.BaseContext = func(net.Listener) context.Context { return ctx } // event streams end on stop
	done := make(chan struct{})
	bug.Go(func() {
		defer close(done)
		poller.Run(ctx)
	})
	served := make(chan error, 1)
	bug.Go(func() {
		if pageTLS {
			served <- srv.ServeTLS(ln, "", "")
		} else {
			served <- srv.Serve(ln)
		}
	})
	mode := "read-only"
	switch {
	case steer != nil && o.node == "":
		mode = "steering the node of --control " + o.control + " as " + o.user
	case steer != nil:
		mode = "steering " + o.node + " as " + o.user
	}
	fmt.Fprintf(stdout, "chainsync dashboard: %s (%s; Ctrl-C stops it)\n", dashboard.URL(ln.Addr(), pageTLS), mode)
	code := ExitOK
	select {
	case <-ctx.Done():
	case err := <-served:
		fmt.Fprintf(stderr, "chainsync dashboard: %v\n", err)
		code = ExitError
	}
	stop()
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	<-done
	return code
}

// controlSteerer sends the page's steering requests to a node's control
// socket, as chainsync hold, approve, open ... do.
type controlSteerer struct{ addr string }

// name asks the node of the control socket its name.
func (c controlSteerer) name(ctx context.Context) (string, error) {
	timeout := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	conn, err := control.Dial(c.addr, timeout)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(timeout))
	if err := conn.Send(control.Request{Op: control.OpName}); err != nil {
		return "", err
	}
	rep, err := conn.Receive()
	switch {
	case err != nil:
		return "", err
	case rep.Error != "" || rep.Message == "":
		return "", fmt.Errorf("--control %s did not say its node's name: %s", c.addr, rep.Error)
	}
	return rep.Message, nil
}

func (c controlSteerer) Steer(ctx context.Context, req dashboard.Request) (string, error) {
	creq := control.Request{Op: req.Op, Round: req.Round, HasRound: req.HasRound, Reason: req.Reason, By: req.By}
	switch req.Op {
	case control.OpOpen:
		creq = control.Request{Op: control.OpOpen, ID: req.Round, NoWait: true}
	case control.OpRetry:
		creq.NoWait = true
	}
	timeout := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	conn, err := control.Dial(c.addr, timeout)
	if err != nil {
		return "", fmt.Errorf("cannot reach the node at --control %s: %v", c.addr, err)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(timeout))
	if err := conn.Send(creq); err != nil {
		return "", fmt.Errorf("--control %s: %v", c.addr, err)
	}
	rep, err := conn.Receive()
	switch {
	case err != nil:
		return "", err
	case rep.Error != "":
		return "", &dashboard.RefusedError{Reason: rep.Error}
	case req.Op == control.OpOpen:
		return "opened round " + status.RoundName(rep.Round), nil
	case req.Op == control.OpRetry:
		return "round " + status.RoundName(rep.Round) + " reopened: it runs again from where it failed", nil
	}
	return rep.Message, nil
}
