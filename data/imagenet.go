package data

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/subtta/subtta/data/corrupt"
)

// ImageNetOptions configures the ImageNet readers.
//
// The class index of an ImageNet image is the position of its wnid (the
// folder name, e.g. n01440764) in the sorted list of the 1000 wnids.
// OpenAI's class names (imagenet_classes_openai.txt in the assets' labels/)
// are in that order, but the wnid list itself is not among the assets: a
// tree of all 1000 class folders needs none (its sorted folder names are
// the list), while a tree with fewer classes, such as ImageNet-A or
// ImageNet-R (200 each), needs WNIDs to place its folders among the 1000.
type ImageNetOptions struct {
	// Classes are the class names in class-index order; nil means the
	// wnids.
	Classes []string
	// WNIDs are the wnids in class-index order (see ReadWNIDs). Nil means
	// the tree's sorted folder names, which must then number len(Classes).
	WNIDs []string
	// SubsetList is the path of a list of images to keep, one
	// "<wnid>/<file>" per line, such as robustbench's
	// imagenet_test_image_ids.txt (the 5,000 ImageNet-C images of the
	// benchmark). Images keep the list's order. Empty means every image.
	SubsetList string
	// Name names the dataset; empty means a name derived from the path.
	Name string
}

// OpenImageNetC opens one corruption at one severity of ImageNet-C, laid
// out as dir/<corruption>/<severity>/<wnid>/*.JPEG.
func OpenImageNetC(dir, corruption string, severity int, opts ImageNetOptions) (*Folder, error) {
	if severity < 1 || severity > Severities {
		return nil, fmt.Errorf("data: %s: severity %d out of range [1, %d]", dir, severity, Severities)
	}
	if st, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("data: ImageNet-C folder: %w", err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("data: ImageNet-C folder %s is not a directory", dir)
	}
	if corruption == "" || strings.ContainsAny(corruption, `/\`) || corruption == "." || corruption == ".." {
		return nil, fmt.Errorf("data: %s: invalid corruption name %q", dir, corruption)
	}
	cdir := filepath.Join(dir, corruption)
	if _, err := os.Stat(cdir); err != nil {
		have, _ := ClassDirs(dir)
		if _, lerr := corrupt.Lookup(corruption); lerr != nil {
			return nil, fmt.Errorf("data: %s: unknown corruption %q (the benchmark's are %s)", dir, corruption, strings.Join(corrupt.Names(), ", "))
		}
		return nil, fmt.Errorf("data: %s: no folder for corruption %q (the folder holds: %s)", dir, corruption, strings.Join(have, ", "))
	}
	if opts.Name == "" {
		opts.Name = fmt.Sprintf("%s/%d", corruption, severity)
	}
	return OpenImageNetFolder(filepath.Join(cdir, strconv.Itoa(severity)), opts)
}

// OpenImageNetFolder opens an ImageNet-style tree, path/<wnid>/<images>
// (a directory, .tar or .tar.gz, see OpenFolder): the ImageNet validation
// set sorted into class folders, one ImageNet-C domain, ImageNet-A,
// ImageNet-R or ImageNet-Sketch. Labels are ImageNet class indices.
func OpenImageNetFolder(path string, opts ImageNetOptions) (*Folder, error) {
	fo := FolderOptions{Name: opts.Name, Classes: opts.Classes, FolderNames: opts.WNIDs, byPosition: true}
	if opts.SubsetList != "" {
		files, err := readSubsetList(opts.SubsetList)
		if err != nil {
			return nil, err
		}
		fo.Files = files
	}
	return OpenFolder(path, fo)
}

// readSubsetList reads a list of "<wnid>/<file>" lines; anything after
// white space on a line (such as a label) is ignored.
func readSubsetList(p string) ([]string, error) {
	lines, err := ReadLines(p)
	if err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(lines))
	for i, l := range lines {
		f := path.Clean(strings.Fields(l)[0])
		if strings.Count(f, "/") != 1 || strings.HasPrefix(f, "../") || strings.HasPrefix(f, "/") {
			return nil, fmt.Errorf("data: %s: line %d: %q is not <wnid>/<file>", p, i+1, l)
		}
		if seen[f] {
			return nil, fmt.Errorf("data: %s: line %d: %s is listed twice", p, i+1, f)
		}
		seen[f] = true
		lines[i] = f
	}
	return lines, nil
}

// ReadWNIDs reads a list of wnids in class-index order: one per line, the
// first field of each line, so that both a bare list and the
// "n01440764 tench, Tinca tinca" lines of LOC_synset_mapping.txt work.
func ReadWNIDs(path string) ([]string, error) {
	lines, err := ReadLines(path)
	if err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(lines))
	for i, l := range lines {
		w := strings.Fields(l)[0]
		if seen[w] {
			return nil, fmt.Errorf("data: %s: line %d: wnid %s is listed twice", path, i+1, w)
		}
		seen[w] = true
		lines[i] = w
	}
	return lines, nil
}
