package status

import (
	"github.com/chainsync-go/chainsync"
)

// Restarting is a node in a restart grace, as one node knows it
// (docs/DESIGN.md, "Liveness: a restart is not a death").
type Restarting struct {
	Node  string  `json:"node"`
	Round string  `json:"round"`
	Grace float64 `json:"grace_seconds"` // the grace it announced
	Left  float64 `json:"left_seconds"`  // what is left of it
	Text  string  `json:"text"`          // "B is restarting (grace 10m, 2m left)"
}

// addLiveness adds the snapshot's restart graces and silent links to d.
func addLiveness(d *Doc, s chainsync.Snapshot) {
	d.Links.Pred.Silent, d.Links.Succ.Silent = s.PredSilent, s.SuccSilent
	for _, g := range s.Restarting {
		d.Restarting = append(d.Restarting, Restarting{Node: g.Node, Round: g.Round, Grace: g.Grace.Seconds(),
			Left: g.Left.Seconds(), Text: g.String()})
	}
}

// restartingText is what d, a node's document, says of node's restart
// grace ("B is restarting (grace 10m, 2m left)"), "" if it knows of none;
// own is node's own document, if it answered (nil: it did not).
func restartingText(d, own *Doc, node string) string {
	if d == nil || own != nil {
		return ""
	}
	for _, g := range d.Restarting {
		if g.Node == node {
			return g.Text
		}
	}
	return ""
}
