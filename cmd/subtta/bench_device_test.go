package main

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/autograd/kernel"
)

// imageUploads is kernel.Host counting the uploads of exactly n values:
// a batch's images.
type imageUploads struct {
	kernel.Device
	n     int
	mu    sync.Mutex
	count int
}

func (d *imageUploads) Upload(dst kernel.Buf, src []float32) error {
	if len(src) == d.n {
		d.mu.Lock()
		d.count++
		d.mu.Unlock()
	}
	return d.Device.Upload(dst, src)
}

// TestBenchHeldImages: on a device, bench --only forward times the forward
// pass twice: with the upload of the images at every pass (the warm-up
// and each repetition), then with them held on the device (uploaded once,
// in the warm-up), and prints both rates. Run on kernel.Host's seam.
func TestBenchHeldImages(t *testing.T) {
	const batch, reps = 5, 3                                          // 5 images: no weight of the model has their size
	dev := &imageUploads{Device: kernel.Host, n: batch * 3 * 32 * 32} // the built-in model's 32-pixel images
	autograd.SetDevice(dev)
	defer autograd.SetDevice(nil)
	var out, errb bytes.Buffer
	if st := run([]string{"bench", "--model", "default", "--batch", strconv.Itoa(batch), "--reps", strconv.Itoa(reps), "--only", "forward"}, &out, &errb); st != 0 {
		t.Fatalf("exit %d: %s", st, errb.String())
	}
	text := out.String()
	for _, re := range []string{`(?m)^forward +[0-9.]+ images/s`, `(?m)^forward, images held on the device +[0-9.]+ images/s`} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("no line matching %q in:\n%s", re, text)
		}
	}
	if strings.Contains(text, "× the fp32 forward pass above") {
		t.Errorf("the held-images pass was paired as a reduced-precision twin:\n%s", text)
	}
	if want := (1 + reps) + 1; dev.count != want {
		t.Errorf("%d uploads of the images, want %d: %d passes uploading them, then one for the held pass", dev.count, want, 1+reps)
	}
}
