package gpu_test

import (
	"strings"
	"testing"

	"github.com/subtta/subtta/gpu"
)

// TestAvailableAgreesWithOpen: Open succeeds exactly when Available says a
// device can be used, and otherwise fails with the reason Available gives.
func TestAvailableAgreesWithOpen(t *testing.T) {
	ok, why := gpu.Available()
	d, err := gpu.Open(gpu.Options{})
	if ok {
		if err != nil {
			t.Fatalf("Available, but Open: %v", err)
		}
		if c, isCloser := d.(interface{ Close() error }); isCloser {
			c.Close()
		}
		return
	}
	t.Logf("unavailable: %s", why)
	if why == "" || strings.Contains(why, "\n") {
		t.Errorf("reason %q: want one line", why)
	}
	if err == nil || !strings.Contains(err.Error(), why) {
		t.Errorf("Open: %v; want an error saying %q", err, why)
	}
}
