package data

import (
	"archive/tar"
	"errors"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeHeaders writes a .tar (gzipped if gz) at p of the given headers,
// each regular member's bytes its name.
func writeHeaders(t *testing.T, p string, gz bool, hs []tar.Header) {
	t.Helper()
	entries := make([]tarEntry, len(hs))
	for i, h := range hs {
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		entries[i].h = h
		if h.Typeflag == tar.TypeReg {
			entries[i].h.Size = int64(len(h.Name))
			entries[i].data = []byte(h.Name)
		}
	}
	writeTarEntries(t, p, gz, entries)
}

// TestImageArchive: an archive lists its regular image members, not
// hidden, in its order (names cleaned, "./" dropped), each read back as
// its bytes, from a .tar and a .tar.gz alike; the other members but
// folders are counted as skipped, the first named as the archive names
// it; a path through ".." is hidden, and SkipAbsolute skips absolute
// paths too.
func TestImageArchive(t *testing.T) {
	reg := func(name string) tar.Header { return tar.Header{Name: name, Typeflag: tar.TypeReg} }
	for _, tc := range []struct {
		name         string
		headers      []tar.Header
		skipAbsolute bool
		want         []string // member names; a member's bytes are its header name
		skipped      int
		firstSkipped string
	}{
		{name: "images in order",
			headers: []tar.Header{reg("b/2.png"), reg("a/1.JPG"), reg("a/x/3.jpeg"), reg("4.gif")},
			want:    []string{"b/2.png", "a/1.JPG", "a/x/3.jpeg", "4.gif"}},
		{name: "names cleaned",
			headers: []tar.Header{reg("./test/cat/1.png"), reg("test//dog/./2.png")},
			want:    []string{"test/cat/1.png", "test/dog/2.png"}},
		{name: "folders not counted",
			headers: []tar.Header{{Name: "cat/", Typeflag: tar.TypeDir}, reg("cat/1.png")},
			want:    []string{"cat/1.png"}},
		{name: "others skipped",
			headers: []tar.Header{reg("cat/README.txt"), reg("cat/1.png"), reg("cat/.2.png"), reg(".git/cat/3.png"),
				{Name: "cat/link.png", Typeflag: tar.TypeSymlink, Linkname: "1.png"}, reg("cat/noext")},
			want: []string{"cat/1.png"}, skipped: 5, firstSkipped: "cat/README.txt"},
		{name: "first skipped as named",
			headers: []tar.Header{reg("./cat/._1.png"), reg("cat/1.png")},
			want:    []string{"cat/1.png"}, skipped: 1, firstSkipped: "./cat/._1.png"},
		{name: "absolute kept",
			headers: []tar.Header{reg("/abs/cat/1.png"), reg("../up/cat/2.png"), reg("cat/../../4.png"), reg("cat/3.png")},
			want:    []string{"/abs/cat/1.png", "cat/3.png"}, skipped: 2, firstSkipped: "../up/cat/2.png"},
		{name: "absolute skipped",
			headers:      []tar.Header{reg("/abs/cat/1.png"), reg("../up/cat/2.png"), reg("cat/../../4.png"), reg("cat/3.png")},
			skipAbsolute: true,
			want:         []string{"cat/3.png"}, skipped: 3, firstSkipped: "/abs/cat/1.png"},
		{name: "no images",
			headers: []tar.Header{reg("a/readme.txt")},
			skipped: 1, firstSkipped: "a/readme.txt"},
	} {
		for _, gz := range []bool{false, true} {
			name := tc.name + map[bool]string{false: " tar", true: " tar.gz"}[gz]
			t.Run(name, func(t *testing.T) {
				p := filepath.Join(t.TempDir(), "a.tar")
				writeHeaders(t, p, gz, tc.headers)
				a, err := OpenImageArchive(p, ArchiveOptions{SkipAbsolute: tc.skipAbsolute})
				if err != nil {
					t.Fatal(err)
				}
				defer a.Close()
				var got []string
				for i := range a.Len() {
					got = append(got, a.Name(i))
				}
				if !slices.Equal(got, tc.want) {
					t.Errorf("members %q, want %q", got, tc.want)
				}
				if n, first := a.Skipped(); n != tc.skipped || first != tc.firstSkipped {
					t.Errorf("skipped %d, the first %q; want %d, %q", n, first, tc.skipped, tc.firstSkipped)
				}
				// The bytes of each member are its name as written.
				for i := range a.Len() {
					b, err := a.Read(i)
					if err != nil {
						t.Fatal(err)
					}
					if path.Clean(strings.TrimPrefix(string(b), "./")) != a.Name(i) {
						t.Errorf("member %d (%s) read as %q", i, a.Name(i), b)
					}
				}
				if err := a.Close(); err != nil {
					t.Error(err)
				}
				if a.Len() > 0 {
					if _, err := a.Read(0); !errors.Is(err, os.ErrClosed) {
						t.Errorf("read after Close: %v, want %v", err, os.ErrClosed)
					}
				}
				if err := a.Close(); err != nil {
					t.Errorf("second Close: %v", err)
				}
			})
		}
	}
}

// TestImageArchiveErrors: errors name the archive and what went wrong,
// not the package (the caller gives the context).
func TestImageArchiveErrors(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.tar")
	os.WriteFile(junk, []byte(strings.Repeat("not a tar archive ", 40)), 0o644)
	badGz := filepath.Join(dir, "bad.tar.gz")
	os.WriteFile(badGz, []byte{0x1f, 0x8b, 0, 0, 1, 2, 3}, 0o644)
	for _, tc := range []struct {
		path string
		want string
	}{
		{filepath.Join(dir, "absent.tar"), "open " + filepath.Join(dir, "absent.tar") + ": "},
		{junk, junk + ": not a readable tar archive: "},
		{badGz, badGz + ": "},
	} {
		a, err := OpenImageArchive(tc.path, ArchiveOptions{})
		if err == nil {
			a.Close()
			t.Errorf("%s: no error", tc.path)
			continue
		}
		if !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "data:") {
			t.Errorf("%s: error %q, want it to start %q, without the package", tc.path, err, tc.want)
		}
	}
}

