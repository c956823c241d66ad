package chainsync

import (
	"errors"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
)

// Validate is the one place that decides what configuration Start takes
// (draft "Topology and Configuration": a node with a predecessor listens
// for it; round ids per the wire grammar). It names the field to fix and
// changes nothing; Role places the node.
func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		field string // "" valid
		value string
	}{
		{Config{}, "", ""},
		{Config{Listen: "127.0.0.1:7001", Prev: "127.0.0.1:7000", Next: "127.0.0.1:7002"}, "", ""},
		{Config{Prev: "127.0.0.1:7000"}, "Listen", ""},
		{Config{Listen: "nohostport"}, "Listen", "nohostport"},
		{Config{Next: "nohostport"}, "Next", "nohostport"},
		{Config{Rounds: []string{"ok", "bad id!"}}, "Rounds", "bad id!"},
		{Config{Heartbeat: -time.Second}, "Heartbeat", "-1s"},
		{Config{TaskTimeout: -time.Second}, "TaskTimeout", "-1s"},
		{Config{ConnectTimeout: -time.Second}, "ConnectTimeout", "-1s"},
		{Config{PhaseTimeout: -time.Second}, "PhaseTimeout", "-1s"},
		{Config{MaxPending: -1}, "MaxPending", "-1"},
		{Config{FaultPolicy: 9}, "FaultPolicy", "FaultPolicy(?)"},
	} {
		before := tc.cfg
		err := tc.cfg.Validate()
		var ce *ConfigError
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%+v: %v, want valid", before, err)
		case tc.field == "":
		case !errors.As(err, &ce) || !errors.Is(err, ErrConfig):
			t.Errorf("%+v: %v, want a *ConfigError that is ErrConfig", before, err)
		case ce.Field != tc.field || ce.Value != tc.value:
			t.Errorf("%+v: field %q value %q, want %q %q (%v)", before, ce.Field, ce.Value, tc.field, tc.value, err)
		}
		if tc.cfg.WriteTimeout != 0 || tc.cfg.Logger != nil || tc.cfg.Task != nil || tc.cfg.MaxRounds != before.MaxRounds {
			t.Errorf("%+v: Validate changed the config", before)
		}
	}
	if _, err := Start(Config{Next: "nohostport"}); !errors.Is(err, ErrConfig) {
		t.Errorf("Start with a bad Next: %v, want ErrConfig", err)
	}
	for _, tc := range []struct {
		cfg  Config
		want protocol.Role
	}{
		{Config{}, protocol.Single},
		{Config{Next: "h:1"}, protocol.Head},
		{Config{Listen: "h:1", Next: "h:2"}, protocol.Middle},
		{Config{Listen: "h:1"}, protocol.Tail},
	} {
		if got := tc.cfg.Role(); got != tc.want {
			t.Errorf("%+v: role %v, want %v", tc.cfg, got, tc.want)
		}
	}
}
