package serve

import (
	"reflect"
	"testing"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/internal/devicetest"
)

// TestStepUploadsAhead: on a device that is a kernel.Prefetcher, a
// stream's batch is uploaded before its step waits for the model
// (Server.uploadAhead), the step's passes read that copy, and it is freed:
// the answers are those of the same device without uploads ahead
// (devicetest.LatePrefetcher holds NaN until a pass awaits a copy).
func TestStepUploadsAhead(t *testing.T) {
	imgs := images(t, 8)
	answers := func(d kernel.Device) []ClassifyResponse {
		autograd.SetDevice(d)
		defer autograd.SetDevice(nil)
		_, ts := startServer(t, testConfig(t))
		var out []ClassifyResponse
		for b := range 2 {
			out = append(out, streamBatch(t, ts, "ahead", imgs[4*b:4*b+4])...)
		}
		return out
	}
	want := answers(kernel.Host)
	late := &devicetest.LatePrefetcher{Device: kernel.Host}
	got := answers(late)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the answers over batches uploaded ahead differ:\n%+v\nwant\n%+v", got, want)
	}
	if up, awaits := late.Calls(); up != 2 || awaits != 2 {
		t.Errorf("%d batches uploaded ahead, %d awaited; want 2 and 2", up, awaits)
	}
	if l := late.Live(); l != 0 {
		t.Errorf("%d copies uploaded ahead live after the steps", l)
	}
}
