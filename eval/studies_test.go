package eval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	imagepng "image/png"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/internal/fixture"
	"github.com/subtta/subtta/tta"
	"github.com/subtta/subtta/tta/online"
)

func TestMethodOptionsParse(t *testing.T) {
	var o MethodOptions
	for _, a := range []string{"subtta.rank=8", "subtta-m.alpha=0.3", "subtta-m.rank=4", "tent.lr=1e-3"} {
		if err := o.Add(a); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []string{"rank=8", "subtta-m.rank", ".rank=1", "subtta-m.=1"} {
		if err := o.Add(bad); err == nil {
			t.Errorf("Add(%q) accepted", bad)
		}
	}
	// The method's own name wins over its family's.
	if got := o.forMethod("subtta-m"); got["rank"] != "4" || got["alpha"] != "0.3" || len(got) != 2 {
		t.Errorf("subtta-m: %v", got)
	}
	if got := o.forMethod("subtta-b"); got["rank"] != "8" || len(got) != 1 {
		t.Errorf("subtta-b: %v", got)
	}
	if got := o.forMethod("tent"); got["lr"] != "1e-3" {
		t.Errorf("tent: %v", got)
	}
	if err := o.check([]string{"subtta-m", "tent"}); err != nil {
		t.Error(err)
	}
	if err := o.check([]string{"subtta-m"}); err == nil || !strings.Contains(err.Error(), `"tent"`) {
		t.Errorf("options for a method not run: err = %v", err)
	}
	// A config file's values may be numbers and booleans.
	var c Config
	if err := json.Unmarshal([]byte(`{"method_options": {"subtta": {"rank": 8, "align": false, "prediction": "projected"}}}`), &c); err != nil {
		t.Fatal(err)
	}
	if got := c.MethodOptions["subtta"]; got["rank"] != "8" || got["align"] != "false" || got["prediction"] != "projected" {
		t.Errorf("method_options from JSON: %v", got)
	}
	if err := json.Unmarshal([]byte(`{"method_options": {"subtta": {"rank": [8]}}}`), &c); err == nil {
		t.Error("an array value accepted")
	}
}

// TestMethodOptionsIdentity: options reach the records and the run's
// identity. A folder of one setting refuses another; the same setting,
// spelt otherwise ("rank=5" under the family, "5" for "5.0"), resumes it.
// An unknown key or a value out of range is refused before anything is
// written.
func TestMethodOptionsIdentity(t *testing.T) {
	out := t.TempDir()
	cfg := smallRun(t, out, "contrast")
	cfg.Methods = []string{"subtta-m"}
	cfg.MethodOptions = MethodOptions{"subtta-m": {"rank": "5", "alpha": "0.3"}}
	sum := mustRun(t, cfg)
	if r := sum.Records[0]; r.Options["rank"] != "5" || r.Options["alpha"] != "0.3" || len(r.Options) != 2 {
		t.Errorf("record options %v", r.Options)
	}
	plain := smallRun(t, t.TempDir(), "contrast")
	plain.Methods = []string{"subtta-m"}
	ref := mustRun(t, plain)
	if ref.Records[0].Run == sum.Records[0].Run || ref.Records[0].Options != nil {
		t.Errorf("a run with options has the digest of one without (%s), or options %v", ref.Records[0].Run, ref.Records[0].Options)
	}

	other := cfg
	other.MethodOptions = MethodOptions{"subtta-m": {"rank": "6", "alpha": "0.3"}}
	if _, err := Run(context.Background(), other, Options{}); err == nil || !strings.Contains(err.Error(), "rank=5") {
		t.Errorf("another rank resumed the folder: err = %v", err)
	}
	same := cfg
	same.MethodOptions = MethodOptions{"subtta": {"rank": "5"}, "subtta-m": {"alpha": "0.30"}}
	again, err := Run(context.Background(), same, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if again.Resumed != 1 || again.Computed != 0 {
		t.Errorf("the same options spelt otherwise: %d resumed, %d computed", again.Resumed, again.Computed)
	}

	for _, tc := range []struct {
		opts MethodOptions
		want error
	}{
		{MethodOptions{"subtta-m": {"rnak": "5"}}, tta.ErrUnknownOption},
		{MethodOptions{"subtta-m": {"alpha": "2"}}, tta.ErrOptionValue},
	} {
		bad := smallRun(t, filepath.Join(t.TempDir(), "new"), "contrast")
		bad.Methods, bad.MethodOptions = []string{"subtta-m"}, tc.opts
		if _, err := Run(context.Background(), bad, Options{}); !errors.Is(err, tc.want) {
			t.Errorf("%v: err = %v, want %v", tc.opts, err, tc.want)
		}
		if exists(bad.Out) {
			t.Errorf("%v: a refused run created %s", tc.opts, bad.Out)
		}
	}
}

// TestMethodOptionsResume: a run with options interrupted mid-domain
// continues from its checkpoint, bit for bit as an uninterrupted one.
func TestMethodOptionsResume(t *testing.T) {
	base := testConfig(t, "")
	base.Methods, base.Corruptions = []string{"subtta-m"}, []string{"gaussian_noise", "contrast"}
	base.MethodOptions = MethodOptions{"subtta-m": {"rank": "4", "ema": "false", "soft": "0.1"}}
	clean := base
	clean.Out = t.TempDir()
	ref, err := Run(context.Background(), clean, Options{DiagnosticWorkers: -1})
	if err != nil {
		t.Fatal(err)
	}
	cfg := base
	cfg.Out = t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	_, err = Run(ctx, cfg, Options{DiagnosticWorkers: -1, Progress: func(p Progress) {
		if p.Done == cfg.Limit+8 { // second domain, second batch of 4
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want an interruption", err)
	}
	sum, err := Run(context.Background(), cfg, Options{DiagnosticWorkers: -1})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Resumed != 1 || sum.Continued != 2 {
		t.Errorf("%d resumed, %d batches continued; want 1 and 2", sum.Resumed, sum.Continued)
	}
	sameAsUninterrupted(t, sum, ref, cfg.Out, clean.Out)
}

// TestTemplatesGiveHeads: --templates replaces the templates of every
// method's preset, and a set by name gives the head that the preset owning
// those templates builds (tta.Preset.Heads): source with "watt" has WATT's
// ensemble head.
func TestTemplatesGiveHeads(t *testing.T) {
	cfg := smallRun(t, t.TempDir(), "contrast")
	cfg.Templates = []string{"watt"}
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	e := &evaluation{cfg: cfg}
	if err := e.openInputs(); err != nil {
		t.Fatal(err)
	}
	defer e.src.Close()
	p, err := cfg.preset("source")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Templates, tta.WATTTemplates) {
		t.Fatalf("source's templates %q", p.Templates)
	}
	got, err := e.methodHeads("source", p)
	if err != nil {
		t.Fatal(err)
	}
	watt, err := tta.Lookup("cifar10-c", "watt-s")
	if err != nil {
		t.Fatal(err)
	}
	want, err := watt.Heads(e.model, e.tok, e.src.classes)
	if err != nil {
		t.Fatal(err)
	}
	if !mat.Equal(got.Head, want.Head) {
		t.Error("source with the watt templates: head differs from WATT's ensemble head")
	}
	// CLIP's CIFAR ensemble by name is VTE's head.
	cfg.Templates = []string{"cifar-ensemble"}
	p, err = cfg.preset("source")
	if err != nil {
		t.Fatal(err)
	}
	got, err = e.methodHeads("source", p)
	if err != nil {
		t.Fatal(err)
	}
	vte, _ := tta.Lookup("cifar10-c", "vte")
	want, err = vte.Heads(e.model, e.tok, e.src.classes)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Templates) != 18 || !mat.Equal(got.Head, want.Head) {
		t.Error("source with cifar-ensemble: head differs from VTE's")
	}
	// Several entries concatenate; a template and a set mix.
	cfg.Templates = []string{"t0", "{} in a photo.", "mint"}
	ts, err := cfg.resolveTemplates()
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 9 || ts[0] != "a photo of a {}." || ts[1] != "{} in a photo." || ts[2] != tta.MINTTemplates[0] {
		t.Errorf("resolved templates %q", ts)
	}
	cfg.Templates = []string{"t8"}
	if _, err := cfg.resolveTemplates(); err == nil || !strings.Contains(err.Error(), "imagenet-ensemble") {
		t.Errorf("unknown set: err = %v", err)
	}
}

// TestClassSubsetBothSides: --classes keeps the drawn classes in the head
// and in every domain, with labels renumbered; each kept image is the
// image (and class) it was in the full set.
func TestClassSubsetBothSides(t *testing.T) {
	cfg := smallRun(t, t.TempDir(), "contrast")
	cfg.Classes, cfg.ClassSeed = 4, 7
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	full, err := openSource(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer full.Close()
	e := &evaluation{cfg: cfg}
	if err := e.openInputs(); err != nil {
		t.Fatal(err)
	}
	defer e.src.Close()
	keep := DrawClasses(10, 4, 7)
	if len(e.src.classes) != 4 || !slices.Equal(e.src.keep, keep) {
		t.Fatalf("classes %q, kept %v, want %v", e.src.classes, e.src.keep, keep)
	}
	for k, c := range keep {
		if e.src.classes[k] != full.classes[c] {
			t.Errorf("class %d is %q, want %q", k, e.src.classes[k], full.classes[c])
		}
	}
	p, _ := cfg.preset("source")
	h, err := e.methodHeads("source", p)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := h.Head.Dims(); r != 4 {
		t.Errorf("head of %d classes, want 4", r)
	}
	fullDS, err := full.open("contrast", 5)
	if err != nil {
		t.Fatal(err)
	}
	defer fullDS.Close()
	ds, err := e.src.open("contrast", 5)
	if err != nil {
		t.Fatal(err)
	}
	ds = e.src.subset(ds)
	defer ds.Close()
	counts := data.ClassCounts(fullDS)
	want := 0
	for _, c := range keep {
		want += counts[c]
	}
	if ds.Len() != want || want == 0 {
		t.Fatalf("%d images kept, want %d", ds.Len(), want)
	}
	// The first kept images are those of the full set with a kept class.
	j := 0
	for i := 0; i < fullDS.Len() && j < 5; i++ {
		l := fullDS.Label(i)
		k := slices.Index(keep, l)
		if k < 0 {
			continue
		}
		a, la, err := fullDS.Item(i)
		if err != nil {
			t.Fatal(err)
		}
		b, lb, err := ds.Item(j)
		if err != nil {
			t.Fatal(err)
		}
		if la != l || lb != k || !slices.Equal(a.Pix, b.Pix) {
			t.Errorf("kept image %d: label %d, want %d; same pixels as image %d: %v", j, lb, k, i, slices.Equal(a.Pix, b.Pix))
		}
		j++
	}
	// Names instead of a count; a bad name is refused.
	cfg.Classes, cfg.ClassNames = 0, []string{full.classes[8], full.classes[2]}
	if got, err := cfg.classSubset(full.classes); err != nil || !slices.Equal(got, []int{2, 8}) {
		t.Errorf("class names: %v, %v", got, err)
	}
	cfg.ClassNames = []string{"unicorn"}
	if _, err := cfg.classSubset(full.classes); err == nil || !strings.Contains(err.Error(), "unicorn") {
		t.Errorf("unknown class: err = %v", err)
	}
}

// TestClassSubsetRun: a run on a class subset records fewer images than
// the full set and has its own identity.
func TestClassSubsetRun(t *testing.T) {
	cfg := smallRun(t, t.TempDir(), "contrast")
	cfg.Limit = 0
	cfg.Classes, cfg.ClassSeed = 2, 1
	cfg.Data, cfg.Labels = writeSmallFolder(t), writeLabels(t, "airplane", "automobile", "bird", "cat")
	sum := mustRun(t, cfg)
	r := sum.Records[0]
	if r.Samples != 2*3 {
		t.Errorf("%d images of 2 classes, want 6", r.Samples)
	}
	b, _ := os.ReadFile(filepath.Join(cfg.Out, RunFile))
	if !strings.Contains(string(b), `"classes": "2 of 4 classes`) {
		t.Errorf("run.json lacks the classes:\n%s", b)
	}
}

// TestClassSubsetTooFewForMethod: a method that cannot adapt with the
// run's classes (SubTTA with 2) is refused before any method runs and
// before the results folder is made, naming it and the classes.
func TestClassSubsetTooFewForMethod(t *testing.T) {
	cfg := smallRun(t, filepath.Join(t.TempDir(), "out"), "contrast")
	cfg.Methods = []string{"source", "subtta-m"}
	cfg.Classes, cfg.ClassSeed = 2, 1
	cfg.Data, cfg.Labels = writeSmallFolder(t), writeLabels(t, "airplane", "automobile", "bird", "cat")
	_, err := Run(context.Background(), cfg, Options{})
	if !errors.Is(err, ErrTooFewClasses) || !strings.Contains(err.Error(), "subtta-m needs at least 3 classes") || !strings.Contains(err.Error(), "the run has 2") {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(cfg.Out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the results folder was made: %v", err)
	}
}

// writeSmallFolder writes 3 images of each of four CIFAR-10 classes in
// class folders and returns the folder.
func writeSmallFolder(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for c, class := range []string{"airplane", "automobile", "bird", "cat"} {
		os.MkdirAll(filepath.Join(root, class), 0o755)
		for i := range 3 {
			img := image.NewNRGBA(image.Rect(0, 0, 32, 32))
			for p := range img.Pix {
				img.Pix[p] = uint8(p*(7+c) + i*31)
			}
			f, err := os.Create(filepath.Join(root, class, fmt.Sprintf("%03d.png", i)))
			if err != nil {
				t.Fatal(err)
			}
			if err := imagepng.Encode(f, img); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	}
	return root
}

// TestGradualProtocol: every corruption runs at severities 1…5…1 with no
// reset; the way down is recorded as domains of their own; explicit
// severities are refused.
func TestGradualProtocol(t *testing.T) {
	cfg := smallRun(t, t.TempDir(), "contrast", "fog")
	cfg.Methods, cfg.Protocol, cfg.Limit = []string{"tent"}, online.Gradual, 4
	plan := planDomains(Config{Protocol: online.Gradual, Corruptions: []string{"contrast", "fog"}})
	var names []string
	for _, p := range plan {
		names = append(names, p.name)
	}
	want := []string{"contrast/1", "contrast/2", "contrast/3", "contrast/4", "contrast/5", "contrast/4↓", "contrast/3↓", "contrast/2↓", "contrast/1↓",
		"fog/1", "fog/2", "fog/3", "fog/4", "fog/5", "fog/4↓", "fog/3↓", "fog/2↓", "fog/1↓"}
	if !slices.Equal(names, want) {
		t.Fatalf("plan %q", names)
	}
	sum := mustRun(t, cfg)
	if len(sum.Records) != 18 {
		t.Fatalf("%d records, want 18", len(sum.Records))
	}
	for _, r := range sum.Records {
		down := strings.HasSuffix(r.Domain, "↓")
		if down != (r.Severity == 0 && r.Corruption == "") {
			t.Errorf("%s: corruption %q, severity %d", r.Domain, r.Corruption, r.Severity)
		}
	}
	bad := cfg
	bad.Severities = []int{3}
	if _, err := Run(context.Background(), bad, Options{}); err == nil || !strings.Contains(err.Error(), "gradual") {
		t.Errorf("gradual with severity 3: err = %v", err)
	}
	// Resumed after everything, nothing is computed again.
	again := mustRun(t, cfg)
	if again.Computed != 0 {
		t.Errorf("rerun computed %d domains", again.Computed)
	}
	// A way down whose domain is not one (5↓) is refused, naming its line.
	path := filepath.Join(cfg.Out, ResultsFile)
	b, _ := os.ReadFile(path)
	os.WriteFile(path, []byte(strings.Replace(string(b), `"domain":"fog/4↓"`, `"domain":"fog/5↓"`, 1)), 0o644)
	_, err := Run(context.Background(), cfg, Options{})
	if err == nil || !strings.Contains(err.Error(), path+": line 15: the record of tent on fog/5↓ gives no corruption and severity 0, which only a domain of the gradual protocol's way down has") {
		t.Errorf("a way down of severity 5: err = %v", err)
	}
}

// TestOptionOverridesFlag: a method option that sets what --batch-size or
// --views sets for every method (tent.batch_size=6 with --batch-size 4)
// wins, and the run says so, naming both, where it said nothing.
func TestOptionOverridesFlag(t *testing.T) {
	for _, tc := range []struct {
		methods   []string
		batchSize int
		views     int
		options   MethodOptions
		want      []string
	}{
		{[]string{"tent"}, 4, 0, MethodOptions{"tent": {"batch_size": "6"}},
			[]string{"warning: --batch-size 4 and --set tent.batch_size=6 both give tent's batch_size: tent runs with 6, the --set's (a method's option wins over the flag for every method)"}},
		{[]string{"subtta-m", "tent"}, 4, 0, MethodOptions{"subtta": {"batch_size": "8"}, "subtta-m": {"batch_size": "6"}},
			[]string{"warning: --batch-size 4 and --set subtta-m.batch_size=6 both give subtta-m's batch_size: subtta-m runs with 6, the --set's"}},
		{[]string{"subtta-s", "subtta-m"}, 4, 0, MethodOptions{"subtta": {"batch_size": "8"}},
			[]string{"--set subtta.batch_size=8 both give subtta-s's", "--set subtta.batch_size=8 both give subtta-m's"}},
		{[]string{"tpt"}, 0, 4, MethodOptions{"tpt": {"views": "8"}},
			[]string{"warning: --views 4 and --set tpt.views=8 both give tpt's views: tpt runs with 8, the --set's"}},
		{[]string{"tent"}, 0, 0, MethodOptions{"tent": {"batch_size": "6"}}, nil},
		{[]string{"tent"}, 4, 0, MethodOptions{"tent": {"lr": "1e-3"}}, nil},
	} {
		cfg := Config{Methods: tc.methods, BatchSize: tc.batchSize, Views: tc.views, MethodOptions: tc.options}
		got := cfg.overridden()
		if len(got) != len(tc.want) {
			t.Errorf("%+v: %q, want %d warnings", cfg, got, len(tc.want))
			continue
		}
		for i, w := range tc.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("%+v: %q, want %q", cfg, got[i], w)
			}
		}
	}
	// A run logs them before anything else.
	cfg := smallRun(t, t.TempDir(), "contrast")
	cfg.Methods, cfg.MethodOptions = []string{"tent"}, MethodOptions{"tent": {"batch_size": "6"}}
	var log strings.Builder
	if _, err := Run(context.Background(), cfg, Options{Log: &log}); err != nil {
		t.Fatal(err)
	}
	if want := "warning: --batch-size 4 and --set tent.batch_size=6 both give tent's batch_size: tent runs with 6"; !strings.HasPrefix(log.String(), want) {
		t.Errorf("log:\n%s\nwant it to start with %q", log.String(), want)
	}
}

// TestOrderFile: --order gives every stream's order in place of the
// shuffle (the same records as the shuffle's order written to a file),
// is part of the identity, and a wrong length is refused.
func TestOrderFile(t *testing.T) {
	cfg := smallRun(t, t.TempDir(), "contrast")
	cfg.Data, cfg.Labels = writeSmallFolder(t), writeLabels(t, "airplane", "automobile", "bird", "cat")
	cfg.Limit = 0
	cfg.Methods = []string{"tent"}
	ref := mustRun(t, cfg)
	order := online.PythonShuffle(12, cfg.Seed)
	var b strings.Builder
	for _, i := range order {
		fmt.Fprintln(&b, i)
	}
	file := filepath.Join(t.TempDir(), "order.txt")
	os.WriteFile(file, []byte(b.String()), 0o644)
	withOrder := cfg
	withOrder.Out, withOrder.Order = t.TempDir(), file
	got := mustRun(t, withOrder)
	if got.Records[0].Correct != ref.Records[0].Correct || !slices.Equal(got.Records[0].PredictedClassCosine, ref.Records[0].PredictedClassCosine) {
		t.Errorf("the shuffle's order from a file: %d correct, cosines %v; shuffled %d, %v", got.Records[0].Correct,
			got.Records[0].PredictedClassCosine, ref.Records[0].Correct, ref.Records[0].PredictedClassCosine)
	}
	if got.Records[0].Run == ref.Records[0].Run {
		t.Error("an order file left the identity unchanged")
	}
	os.WriteFile(file, []byte("0 1 2\n"), 0o644)
	short := withOrder
	short.Out = t.TempDir()
	if _, err := Run(context.Background(), short, Options{}); err == nil || !strings.Contains(err.Error(), "3 entries") {
		t.Errorf("an order of 3 for 12 images: err = %v", err)
	}
	// A bad entry is named by its line of the file.
	for _, tc := range []struct{ order, want string }{
		{"0 1 2 3\n4 5 6 7\n8 9 10 3\n", "sample index 3 is given twice (lines 1 and 3)"},
		{"0 1 2 3\n4 5 6 7\n8 9 10 12\n", "line 3: sample index 12 is beyond stream contrast/5, whose samples are 0…11"},
		{"0 1 2 3\n4 x\n", `line 2: "x" is not a sample index`},
		{"0 1 2 -3\n", `line 1: "-3" is not a sample index`},
	} {
		os.WriteFile(file, []byte(tc.order), 0o644)
		bad := withOrder
		bad.Out = t.TempDir()
		_, err := Run(context.Background(), bad, Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "order file "+file) {
			t.Errorf("order %q: err = %v, want the file and %q", tc.order, err, tc.want)
		}
	}
}

// TestImageNetVariantRun runs ImageNet-R on a generated tree of its 200
// class folders: one domain named after the dataset, ImageNet-C's presets,
// a head of 200 classes; a missing class folder is refused by name.
func TestImageNetVariantRun(t *testing.T) {
	root := t.TempDir()
	for i, k := range data.ImageNetRClasses {
		dir := filepath.Join(root, data.ImageNetWNIDs[k])
		os.MkdirAll(dir, 0o755)
		img := image.NewNRGBA(image.Rect(0, 0, 16, 16))
		for p := range img.Pix {
			img.Pix[p] = uint8(p*7 + i*13)
		}
		f, err := os.Create(filepath.Join(dir, "x.png"))
		if err != nil {
			t.Fatal(err)
		}
		imagepng.Encode(f, img)
		f.Close()
	}
	cfg := testConfig(t, t.TempDir())
	cfg.Dataset, cfg.Data, cfg.Labels = "imagenet-r", root, fixture.Path(t, "assets/labels")
	cfg.Methods, cfg.Corruptions, cfg.Limit = []string{"source", "subtta-m"}, nil, 8
	sum := mustRun(t, cfg)
	if len(sum.Records) != 2 {
		t.Fatalf("%d records, want 2", len(sum.Records))
	}
	for _, r := range sum.Records {
		if r.Domain != "imagenet-r" || r.Samples != 8 || r.Severity != 0 {
			t.Errorf("record %+v", r)
		}
	}
	p, err := cfg.preset("subtta-m")
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := tta.Lookup("imagenet-c", "subtta-m"); !reflect.DeepEqual(p.Config, want.Config) || p.BatchSize != 4 {
		t.Errorf("imagenet-r preset %+v, want imagenet-c's", p)
	}
	bad := cfg
	bad.Out = t.TempDir()
	bad.Corruptions = []string{"fog"}
	if _, err := Run(context.Background(), bad, Options{}); err == nil || !strings.Contains(err.Error(), "no corruptions") {
		t.Errorf("imagenet-r with fog: err = %v", err)
	}
	missing := data.ImageNetWNIDs[data.ImageNetRClasses[5]]
	os.RemoveAll(filepath.Join(root, missing))
	bad = cfg
	bad.Out = t.TempDir()
	if _, err := Run(context.Background(), bad, Options{}); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing class folder: err = %v", err)
	}
}

// TestImageNetCFewerClassFolders: an ImageNet-C tree of 10 class folders,
// read with ImageNet's 1000 class names, is refused with what to do in
// eval's terms (--labels naming its classes, or the whole tree and
// --classes), not data's advice of a wnid list, which eval takes no flag for.
func TestImageNetCFewerClassFolders(t *testing.T) {
	root := t.TempDir()
	for i := range 10 {
		dir := filepath.Join(root, "fog", "5", data.ImageNetWNIDs[i*100])
		os.MkdirAll(dir, 0o755)
		f, err := os.Create(filepath.Join(dir, "x.png"))
		if err != nil {
			t.Fatal(err)
		}
		imagepng.Encode(f, image.NewNRGBA(image.Rect(0, 0, 16, 16)))
		f.Close()
	}
	cfg := testConfig(t, t.TempDir())
	cfg.Dataset, cfg.Data, cfg.Labels = "imagenet-c", root, fixture.Path(t, "assets/labels")
	cfg.Methods, cfg.Corruptions = []string{"source"}, []string{"fog"}
	_, err := Run(context.Background(), cfg, Options{})
	if err == nil || !strings.Contains(err.Error(), "10 class folders for the 1000 classes") || !strings.Contains(err.Error(), "--labels") ||
		strings.Contains(err.Error(), "wnid list") {
		t.Errorf("err = %v, want the folders counted and --labels named", err)
	}
}
