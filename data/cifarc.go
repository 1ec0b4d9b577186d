package data

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/subtta/subtta/data/corrupt"
)

// Severities is the number of severity levels of the -C benchmarks.
const Severities = 5

// CIFARC is one corruption at one severity of CIFAR-10-C or CIFAR-100-C,
// read from the official files: <corruption>.npy, a uint8 array of shape
// [5n, H, W, 3] (n = 10000, H = W = 32) holding the n test images at
// severity 1, then at severity 2, …, and labels.npy, the [5n] labels
// (int64 in the official files). Severity k is rows n(k−1) … nk−1.
//
// Images are read from disk on demand (one read per image).
type CIFARC struct {
	corruption string
	severity   int
	images     *NPY
	first      int // first row of the severity
	labels     []int
	classes    []string
	h, w       int
}

// OpenCIFARC opens corruption at severity (1 to 5) in dir, a CIFAR-10-C or
// CIFAR-100-C folder. classes are the class names (10 or 100, e.g. from
// ReadLabels); every label must index into them. If classes is nil the
// names are "0", "1", … up to the largest label.
//
// A corruption without a file in dir gives an error naming the corruption
// and the ones dir holds; a file of the wrong dtype or shape gives one
// naming the file.
func OpenCIFARC(dir, corruption string, severity int, classes []string) (*CIFARC, error) {
	if severity < 1 || severity > Severities {
		return nil, fmt.Errorf("data: %s: severity %d out of range [1, %d]", dir, severity, Severities)
	}
	if st, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("data: CIFAR-C folder: %w", err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("data: CIFAR-C folder %s is not a directory", dir)
	}
	if corruption == "" || corruption == "labels" || strings.ContainsAny(corruption, `/\`) {
		return nil, fmt.Errorf("data: %s: invalid corruption name %q", dir, corruption)
	}
	path := filepath.Join(dir, corruption+".npy")
	images, err := OpenNPY(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, missingCorruption(dir, corruption)
	}
	if err != nil {
		return nil, err
	}
	ds, err := newCIFARC(dir, corruption, severity, images, classes)
	if err != nil {
		images.Close()
		return nil, err
	}
	return ds, nil
}

func newCIFARC(dir, corruption string, severity int, images *NPY, classes []string) (*CIFARC, error) {
	s := images.Shape
	if images.Dtype != "|u1" && images.Dtype != "<u1" || len(s) != 4 || s[3] != 3 || s[0]%Severities != 0 || s[0] == 0 || s[1] == 0 || s[2] == 0 {
		return nil, fmt.Errorf("data: %s: want a uint8 array of shape [5n, H, W, 3] (n images per severity), have %s %v", images.Path, images.Dtype, s)
	}
	lpath := filepath.Join(dir, "labels.npy")
	la, err := OpenNPY(lpath)
	if err != nil {
		return nil, err
	}
	defer la.Close()
	if len(la.Shape) != 1 || la.Shape[0] != s[0] {
		return nil, fmt.Errorf("data: %s: want shape [%d] to match %s, have %v", lpath, s[0], images.Path, la.Shape)
	}
	all, err := la.Ints()
	if err != nil {
		return nil, err
	}
	n := s[0] / Severities
	labels := all[n*(severity-1) : n*severity]
	maxLabel := slices.Max(labels)
	if classes == nil {
		classes = numericClasses(maxLabel + 1)
	}
	for i, l := range labels {
		if l < 0 || l >= len(classes) {
			return nil, fmt.Errorf("data: %s: label %d of row %d is outside the %d classes", lpath, l, n*(severity-1)+i, len(classes))
		}
	}
	return &CIFARC{
		corruption: corruption, severity: severity, images: images,
		first: n * (severity - 1), labels: labels, classes: classes,
		h: s[1], w: s[2],
	}, nil
}

// missingCorruption explains why dir has no file for corruption.
func missingCorruption(dir, corruption string) error {
	var have []string
	if m, _ := filepath.Glob(filepath.Join(dir, "*.npy")); m != nil {
		for _, p := range m {
			if name := strings.TrimSuffix(filepath.Base(p), ".npy"); name != "labels" {
				have = append(have, name)
			}
		}
	}
	if _, err := corrupt.Lookup(corruption); err != nil {
		return fmt.Errorf("data: %s: unknown corruption %q (the benchmark's are %s)", dir, corruption, strings.Join(corrupt.Names(), ", "))
	}
	return fmt.Errorf("data: %s: no %s.npy for corruption %q (the folder holds: %s)", dir, corruption, corruption, strings.Join(have, ", "))
}

// Name returns "<corruption>/<severity>".
func (d *CIFARC) Name() string { return fmt.Sprintf("%s/%d", d.corruption, d.severity) }

// Len returns the number of images at the severity (10000 officially).
func (d *CIFARC) Len() int { return len(d.labels) }

// Classes returns the class names.
func (d *CIFARC) Classes() []string { return d.classes }

// Label returns the label of image i.
func (d *CIFARC) Label(i int) int { return d.labels[i] }

// Item reads image i of the severity.
func (d *CIFARC) Item(i int) (*RGB, int, error) {
	if err := checkIndex(d.images.Path, i, len(d.labels)); err != nil {
		return nil, 0, err
	}
	m := NewRGB(d.w, d.h)
	if err := d.images.ReadAt(m.Pix, int64(d.first+i)*int64(len(m.Pix))); err != nil {
		return nil, 0, err
	}
	return m, d.labels[i], nil
}

// Close closes the image file.
func (d *CIFARC) Close() error { return d.images.Close() }
