package data

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
)

// ImageArchive is the index of the images in a .tar or .tar.gz file: its
// regular members with an image name (.jpg, .jpeg, .png, .gif in any
// case) none of whose path elements is hidden (starts with '.'), in the
// archive's order. It is the one reader of image archives: OpenFolder
// reads an archive through it, and so does subtta's --images.
//
// The archive is read once, when it is opened: an uncompressed tar's
// member offsets are recorded (a member is then read with one ReadAt),
// and a .tar.gz is decompressed, keeping its images' encoded bytes in
// memory (at most 4 GiB: fine for CIFAR-sized archives; extract larger
// ones, such as ImageNet, or keep them as .tar).
//
// Read is safe for concurrent use.
type ImageArchive struct {
	name    string
	members []archiveMember
	file    *os.File // uncompressed tar: open for ReadAt
	blob    []byte   // .tar.gz: the images' bytes, back to back
	closed  bool

	skipped      int
	firstSkipped string
}

type archiveMember struct {
	name   string // cleaned, without a leading "./"
	off, n int64  // the member's bytes in file or blob
}

// ArchiveOptions configures OpenImageArchive.
type ArchiveOptions struct {
	// SkipAbsolute skips (and counts in Skipped) the members with an
	// absolute path, which lie outside the folder the archive extracts
	// to (subtta's --images reads an archive as that folder). Without it
	// they are listed as any other, as OpenFolder reads them. A path
	// through ".." is always skipped: ".." is hidden.
	SkipAbsolute bool
}

// maxInMemoryArchive bounds the decompressed images a .tar.gz may hold.
const maxInMemoryArchive = 4 << 30

// OpenImageArchive indexes the images of the .tar or .tar.gz (recognised
// by content, not name) archive at p. Its errors name p but not this
// package (os.Open's error is returned as it is), so that the caller
// says in what context it read the archive.
func OpenImageArchive(p string, opts ArchiveOptions) (*ImageArchive, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	a := &ImageArchive{name: p}
	if err := a.index(f, opts); err != nil {
		f.Close()
		return nil, err
	}
	return a, nil
}

// index records the image members of f, keeping f open (a.file) for an
// uncompressed tar and closing it for a .tar.gz.
func (a *ImageArchive) index(f *os.File, opts ArchiveOptions) error {
	r, err := decompressed(f, a.name)
	if err != nil {
		return err
	}
	gz := r != io.Reader(f)
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: not a readable tar archive: %w", a.name, err)
		}
		if h.Typeflag == tar.TypeDir {
			continue
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if h.Typeflag != tar.TypeReg || !isImageName(path.Base(name)) || hiddenPath(name) ||
			opts.SkipAbsolute && path.IsAbs(name) {
			if a.skipped == 0 {
				a.firstSkipped = h.Name
			}
			a.skipped++
			continue
		}
		m := archiveMember{name: name, n: h.Size}
		if gz {
			if int64(len(a.blob))+h.Size > maxInMemoryArchive {
				return fmt.Errorf("%s: more than %d GiB of images; extract it or use an uncompressed .tar", a.name, maxInMemoryArchive>>30)
			}
			m.off = int64(len(a.blob))
			a.blob = slices.Grow(a.blob, int(h.Size))[:len(a.blob)+int(h.Size)]
			if _, err := io.ReadFull(tr, a.blob[m.off:]); err != nil {
				return fmt.Errorf("%s: %s: %w", a.name, h.Name, err)
			}
		} else if m.off, err = f.Seek(0, io.SeekCurrent); err != nil {
			// tar.Reader reads no further than the header, so the file
			// position is the start of the member's data.
			return fmt.Errorf("%s: %w", a.name, err)
		}
		a.members = append(a.members, m)
	}
	if gz {
		f.Close()
		return nil
	}
	a.file = f
	return nil
}

// hiddenPath reports whether a folder or the file of the '/'-separated
// path name is hidden (its name starts with '.').
func hiddenPath(name string) bool {
	for _, c := range strings.Split(name, "/") {
		if strings.HasPrefix(c, ".") {
			return true
		}
	}
	return false
}

// Len returns the number of images.
func (a *ImageArchive) Len() int { return len(a.members) }

// Name returns the member path of image i, cleaned (path.Clean) and
// without a leading "./", e.g. "test/cat/0001.jpg".
func (a *ImageArchive) Name(i int) string { return a.members[i].name }

// Read returns the encoded bytes of image i. The bytes of a .tar.gz's
// image are shared: the caller must not change them. The error is the
// reading's own, without the archive's or the member's name.
func (a *ImageArchive) Read(i int) ([]byte, error) {
	if a.closed {
		return nil, os.ErrClosed
	}
	m := a.members[i]
	if a.file == nil {
		return a.blob[m.off : m.off+m.n : m.off+m.n], nil
	}
	b := make([]byte, m.n)
	if _, err := a.file.ReadAt(b, m.off); err != nil {
		return nil, err
	}
	return b, nil
}

// Skipped returns how many members other than folders the archive holds
// besides its images (not regular files, not images, hidden, or, with
// ArchiveOptions.SkipAbsolute, absolute), and the
// first of them as the archive names it, "" if none: what a caller may
// say it left out.
func (a *ImageArchive) Skipped() (n int, first string) { return a.skipped, a.firstSkipped }

// Close closes an uncompressed archive and drops the in-memory images of
// a .tar.gz; Read then fails. Closing again does nothing.
func (a *ImageArchive) Close() error {
	if a.closed {
		return nil
	}
	a.closed = true
	a.blob = nil
	if a.file != nil {
		return a.file.Close()
	}
	return nil
}