// TestImageRoot: the root of a tree of images is the deepest folder
// holding them all, or its parent when they all lie directly in it.
func TestImageRoot(t *testing.T) {
	for _, tc := range []struct {
		rels []string
		want string
	}{
		{[]string{"cat/1.jpg", "dog/2.jpg"}, ""},
		{[]string{"test/cat/1.jpg", "test/dog/2.jpg"}, "test"},
		{[]string{"a/b/cat/1.jpg", "a/b/dog/x/2.jpg"}, "a/b"},
		{[]string{"cat/1.jpg", "cat/2.jpg"}, ""},                     // one class
		{[]string{"test/cat/1.jpg", "test/cat/2.jpg"}, "test"},       // one class, wrapped
		{[]string{"test/cat/1.jpg", "test/cat/x/2.jpg"}, "test/cat"}, // not all directly in cat
		{[]string{"1.jpg", "2.jpg"}, ""},
		{[]string{"cat/1.jpg", "top.jpg"}, ""},
		{[]string{"test/cat/1.jpg", "test/top.jpg"}, "test"},
		{[]string{"test/cat/1.jpg", "testing/dog/2.jpg"}, ""}, // a common prefix is no common folder
		{[]string{"../up/cat/1.jpg", "../up/dog/2.jpg"}, "../up"},
		{[]string{"/data/cat/1.jpg", "/data/dog/2.jpg"}, "/data"},
		{[]string{"/x/cat/1.jpg", "/y/dog/2.jpg"}, "/"}, // stops at "/"
		{[]string{"/x/1.jpg", "y/2.jpg"}, "/"},
	} {
		if got := ImageRoot(tc.rels); got != tc.want {
			t.Errorf("ImageRoot(%q) = %q, want %q", tc.rels, got, tc.want)
		}
	}
}

// TestWalkImages: a folder's images, hidden folders and files left out
// and said to skip, in WalkDir's order, relative to the folder; a link to
// a folder is not entered unless it is the folder given, with a final
// separator.
func TestWalkImages(t *testing.T) {
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	writeTree(t, tree, []member{
		{"b/2.png", nil}, {"a/1.JPG", nil}, {"a/x/3.jpeg", nil}, {"4.gif", nil},
		{"a/README.txt", nil}, {"a/.5.png", nil}, {".git/6.png", nil}, {"a/.cache/7.png", nil},
	})
	if err := os.Symlink(filepath.Join(tree, "b"), filepath.Join(tree, "linked")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(tree, "4.gif"), filepath.Join(tree, "c.gif")); err != nil {
		t.Fatal(err)
	}
	hidden := filepath.Join(dir, ".hidden")
	writeTree(t, hidden, []member{{"cat/1.png", nil}})
	link := filepath.Join(dir, "link")
	if err := os.Symlink(tree, link); err != nil {
		t.Fatal(err)
	}
	type skip struct {
		path   string
		folder bool
	}
	for _, tc := range []struct {
		dir     string
		want    []string
		skipped []skip
	}{
		{tree, []string{"4.gif", "a/1.JPG", "a/x/3.jpeg", "b/2.png", "c.gif"}, []skip{
			{filepath.Join(tree, ".git"), true},
			{filepath.Join(tree, "a", ".5.png"), false},
			{filepath.Join(tree, "a", ".cache"), true},
			{filepath.Join(tree, "a", "README.txt"), false},
			{filepath.Join(tree, "linked"), false}, // a link to a folder: a file, not an image
		}},
		{hidden, []string{"cat/1.png"}, nil}, // the folder given may be hidden
		{link, nil, nil},                     // a link, not entered
		{link + string(filepath.Separator), []string{"4.gif", "a/1.JPG", "a/x/3.jpeg", "b/2.png", "c.gif"}, nil},
	} {
		var skipped []skip
		got, err := WalkImages(tc.dir, func(p string, folder bool) { skipped = append(skipped, skip{p, folder}) })
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: images %q, want %q", tc.dir, got, tc.want)
		}
		if tc.skipped != nil && !slices.Equal(skipped, tc.skipped) {
			t.Errorf("%s: skipped %v, want %v", tc.dir, skipped, tc.skipped)
		}
	}
	if _, err := WalkImages(filepath.Join(dir, "absent"), nil); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an absent folder: %v", err)
	}
}
