package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	imagepng "image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/subtta/subtta/data"
)

// writeLabels writes a labels folder whose cifar10_classes.txt names
// classes, and returns it.
func writeLabels(t *testing.T, classes ...string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cifar10_classes.txt"), []byte(strings.Join(classes, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// writeTree makes the folders of paths under a new folder, one small
// image in each, and returns the folder.
func writeTree(t *testing.T, paths ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, p := range paths {
		dir := filepath.Join(root, p)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(filepath.Join(dir, "x.png"))
		if err != nil {
			t.Fatal(err)
		}
		imagepng.Encode(f, image.NewNRGBA(image.Rect(0, 0, 32, 32)))
		f.Close()
	}
	return root
}

// TestCheckDataLayout: a -C folder whose corrupt.json records another
// dataset, and an ImageNet-C tree given for CIFAR, are refused naming the
// dataset to give; what fits passes.
func TestCheckDataLayout(t *testing.T) {
	withManifest := func(source string) string {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "labels.npy"), nil, 0o644)
		os.WriteFile(filepath.Join(dir, data.ManifestFile), []byte(`{"layout": "cifar-c", "source": "`+source+`", "images": 4}`), 0o644)
		return dir
	}
	inc := writeTree(t, "fog/5/n01440764", "gaussian_noise/5/n01440764")
	badManifest := t.TempDir()
	os.WriteFile(filepath.Join(badManifest, data.ManifestFile), []byte(`{`), 0o644)
	for _, tc := range []struct {
		name, dataset, data, want string
	}{
		{"cifar10 written, cifar100-c asked", "cifar100-c", withManifest("cifar10; data 2000 files"), "was written from cifar10 (its corrupt.json says so): give --dataset cifar10-c, not cifar100-c"},
		{"cifar10 written, cifar10-c asked", "cifar10-c", withManifest("cifar10; data 2000 files"), ""},
		{"imagenet written, cifar10-c asked", "cifar10-c", withManifest("imagenet"), "give --dataset imagenet-c, not cifar10-c"},
		{"unknown source", "cifar10-c", withManifest("something else"), ""},
		{"damaged manifest", "cifar10-c", badManifest, "corrupt.json"},
		{"ImageNet-C tree for cifar10-c", "cifar10-c", inc, "looks like an ImageNet-C tree (gaussian_noise, fog/<severity>/<wnid>/…): give --dataset imagenet-c"},
		{"ImageNet-C tree for imagenet-r", "imagenet-r", inc, "give --dataset imagenet-c"},
		{"ImageNet-C tree for imagenet-c", "imagenet-c", inc, ""},
		{"a class named fog", "cifar10-c", writeTree(t, "fog", "cat"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkDataLayout(Config{Dataset: tc.dataset, Data: tc.data})
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestCleanFolderClasses: a clean CIFAR folder of other classes than the
// benchmark's is refused unless --labels places its folders; the data line
// and run.json say which classes a run used.
func TestCleanFolderClasses(t *testing.T) {
	ten := make([]string, 10)
	for i := range ten {
		ten[i] = string(rune('a'+i)) + "class"
	}
	for _, tc := range []struct {
		name    string
		dataset string
		folders []string
		labels  []string
		want    string
	}{
		{"two of ten", "cifar10-c", []string{"bar", "foo"}, nil, "2 class folders (bar, foo), cifar10 has 10: give --labels DIR"},
		{"CIFAR-10 names, too few", "cifar10-c", []string{"airplane", "cat"}, nil, "--classes or --class-names"},
		{"ten, not CIFAR-10's", "cifar10-c", ten, nil, `class folder "aclass" is not CIFAR-10's class "airplane"`},
		{"all of CIFAR-10", "cifar10-c", data.CIFAR10Classes, nil, ""},
		{"two of a hundred", "cifar100-c", []string{"bar", "foo"}, nil, "cifar100 has 100: give --labels DIR, a folder whose cifar100_classes.txt"},
		{"placed by labels", "cifar10-c", []string{"bar", "foo"}, []string{"foo", "bar"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Dataset: tc.dataset, Data: writeTree(t, tc.folders...)}
			if tc.labels != nil {
				cfg.Labels = writeLabels(t, tc.labels...)
				if tc.dataset == "cifar100-c" {
					t.Fatal("labels are written for cifar10")
				}
			}
			s, err := openSourceFor(cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			err = checkCleanClasses(cfg, s)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}

	// A run: refused without labels, and with them the data line and
	// run.json name the classes.
	cfg := smallRun(t, t.TempDir(), "contrast")
	cfg.Data = writeTree(t, "foo", "bar")
	if _, err := Run(context.Background(), cfg, Options{}); err == nil || !strings.Contains(err.Error(), "give --labels") {
		t.Fatalf("2-class folder as cifar10-c: %v", err)
	}
	cfg.Labels = writeLabels(t, "foo", "bar")
	var log bytes.Buffer
	if _, err := Run(context.Background(), cfg, Options{Log: &log}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "; 2 classes, named by --labels "+cfg.Labels+"\n") {
		t.Errorf("log lacks the classes:\n%s", log.String())
	}
	b, err := os.ReadFile(filepath.Join(cfg.Out, RunFile))
	if err != nil {
		t.Fatal(err)
	}
	var rf runFile
	if err := json.Unmarshal(b, &rf); err != nil || strings.Join(rf.Classes, ",") != "foo,bar" {
		t.Errorf("run.json classes %q (%v), want foo, bar", rf.Classes, err)
	}
	if _, err := ReadConfig(filepath.Join(cfg.Out, RunFile)); err != nil {
		t.Errorf("run.json with classes is not read as a config: %v", err)
	}
}

// TestImageNetCTreeChecks: a missing severity is named with those the
// corruption has, and domains whose class folders differ are refused,
// naming the first difference.
func TestImageNetCTreeChecks(t *testing.T) {
	classes := []string{"a", "b", "c"}
	for _, tc := range []struct {
		name       string
		tree       []string
		severities []int
		want       string
	}{
		{"same folders", []string{"fog/5/n1", "fog/5/n2", "gaussian_noise/5/n1", "gaussian_noise/5/n2"}, nil, ""},
		{"missing severity", []string{"fog/3/n1", "fog/5/n1", "gaussian_noise/1/n1"}, []int{1}, "severity 1 of fog is missing (fog has severities 3, 5)"},
		{"other folder", []string{"gaussian_noise/5/n1", "gaussian_noise/5/n2", "fog/5/n1", "fog/5/n3"},
			nil, "the class folders of fog/5 differ from those of gaussian_noise/5: folder 2 is n3 in fog/5, n2 in gaussian_noise/5"},
		{"folder missing", []string{"gaussian_noise/5/n1", "gaussian_noise/5/n2", "fog/5/n1"},
			nil, "fog/5 differ from those of gaussian_noise/5: fog/5 has 1 folders, gaussian_noise/5 2 (n2 is missing)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Config{Model: "m", Dataset: "imagenet-c", Data: writeTree(t, tc.tree...), Corruptions: []string{"gaussian_noise", "fog"},
				Severities: tc.severities}.withDefaults()
			if err != nil {
				t.Fatal(err)
			}
			err = checkImageNetCTree(cfg, &source{kind: "imagenet-c", classes: classes})
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
	// Class folders are those data reads: a link to a folder is one, a
	// hidden folder is not (n2 is a link in fog/5, which also holds .cache).
	root := writeTree(t, "gaussian_noise/5/n1", "gaussian_noise/5/n2", "fog/5/n1", "fog/5/.cache", "elsewhere/n2")
	if err := os.Symlink(filepath.Join(root, "elsewhere", "n2"), filepath.Join(root, "fog", "5", "n2")); err != nil {
		t.Fatal(err)
	}
	linked := Config{Dataset: "imagenet-c", Data: root, Corruptions: []string{"gaussian_noise", "fog"}, Severities: []int{5}}
	if err := checkImageNetCTree(linked, &source{kind: "imagenet-c", classes: classes[:2]}); err != nil {
		t.Errorf("a class folder that is a link, and a hidden folder: %v", err)
	}
	// A tree of all 1000 must hold ImageNet's wnids.
	wnids := append([]string(nil), data.ImageNetWNIDs...)
	wnids[7] = "n00000000"
	var paths []string
	for _, w := range wnids {
		paths = append(paths, "fog/5/"+w)
	}
	cfg := Config{Dataset: "imagenet-c", Data: writeTree(t, paths...), Corruptions: []string{"fog"}, Severities: []int{5}}
	err := checkImageNetCTree(cfg, &source{kind: "imagenet-c", classes: data.ImageNetWNIDs})
	if err == nil || !strings.Contains(err.Error(), `class folder "n00000000" is not an ImageNet wnid in order (class 0 is n01440764)`) {
		t.Errorf("1000 folders, one not a wnid: %v", err)
	}
	// Folders not named by wnids (a tree made for timing) go by position.
	paths = paths[:0]
	for i := range data.ImageNetWNIDs {
		paths = append(paths, fmt.Sprintf("fog/5/c%04d", i))
	}
	cfg.Data = writeTree(t, paths...)
	if err := checkImageNetCTree(cfg, &source{kind: "imagenet-c", classes: data.ImageNetWNIDs}); err != nil {
		t.Errorf("1000 folders named c0000…: %v", err)
	}
}

// TestEmptyShardWarns: a shard that gets none of the run's units says so
// and succeeds (a Slurm array may have more tasks than the run has units).
func TestEmptyShardWarns(t *testing.T) {
	cfg := smallRun(t, t.TempDir(), "contrast")
	cfg.Limit = 4
	cfg.Shard = &Shard{Index: 1, Count: 2}
	var log bytes.Buffer
	if _, err := Run(context.Background(), cfg, Options{Log: &log}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "warning: shard 1/2 has nothing to do: all 1 units of the run go to other shards") {
		t.Errorf("log:\n%s", log.String())
	}
}
