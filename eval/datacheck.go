package eval

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/data/corrupt"
)

// The checks of this file refuse data that a dataset's reader would read
// without an error but wrongly: a -C tree written for another dataset, an
// ImageNet-C tree taken for a clean image folder, a clean folder of other
// classes than the benchmark's, ImageNet-C domains of different classes.

// manifestDatasets maps the clean dataset that corrupt.json's "source"
// names (subtta corrupt --dataset) to the benchmark it makes.
var manifestDatasets = map[string]string{"cifar10": "cifar10-c", "cifar100": "cifar100-c", "imagenet": "imagenet-c"}

// checkDataLayout refuses cfg.Data where its layout contradicts
// cfg.Dataset, before it is opened: a -C folder whose data.ManifestFile
// (written by subtta corrupt) records another dataset, and an ImageNet-C
// tree given for a dataset whose reader would take its corruption
// folders for class folders.
func checkDataLayout(cfg Config) error {
	if !isDir(cfg.Data) {
		return nil
	}
	p := filepath.Join(cfg.Data, data.ManifestFile)
	b, err := os.ReadFile(p)
	switch {
	case err == nil:
		var m struct {
			Source string `json:"source"`
		}
		if err := json.Unmarshal(b, &m); err != nil {
			return fmt.Errorf("eval: %s: %w", p, err)
		}
		made, _, _ := strings.Cut(m.Source, ";")
		made = strings.TrimSpace(made)
		if want, ok := manifestDatasets[made]; ok && want != cfg.Dataset {
			return fmt.Errorf("eval: %s was written from %s (its %s says so): give --dataset %s, not %s", cfg.Data, made, data.ManifestFile, want, cfg.Dataset)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("eval: %w", err)
	}
	if cfg.Dataset != "imagenet-c" && !exists(filepath.Join(cfg.Data, "labels.npy")) {
		if c := imageNetCFolders(cfg.Data); len(c) > 0 {
			return fmt.Errorf("eval: %s looks like an ImageNet-C tree (%s/<severity>/<wnid>/…): give --dataset imagenet-c", cfg.Data, strings.Join(c, ", "))
		}
	}
	return nil
}

// imageNetCFolders lists the folders of dir named after a corruption that
// hold a severity folder (1 … 5): dir is then an ImageNet-C tree, not a
// tree of class folders.
func imageNetCFolders(dir string) []string {
	var out []string
	for _, c := range corrupt.Names() {
		if len(severityFolders(filepath.Join(dir, c))) > 0 {
			out = append(out, c)
		}
	}
	return out
}

// severityFolders lists the severities (1 … 5) that dir has a folder of.
func severityFolders(dir string) []int {
	var out []int
	for s := 1; s <= data.Severities; s++ {
		if isDir(filepath.Join(dir, strconv.Itoa(s))) {
			out = append(out, s)
		}
	}
	return out
}

// checkCleanClasses refuses a clean CIFAR image folder whose class folders
// are not the benchmark's classes (10 or 100 of them; for CIFAR-10, its
// names) when no --labels places them: its sorted folder names would be
// taken as the run's classes, and the run would be another task under the
// benchmark's name. It is subtta corrupt's rule.
func checkCleanClasses(cfg Config, s *source) error {
	want := map[string]int{"cifar10-c": 10, "cifar100-c": 100}[cfg.Dataset]
	f, isFolder := s.clean.(*data.Folder)
	if s.kind != "clean" || !isFolder || want == 0 || cfg.Labels != "" {
		return nil
	}
	set := strings.TrimSuffix(cfg.Dataset, "-c")
	if err := data.CheckCIFARClassFolders(set, f.Classes()); err != nil {
		return fmt.Errorf("eval: %s: %w: give --labels DIR, a folder whose %s_classes.txt names the classes its folders are named after;"+
			" or, to run on fewer classes, use a folder of all %d and keep some with --classes or --class-names", cfg.Data, err, set, want)
	}
	return nil
}

// checkImageNetCTree checks the domains of an ImageNet-C tree before they
// are opened: each severity folder the run reads is there (else the error
// lists the severities the corruption has), and every domain holds the
// same class folders, which are matched to the classes by sorted
// position; a tree of all 1000 with wnid-named folders must hold
// ImageNet's wnids (data.ImageNetWNIDs), while one whose folders have
// other names (a tree made for timing, as scripts/gpu-run.sh's feed
// makes) is taken by position. The first difference is named.
func checkImageNetCTree(cfg Config, s *source) error {
	if s.kind != "imagenet-c" {
		return nil
	}
	var first string
	var want []string
	for _, p := range planDomains(cfg) {
		if p.corruption == Clean || p.down {
			continue
		}
		cdir := filepath.Join(cfg.Data, p.corruption)
		if !isDir(cdir) {
			continue // data.OpenImageNetC names it
		}
		dir := filepath.Join(cdir, strconv.Itoa(p.severity))
		if !isDir(dir) {
			have := severityFolders(cdir)
			if len(have) == 0 {
				return fmt.Errorf("eval: %s: severity %d of %s is missing: %s has no severity folders (1 … 5)", cfg.Data, p.severity, p.corruption, cdir)
			}
			return fmt.Errorf("eval: %s: severity %d of %s is missing (%s has severities %s)", cfg.Data, p.severity, p.corruption, p.corruption, joinInts(have))
		}
		got, err := data.ClassDirs(dir)
		if err != nil {
			return fmt.Errorf("eval: %w", err)
		}
		name := p.corruption + "/" + strconv.Itoa(p.severity)
		if want == nil {
			first, want = name, got
			if len(got) == len(data.ImageNetWNIDs) && len(s.classes) == len(data.ImageNetWNIDs) && anyWNID(got) {
				for i, w := range got {
					if w != data.ImageNetWNIDs[i] {
						return fmt.Errorf("eval: %s: %s: class folder %q is not an ImageNet wnid in order (class %d is %s): the folders, sorted, are taken as ImageNet's classes in order",
							cfg.Data, name, w, i, data.ImageNetWNIDs[i])
					}
				}
			}
			continue
		}
		if d := firstDifference(first, want, name, got); d != "" {
			return fmt.Errorf("eval: %s: the class folders of %s differ from those of %s: %s (the folders, sorted, are matched to the classes by position: every domain must hold the same)",
				cfg.Data, name, first, d)
		}
	}
	return nil
}

// firstDifference says where got, the sorted folders of domain gotName,
// first differs from want, those of domain wantName; "" if it does not.
func firstDifference(wantName string, want []string, gotName string, got []string) string {
	for i := range min(len(want), len(got)) {
		if want[i] != got[i] {
			return fmt.Sprintf("folder %d is %s in %s, %s in %s", i+1, got[i], gotName, want[i], wantName)
		}
	}
	switch {
	case len(got) < len(want):
		return fmt.Sprintf("%s has %d folders, %s %d (%s is missing)", gotName, len(got), wantName, len(want), want[len(got)])
	case len(got) > len(want):
		return fmt.Sprintf("%s has %d folders, %s %d (%s is extra)", gotName, len(got), wantName, len(want), got[len(want)])
	}
	return ""
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

// classOrigin says where the run's class names come from, for the data
// line of the log; modelClasses are the model's own (clip.Model.Classes).
func classOrigin(cfg Config, s *source, modelClasses []string) string {
	_, isFolder := s.clean.(*data.Folder)
	switch {
	case cfg.Labels != "":
		return "named by --labels " + cfg.Labels
	case s.kind == "clean" && isFolder && cfg.Dataset != "imagenet-c":
		return "named by the class folders"
	case s.kind == "clean" && cfg.Dataset != "imagenet-c":
		return "named by the CIFAR files"
	case len(modelClasses) > 0:
		return "named by the model's class list"
	case cfg.Dataset == "cifar10-c":
		return "CIFAR-10's names, built in"
	}
	return "named by the labels"
}

// describeClasses counts the run's classes and says where their names
// come from.
func describeClasses(cfg Config, s *source, modelClasses []string) string {
	n := fmt.Sprintf("%d classes", len(s.classes))
	if s.allClasses != nil {
		n = fmt.Sprintf("%d of %d classes", len(s.classes), len(s.allClasses))
	}
	return n + ", " + classOrigin(cfg, s, modelClasses)
}

// anyWNID reports whether any of names looks like a WordNet id (n and 8
// digits), as ImageNet's class folders are named.
func anyWNID(names []string) bool {
	for _, n := range names {
		if len(n) == 9 && n[0] == 'n' && strings.Trim(n[1:], "0123456789") == "" {
			return true
		}
	}
	return false
}
