package clusteretcd

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ebbtable/ebbtable/internal/etcdtest"
)

// TestClusterSettings: the first node records its cluster-wide settings;
// a later node with the same joins, one with another value is refused
// before it registers, and a setting not recorded yet is recorded by the
// node that brings it.
func TestClusterSettings(t *testing.T) {
	t.Parallel()
	ep := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	open := func(id string, settings map[string]string) (*Member, error) {
		m, err := Join(ctx, Options{Endpoints: []string{ep}, NodeID: id, TTL: ttl, Settings: settings})
		if err == nil {
			t.Cleanup(func() { m.Close() })
		}
		return m, err
	}
	a, err := open("a", map[string]string{"failover": "true"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := open("b", map[string]string{"failover": "true", "other": "1"}); err != nil {
		t.Fatalf("same setting: %v", err)
	}
	_, err = open("c", map[string]string{"failover": "false"})
	if !errors.Is(err, ErrSettingMismatch) || !strings.Contains(err.Error(), "failover=true") || !strings.Contains(err.Error(), "failover=false") {
		t.Fatalf("another setting: %v", err)
	}
	if _, err := open("d", map[string]string{"other": "2"}); !errors.Is(err, ErrSettingMismatch) {
		t.Fatalf("a setting b recorded: %v", err)
	}
	waitFor(t, a, "b only", func() bool { return ids(a.Nodes()) == "a b " })
}
