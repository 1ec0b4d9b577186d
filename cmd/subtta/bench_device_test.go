package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/subtta/subtta/autograd"
	"github.com/subtta/subtta/autograd/kernel"
	"github.com/subtta/subtta/internal/devicetest"
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
// pass three times: with the upload of the images at every pass (the
// warm-up and each repetition), with them held on the device (uploaded
// once, in the warm-up), and with the next batch uploaded ahead while the
// pass runs, and prints the three rates. Run on kernel.Host's seam.
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
	for _, re := range []string{`(?m)^forward +[0-9.]+ images/s`, `(?m)^forward, images held on the device +[0-9.]+ images/s`, `(?m)^forward, next batch uploaded ahead +[0-9.]+ images/s`} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("no line matching %q in:\n%s", re, text)
		}
	}
	if strings.Contains(text, "× the fp32 forward pass above") {
		t.Errorf("the held-images pass was paired as a reduced-precision twin:\n%s", text)
	}
	// The passes uploading their images (the warm-up and each repetition),
	// the held pass's one upload, then the passes with the next batch
	// uploaded ahead: the warm-up's own batch and its next, then one next
	// batch a repetition.
	if want := (1 + reps) + 1 + (2 + reps); dev.count != want {
		t.Errorf("%d uploads of the images, want %d: %d passes uploading them, one for the held pass, %d uploads ahead", dev.count, want, 1+reps, 2+reps)
	}
}

// TestBenchSubTTAUploadsAhead: on a device, bench --only subtta times the
// SubTTA step twice: uploading its batch once a step (held for its passes),
// and with the next batch uploaded ahead while the step runs, which the
// step finds held by its pixels' memory (no upload of its own). Run on
// kernel.Host's seam.
func TestBenchSubTTAUploadsAhead(t *testing.T) {
	const batch, reps = 5, 3
	dev := &imageUploads{Device: kernel.Host, n: batch * 3 * 32 * 32}
	autograd.SetDevice(dev)
	defer autograd.SetDevice(nil)
	var out, errb bytes.Buffer
	if st := run([]string{"bench", "--model", "default", "--batch", strconv.Itoa(batch), "--reps", strconv.Itoa(reps), "--only", "subtta"}, &out, &errb); st != 0 {
		t.Fatalf("exit %d: %s", st, errb.String())
	}
	text := out.String()
	// Each step's line, then where its time went (the efficiency line
	// between them on the CPU).
	phases := `\n +phases, median ms a batch: align [0-9.]+, adapt [0-9.]+, predict [0-9.]+, outside them -?[0-9.]+\n`
	for _, re := range []string{`(?m)^SubTTA-MINT step \(ImageNet-C preset\) +[0-9.]+ images/s.*` + phases, `(?m)^SubTTA step, next batch uploaded ahead +[0-9.]+ images/s.*` + phases} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("no line matching %q in:\n%s", re, text)
		}
	}
	// One upload a step (the warm-up and each repetition), then the
	// warm-up's own batch and its next, and one next batch a repetition.
	if want := (1 + reps) + (2 + reps); dev.count != want {
		t.Errorf("%d uploads of the images, want %d: %d steps uploading theirs, %d uploads ahead", dev.count, want, 1+reps, 2+reps)
	}
}

