// Package browsertest drives chainsync dashboard in a real browser
// (Chromium, through the DevTools protocol with chromedp) against a real
// chain of chainsync processes on loopback. It is a module of its own so
// that the chainsync module, which a library user imports, keeps no
// dependency: only this test needs chromedp.
package browsertest
