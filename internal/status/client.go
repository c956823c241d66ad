package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// URL turns a --status-addr as given to chainsync status (HOST:PORT, or an
// http:// URL) into the URL of its /status document.
func URL(addr string) (string, error) { return urlFor(addr, "http") }

// HTTPSURL is URL for a node that serves HTTPS: HOST:PORT becomes
// https://HOST:PORT/status.
func HTTPSURL(addr string) (string, error) { return urlFor(addr, "https") }

func urlFor(addr, scheme string) (string, error) {
	if strings.HasPrefix(addr, "http://") || strings.HasPrefix(addr, "https://") {
		u, err := url.Parse(addr)
		if err != nil || u.Host == "" {
			return "", fmt.Errorf("%q is not a usable URL", addr)
		}
		if u.Path == "" || u.Path == "/" {
			u.Path = "/status"
		}
		return u.String(), nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", fmt.Errorf("%q is not HOST:PORT (a node's --status-addr): %v", addr, err)
	}
	return scheme + "://" + addr + "/status", nil
}

// Fetch reads one node's status document from addr (HOST:PORT or URL).
func Fetch(ctx context.Context, client *http.Client, addr string) (Doc, error) {
	var d Doc
	u, err := URL(addr)
	if t, ok := client.Transport.(*http.Transport); ok && t.TLSClientConfig != nil {
		u, err = HTTPSURL(addr) // chainsync status with --tls-*: the nodes serve HTTPS
	}
	if err != nil {
		return d, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return d, err
	}
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return d, errors.New("no answer in time (the node, its host or the network is hung)")
		}
		if what := notStatus(err); what != "" {
			return d, fmt.Errorf("%s answered, but not as a chainsync status endpoint (--status-addr): %s", addr, what)
		}
		return d, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusBadRequest && strings.HasPrefix(u, "http://") {
		return d, fmt.Errorf("%s answered %s: the node may serve HTTPS (it has a certificate): give chainsync status --tls-cert, --tls-key and --tls-ca or --pin", u, resp.Status)
	}
	if resp.StatusCode != http.StatusOK {
		return d, fmt.Errorf("%s answered %s: is this a chainsync --status-addr?", u, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return d, fmt.Errorf("reading the answer: %v", err)
	}
	if err := json.Unmarshal(body, &d); err != nil {
		return d, fmt.Errorf("%s did not answer with a chainsync status document: %v", u, err)
	}
	if d.Role == "" {
		return d, fmt.Errorf("%s did not answer with a chainsync status document (no role)", u)
	}
	return d, nil
}

// notStatus says what else answered at a status address, from the error
// of the request, or "" if the error is not that kind. A chain port
// (--listen) hangs up on a line that is not a protocol line; a Head's
// --control answers one JSON line; neither is HTTP.
func notStatus(err error) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "malformed HTTP"):
		return "it answered, but not in HTTP: is it a Head's --control address? give the node's --status-addr"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "it hung up without an answer: is it a chain port? (a --listen or --chain address: give the node's --status-addr)"
	case strings.Contains(msg, "connection reset by peer"):
		return "it hung up on the request: is it a chain port or a Head's --control address? give the node's --status-addr"
	}
	return ""
}
