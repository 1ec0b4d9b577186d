package data

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
)

// Split selects the training or the test part of a dataset.
type Split int

const (
	Test Split = iota
	Train
)

func (s Split) String() string {
	if s == Train {
		return "train"
	}
	return "test"
}

// CIFAR is CIFAR-10 or CIFAR-100 read from the official binary version
// (cifar-10-binary.tar.gz, cifar-100-binary.tar.gz), held in memory
// (30 MB for a test set, 150 MB for a training set).
//
// A CIFAR-10 record is 1 label byte and 3072 image bytes, the 32×32 red
// plane, then green, then blue; data_batch_1.bin … data_batch_5.bin are the
// training set and test_batch.bin the test set. A CIFAR-100 record has a
// coarse (superclass) and a fine label byte before the image; train.bin and
// test.bin hold the two sets. Labels are the fine labels; CoarseLabel gives
// the others.
type CIFAR struct {
	name          string
	src           string // for error messages
	recSize       int    // 3073 or 3074
	records       []byte
	classes       []string
	coarseClasses []string
}

const cifarImageBytes = 3 * 32 * 32

// cifarFormat describes one of the two binary layouts.
type cifarFormat struct {
	name        string
	dir         string // the archive's top folder
	labelBytes  int
	classes     int
	coarse      int // number of coarse classes (0: none)
	train, test []string
	classFile   string
	coarseFile  string
}

var (
	cifar10Format = cifarFormat{
		name: "cifar10", dir: "cifar-10-batches-bin", labelBytes: 1, classes: 10,
		train:     []string{"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin"},
		test:      []string{"test_batch.bin"},
		classFile: "batches.meta.txt",
	}
	cifar100Format = cifarFormat{
		name: "cifar100", dir: "cifar-100-binary", labelBytes: 2, classes: 100, coarse: 20,
		train: []string{"train.bin"}, test: []string{"test.bin"},
		classFile: "fine_label_names.txt", coarseFile: "coarse_label_names.txt",
	}
)

// OpenCIFAR10 reads a split of CIFAR-10 from path: cifar-10-binary.tar.gz
// itself, or its extracted folder (cifar-10-batches-bin, or the folder
// holding it). Class names come from batches.meta.txt; without it they are
// "0" … "9".
func OpenCIFAR10(path string, split Split) (*CIFAR, error) {
	return openCIFAR(path, split, &cifar10Format)
}

// OpenCIFAR100 reads a split of CIFAR-100 from path: cifar-100-binary.tar.gz
// or its extracted folder (cifar-100-binary, or the folder holding it).
// Class names come from fine_label_names.txt and coarse_label_names.txt;
// without them they are numbers. Note that these official names use
// underscores ("aquarium_fish"); prompts should use ReadLabels.
func OpenCIFAR100(path string, split Split) (*CIFAR, error) {
	return openCIFAR(path, split, &cifar100Format)
}

func openCIFAR(p string, split Split, f *cifarFormat) (*CIFAR, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("data: %s: %w", f.name, err)
	}
	want := f.test
	if split == Train {
		want = f.train
	}
	needed := map[string]bool{f.classFile: true}
	if f.coarseFile != "" {
		needed[f.coarseFile] = true
	}
	for _, n := range want {
		needed[n] = true
	}
	var files map[string][]byte
	if st.IsDir() {
		files, err = readCIFARDir(p, f, needed)
	} else {
		files, err = readCIFARArchive(p, needed)
	}
	if err != nil {
		return nil, err
	}
	recSize := f.labelBytes + cifarImageBytes
	d := &CIFAR{name: f.name + "-" + split.String(), src: p, recSize: recSize}
	size := 0
	for _, n := range want {
		b, ok := files[n]
		if !ok {
			return nil, fmt.Errorf("data: %s: no %s (want the %s binary version)", p, n, f.name)
		}
		if len(b) == 0 || len(b)%recSize != 0 {
			return nil, fmt.Errorf("data: %s: %s is %d bytes, not a whole number of %d-byte records", p, n, len(b), recSize)
		}
		size += len(b)
	}
	if len(want) == 1 {
		d.records = files[want[0]]
	} else {
		d.records = make([]byte, 0, size)
		for _, n := range want {
			d.records = append(d.records, files[n]...)
		}
	}
	if d.classes, err = cifarClassNames(p, files, f.classFile, f.classes); err != nil {
		return nil, err
	}
	if f.coarse > 0 {
		if d.coarseClasses, err = cifarClassNames(p, files, f.coarseFile, f.coarse); err != nil {
			return nil, err
		}
	}
	for i := range d.Len() {
		rec := d.records[i*recSize:]
		if l := int(rec[f.labelBytes-1]); l >= f.classes {
			return nil, fmt.Errorf("data: %s: record %d has label %d, want < %d", p, i, l, f.classes)
		}
		if f.coarse > 0 && int(rec[0]) >= f.coarse {
			return nil, fmt.Errorf("data: %s: record %d has coarse label %d, want < %d", p, i, rec[0], f.coarse)
		}
	}
	return d, nil
}

