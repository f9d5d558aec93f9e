package server

import "testing"

// TestParseInstance: exactly projects/P/instances/I, both non-empty, no
// other slashes.
func TestParseInstance(t *testing.T) {
	for name, ok := range map[string]bool{
		"projects/p/instances/i":       true,
		"projects/my-proj/instances/x": true,
		"projects//instances/i":        false,
		"projects/p/instances/":        false,
		"projects/p/instances/i/":      false,
		"projects/p/q/instances/i":     false,
		"projects/p/instances/i/x":     false,
		"project/p/instances/i":        false,
		"projects/p/instance/i":        false,
		"projects/p":                   false,
		"":                             false,
		"/projects/p/instances/i":      false,
	} {
		got, err := parseInstance(name)
		if (err == nil) != ok || (ok && got != name) {
			t.Errorf("parseInstance(%q) = %q, %v; want ok %v", name, got, err, ok)
		}
	}
	if _, err := parseTable("projects/p/instances/i/tables/t"); err != nil {
		t.Error(err)
	}
}
