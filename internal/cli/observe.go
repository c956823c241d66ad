package cli

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strings"

	"github.com/chainsync-go/chainsync"
	"github.com/chainsync-go/chainsync/internal/status"
	"github.com/chainsync-go/chainsync/internal/tracefile"
	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/secure"
)

// observers are what chainsync run feeds with its node's trace events and
// state: the --trace file, and the metrics and status of --status-addr.
type observers struct {
	trace   *tracefile.Writer
	metrics *status.Metrics
	ln      net.Listener
	tls     *tls.Config // HTTPS for a node with a certificate; nil: plain HTTP
	srv     *status.Server
	extra   []func(*status.Doc) // what /status adds to the node's state (its worker)
}

// startObservers opens the --trace file and binds --status-addr before the
// node starts (so a bad path or a taken port stops the node from starting
// at all), and points cfg.Trace at them, after any hook already there.
func (o *runOpts) startObservers(cfg *chainsync.Config) (*observers, error) {
	ob := &observers{extra: []func(*status.Doc){o.workerStatus}} // workercmd.go
	role := protocol.RoleOf(cfg.Listen != "" || cfg.Listener != nil, cfg.Next != "")
	var hooks fanout
	if cfg.Trace != nil {
		hooks = append(hooks, cfg.Trace)
	}
	if o.statusAddr != "" {
		ln, err := status.Listen(o.statusAddr)
		if err != nil {
			return nil, fmt.Errorf("--status-addr %s: %v", o.statusAddr, err)
		}
		ob.ln = ln
		if o.tls.CertFile != "" {
			tc, err := secure.StatusServerTLS(secure.HTTPSOptions{CertFile: o.tls.CertFile, KeyFile: o.tls.KeyFile,
				CAFile: o.tls.CAFile, Pins: o.statusPin, CAFlag: "--tls-ca", PinFlag: "--status-pin"})
			if err != nil {
				ln.Close()
				return nil, fmt.Errorf("--status-addr %s: %v", o.statusAddr, err)
			}
			ob.tls = tc
		}
		ob.metrics = status.NewMetrics(role, Version, runtime.Version())
		hooks = append(hooks, ob.metrics.Observe)
	}
	if o.traceFile != "" {
		hdr := tracefile.Record{Node: o.name, Role: role.String(), Listen: cfg.Listen, Prev: cfg.Prev, Next: cfg.Next}
		if o.chain != "" {
			if ms, err := parseChain(o.chain); err == nil {
				for i, m := range ms {
					hdr.Chain = append(hdr.Chain, m.Name)
					if m.Name == o.name {
						if i > 0 {
							hdr.Prev = ms[i-1].Name
						}
						if i < len(ms)-1 {
							hdr.Next = ms[i+1].Name
						}
					}
				}
			}
		}
		w, err := tracefile.Append(o.traceFile, hdr)
		if err != nil {
			ob.close(nil)
			return nil, fmt.Errorf("--trace: %v", err)
		}
		ob.trace = w
		hooks = append(hooks, w.Observe)
	}
	cfg.Trace = hooks.hook()
	return ob, nil
}

// serve starts the status endpoint for node, if --status-addr was given.
func (ob *observers) serve(node *chainsync.Node, log *slog.Logger) {
	if ob.ln == nil {
		return
	}
	ob.srv = status.ServeTLS(ob.ln, status.Handler(node.Snapshot, ob.metrics, Version, ob.extra...), ob.tls)
	scheme := "http://"
	if ob.tls != nil {
		scheme = "https://" // clients show a certificate from --tls-ca or a --status-pin key
	}
	addr := ob.ln.Addr().String()
	log.Info("status endpoint up", "status", scheme+addr+"/status", "metrics", scheme+addr+"/metrics")
}

// close stops the status endpoint and finishes the trace file; call it
// after the node is closed, so the trace has the node's last events.
func (ob *observers) close(log *slog.Logger) {
	if ob.srv != nil {
		ob.srv.Close()
	} else if ob.ln != nil {
		ob.ln.Close()
	}
	if ob.trace != nil {
		if err := ob.trace.Close(); err != nil && log != nil {
			log.Error("--trace file incomplete", "err", strings.TrimSpace(err.Error()))
		}
	}
}