func cifarClassNames(src string, files map[string][]byte, name string, n int) ([]string, error) {
	b, ok := files[name]
	if !ok {
		return numericClasses(n), nil
	}
	names, err := parseLines(b)
	if err != nil {
		return nil, fmt.Errorf("data: %s: %s: %w", src, name, err)
	}
	if len(names) != n {
		return nil, fmt.Errorf("data: %s: %s has %d names, want %d", src, name, len(names), n)
	}
	return names, nil
}

// readCIFARDir reads the needed files from dir or from its subfolder named
// as the archive's top folder.
func readCIFARDir(dir string, f *cifarFormat, needed map[string]bool) (map[string][]byte, error) {
	if _, err := os.Stat(filepath.Join(dir, f.dir)); err == nil {
		dir = filepath.Join(dir, f.dir)
	}
	files := map[string][]byte{}
	for n := range needed {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if errors.Is(err, os.ErrNotExist) {
			continue // reported by the caller if it is a batch file
		}
		if err != nil {
			return nil, fmt.Errorf("data: %w", err)
		}
		files[n] = b
	}
	return files, nil
}

// readCIFARArchive reads the needed members (matched by base name) of a
// .tar.gz (or .tar) archive in one pass.
func readCIFARArchive(p string, needed map[string]bool) (map[string][]byte, error) {
	fh, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	defer fh.Close()
	r, err := decompressed(fh, p)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, nil
		}
		if err != nil {
			return nil, fmt.Errorf("data: %s: %w", p, err)
		}
		base := path.Base(h.Name)
		if h.Typeflag != tar.TypeReg || !needed[base] {
			continue
		}
		b := make([]byte, h.Size)
		if _, err := io.ReadFull(tr, b); err != nil {
			return nil, fmt.Errorf("data: %s: %s: %w", p, h.Name, err)
		}
		files[base] = b
	}
}

// decompressed returns f's contents, gunzipped if they start with the gzip
// magic number. Its errors name the file (name) but not the package.
func decompressed(f *os.File, name string) (io.Reader, error) {
	var magic [2]byte
	n, _ := io.ReadFull(f, magic[:])
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if n == 2 && magic == [2]byte{0x1f, 0x8b} {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return zr, nil
	}
	return f, nil
}

// Name returns "cifar10-test", "cifar100-train", ….
func (d *CIFAR) Name() string { return d.name }

// Len returns the number of images.
func (d *CIFAR) Len() int { return len(d.records) / d.recSize }

// Classes returns the (fine) class names.
func (d *CIFAR) Classes() []string { return d.classes }

// CoarseClasses returns CIFAR-100's 20 superclass names (nil for CIFAR-10).
func (d *CIFAR) CoarseClasses() []string { return d.coarseClasses }

// Label returns the (fine) label of image i.
func (d *CIFAR) Label(i int) int { return int(d.records[i*d.recSize+d.recSize-cifarImageBytes-1]) }

// CoarseLabel returns the superclass of image i of CIFAR-100 (and the
// label for CIFAR-10).
func (d *CIFAR) CoarseLabel(i int) int { return int(d.records[i*d.recSize]) }

// Item returns image i, converted from the file's planar (CHW) layout.
func (d *CIFAR) Item(i int) (*RGB, int, error) {
	if err := checkIndex(d.src, i, d.Len()); err != nil {
		return nil, 0, err
	}
	rec := d.records[i*d.recSize : (i+1)*d.recSize]
	label := int(rec[d.recSize-cifarImageBytes-1])
	const plane = 32 * 32
	r, g, b := rec[len(rec)-3*plane:], rec[len(rec)-2*plane:], rec[len(rec)-plane:]
	m := NewRGB(32, 32)
	for j := range plane {
		m.Pix[3*j], m.Pix[3*j+1], m.Pix[3*j+2] = r[j], g[j], b[j]
	}
	return m, label, nil
}

// Close releases nothing: the records are in memory.
func (d *CIFAR) Close() error { return nil }