// TestBulkUploadsAhead: on a device that is a kernel.Prefetcher, classify
// --images and embed --images upload each batch as it is read (beside the
// pass on the batch before), the passes read those copies, and every copy
// is freed: the outputs are those of the same device without uploads
// ahead (devicetest.LatePrefetcher holds NaN until a pass awaits a copy).
func TestBulkUploadsAhead(t *testing.T) {
	dir := t.TempDir()
	extractBuiltin(t, dir)
	folder := smallFolder(t, dir, 9, "bird", "truck")
	const batches = 3 // 18 images in batches of 8
	outputs := func(d kernel.Device, tag string) (csv, npy []byte) {
		autograd.SetDevice(d)
		defer autograd.SetDevice(nil)
		var stdout, errb bytes.Buffer
		csvPath := filepath.Join(dir, tag+".csv")
		if st := run([]string{"classify", "--images", folder, "--out", csvPath, "--batch-size", "8"}, &stdout, &errb); st != 0 {
			t.Fatalf("classify: status %d: %s", st, errb.String())
		}
		emb := filepath.Join(dir, tag+"-emb")
		if st := run([]string{"embed", "--images", folder, "--out", emb, "--batch-size", "8"}, &stdout, &errb); st != 0 {
			t.Fatalf("embed: status %d: %s", st, errb.String())
		}
		csv, err := os.ReadFile(csvPath)
		if err != nil {
			t.Fatal(err)
		}
		npy, err = os.ReadFile(filepath.Join(emb, "images.npy"))
		if err != nil {
			t.Fatal(err)
		}
		return csv, npy
	}
	wantCSV, wantNPY := outputs(kernel.Host, "plain")
	late := &devicetest.LatePrefetcher{Device: kernel.Host}
	gotCSV, gotNPY := outputs(late, "ahead")
	if !bytes.Equal(gotCSV, wantCSV) {
		t.Error("classify --images: the CSV over batches uploaded ahead differs")
	}
	if !bytes.Equal(gotNPY, wantNPY) {
		t.Error("embed --images: the features over batches uploaded ahead differ")
	}
	if up, awaits := late.Calls(); up != 2*batches || awaits != 2*batches {
		t.Errorf("%d batches uploaded ahead, %d awaited; want %d and %d", up, awaits, 2*batches, 2*batches)
	}
	if l := late.Live(); l != 0 {
		t.Errorf("%d copies uploaded ahead live after the runs", l)
	}
}

// TestEvalUploadsAhead: eval on a device that is a kernel.Prefetcher
// uploads each batch as it is read, and the methods' passes read those
// copies (devicetest.LatePrefetcher holds NaN until a pass awaits a copy):
// results.jsonl is, but for the times, that of the same device without
// uploads ahead, for methods that encode the batch in one pass (source,
// TENT), in several over a hold of their own (SubTTA, MINT), and one that
// encodes augmented views of it (MEMO: its copies go unread, and the
// uploads ahead stop); every copy is freed.
func TestEvalUploadsAhead(t *testing.T) {
	results := func(d kernel.Device) []map[string]any {
		autograd.SetDevice(d)
		defer autograd.SetDevice(nil)
		out := t.TempDir()
		var stdout, stderr bytes.Buffer
		args := evalArgs(t, out, "--methods", "source,tent,subtta-m,mint,memo", "--corruptions", "gaussian_noise",
			"--limit", "8", "--batch-size", "4")
		if st := run(args, &stdout, &stderr); st != 0 {
			t.Fatalf("status %d: %s", st, stderr.String())
		}
		b, err := os.ReadFile(filepath.Join(out, "results.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		var recs []map[string]any
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var r map[string]any
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatal(err)
			}
			dropTimes(r)
			recs = append(recs, r)
		}
		return recs
	}
	want := results(kernel.Host)
	late := &devicetest.LatePrefetcher{Device: kernel.Host}
	got := results(late)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("results.jsonl over batches uploaded ahead differs:\n%v\nwant\n%v", got, want)
	}
	up, awaits := late.Calls()
	t.Logf("%d batches uploaded ahead, %d awaited", up, awaits)
	// Four methods read their two batches' copies; MEMO's first batch goes
	// up unread, and its second too if it was read before the first step
	// ended.
	if up < 4*2+1 || up > 4*2+2 || awaits != 4*2 {
		t.Errorf("%d batches uploaded ahead and %d awaited, want 9 or 10 and 8", up, awaits)
	}
	if l := late.Live(); l != 0 {
		t.Errorf("%d copies uploaded ahead live after eval", l)
	}
}

// dropTimes deletes the keys that hold wall times from a decoded JSON
// value, at any depth.
func dropTimes(v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if strings.Contains(k, "seconds") || strings.Contains(k, "time") || k == "finished" || k == "images_per_second" {
				delete(x, k)
				continue
			}
			dropTimes(e)
		}
	case []any:
		for _, e := range x {
			dropTimes(e)
		}
	}
}
