package data

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/gif"
	"os"
	"path"
	"path/filepath"
	"slices"
	"testing"
)

// folderMembers is a tiny image-folder tree: classes "cat", "ant" and
// "bee" (sorted: ant, bee, cat), a nested folder, a hidden file, a
// non-image and an image outside any class. Image sizes tell them apart.
func folderMembers(t *testing.T, prefix string) []member {
	return []member{
		{prefix + "README.md", []byte("# tiny")},
		{prefix + "loose.png", pngOf(t, 9, 9, 0, 0, 0)},
		{prefix + "cat/2.png", pngOf(t, 2, 1, 10, 20, 30)},
		{prefix + "cat/10.png", pngOf(t, 3, 1, 10, 20, 30)},
		{prefix + "ant/b.JPEG", pngOf(t, 4, 1, 40, 50, 60)}, // content decides the format
		{prefix + "ant/a.png", pngOf(t, 5, 1, 40, 50, 60)},
		{prefix + "ant/sub/0.png", pngOf(t, 6, 1, 40, 50, 60)},
		{prefix + "ant/._a.png", []byte("AppleDouble junk")},
		{prefix + "ant/notes.txt", []byte("not an image")},
		{prefix + "bee/x.gif", gifOf(t)},
	}
}

// Expected order: class folder, then folder path, then file name (as
// torchvision's ImageFolder); widths identify the images.
var (
	folderFiles  = []string{"ant/a.png", "ant/b.JPEG", "ant/sub/0.png", "bee/x.gif", "cat/10.png", "cat/2.png"}
	folderWidths = []int{5, 4, 6, 7, 3, 2}
	folderLabels = []int{0, 0, 0, 1, 2, 2}
)

func gifOf(t *testing.T) []byte {
	t.Helper()
	img := image.NewPaletted(image.Rect(0, 0, 7, 1), color.Palette{color.Black, color.White})
	var buf bytes.Buffer
	if err := gif.Encode(&buf, img, nil); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func checkFolder(t *testing.T, ds *Folder, files []string, widths, labels []int, classes []string) {
	t.Helper()
	if ds.Len() != len(files) || !slices.Equal(ds.Classes(), classes) {
		t.Fatalf("%s: %d images, classes %q; want %d, %q", ds.Name(), ds.Len(), ds.Classes(), len(files), classes)
	}
	for i := range files {
		if ds.File(i) != files[i] || ds.Label(i) != labels[i] {
			t.Errorf("%s: image %d is %s label %d, want %s label %d", ds.Name(), i, ds.File(i), ds.Label(i), files[i], labels[i])
		}
	}
	imgs, got, err := ReadBatch(ds, []int{0, 1, 2, 3, 4, 5}[:len(files)], 2)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range imgs {
		if m.W != widths[i] || got[i] != labels[i] {
			t.Errorf("%s: image %d is %d wide with label %d, want %d and %d", ds.Name(), i, m.W, got[i], widths[i], labels[i])
		}
	}
	// Pixel (0, 0) of the PNGs encodes their size.
	for i, m := range imgs {
		if filepath.Ext(files[i]) != ".gif" && !slices.Equal(m.Pix[:3], []uint8{uint8(m.W), 1, 7}) {
			t.Errorf("%s: image %d pixel (0, 0) = %v, want [%d 1 7]", ds.Name(), i, m.Pix[:3], m.W)
		}
	}
}

func TestFolderSources(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, filepath.Join(dir, "tree"), folderMembers(t, ""))
	writeTree(t, filepath.Join(dir, "deep"), folderMembers(t, "test/"))
	writeTar(t, filepath.Join(dir, "tree.tar"), false, folderMembers(t, "test/"))
	writeTar(t, filepath.Join(dir, "tree.tar.gz"), true, folderMembers(t, "./test/"))
	writeTar(t, filepath.Join(dir, "flat.tar.gz"), true, folderMembers(t, ""))
	// A tree whose class folders are links.
	os.MkdirAll(filepath.Join(dir, "linked"), 0o755)
	for _, c := range []string{"ant", "bee", "cat"} {
		if err := os.Symlink(filepath.Join(dir, "tree", c), filepath.Join(dir, "linked", c)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ path, root string }{
		{"tree", ""},
		{"linked", ""},
		{"deep", "test"},
		{"tree.tar", ""},
		{"tree.tar", "test"},
		{"tree.tar.gz", ""},
		{"tree.tar.gz", "/test/"},
		{"flat.tar.gz", ""},
	} {
		ds, err := OpenFolder(filepath.Join(dir, tc.path), FolderOptions{Root: tc.root})
		if err != nil {
			t.Fatalf("%s root %q: %v", tc.path, tc.root, err)
		}
		checkFolder(t, ds, folderFiles, folderWidths, folderLabels, []string{"ant", "bee", "cat"})
		if err := ds.Close(); err != nil {
			t.Error(err)
		}
	}
}

// TestFolderRootAsArchive: a directory is read by the rule an archive is
// (ImageRoot), so that a directory equals the archive it was made from:
// the same root, images, order, labels and classes, whether the class
// folders are the directory's own (it is its root, as before), wrapped in
// folders, or the images all in one class. A directory with images but
// no class folders is refused, naming its root.
func TestFolderRootAsArchive(t *testing.T) {
	dir := t.TempDir()
	one := []member{{"only/cat/a.png", pngOf(t, 2, 1, 1, 2, 3)}, {"only/cat/b.png", pngOf(t, 3, 1, 1, 2, 3)}, {"only/notes.txt", []byte("x")}}
	for _, tc := range []struct {
		name    string
		members []member
		root    string // the root inferred, relative to the tree
		files   []string
		classes []string
	}{
		{"class folders", folderMembers(t, ""), "", folderFiles, []string{"ant", "bee", "cat"}},
		{"wrapped", folderMembers(t, "test/"), "test", folderFiles, []string{"ant", "bee", "cat"}},
		{"wrapped twice", append(folderMembers(t, "a/test/"), member{".hidden/x.png", pngOf(t, 1, 1, 1, 2, 3)}), "a/test", folderFiles, []string{"ant", "bee", "cat"}},
		{"one class", one, "only", []string{"cat/a.png", "cat/b.png"}, []string{"cat"}},
	} {
		tree := filepath.Join(dir, tc.name)
		writeTree(t, tree, tc.members)
		writeTar(t, tree+".tar.gz", true, tc.members)
		for _, p := range []string{tree, tree + ".tar.gz"} {
			ds, err := OpenFolder(p, FolderOptions{})
			if err != nil {
				t.Errorf("%s: %v", p, err)
				continue
			}
			var files []string
			for i := range ds.Len() {
				files = append(files, ds.File(i))
			}
			if !slices.Equal(files, tc.files) || !slices.Equal(ds.Classes(), tc.classes) {
				t.Errorf("%s: images %q, classes %q; want %q, %q", p, files, ds.Classes(), tc.files, tc.classes)
			}
			want := filepath.Join(tree, filepath.FromSlash(tc.root), filepath.FromSlash(tc.files[0]))
			if p != tree {
				want = p + ":" + path.Join(tc.root, tc.files[0])
			}
			if got := ds.Path(0); got != want {
				t.Errorf("%s: image 0 is read from %s, want %s", p, got, want)
			}
			ds.Close()
		}
	}
	for _, tc := range []struct {
		name    string
		members []member
		want    []string
	}{
		{"flat", []member{{"a.png", pngOf(t, 2, 1, 1, 2, 3)}, {"b.png", pngOf(t, 2, 1, 1, 2, 3)}}, []string{"no class folders under the root", "flat: its images lie directly in it"}},
		{"no images", []member{{"cat/a.txt", []byte("x")}, {"b.txt", []byte("x")}}, []string{`class folder "cat" holds no images`}},
	} {
		tree := filepath.Join(dir, tc.name)
		writeTree(t, tree, tc.members)
		_, err := OpenFolder(tree, FolderOptions{})
		mustErr(t, err, append(tc.want, tree)...)
	}
	// A root given is taken as it is.
	_, err := OpenFolder(filepath.Join(dir, "wrapped"), FolderOptions{Root: ".", Classes: []string{"ant", "bee", "cat"}})
	mustErr(t, err, `class folder "test" is not one of the 3 classes`)
}

func TestFolderClassMapping(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "tree.tar.gz")
	writeTar(t, p, true, folderMembers(t, "test/"))

	// Folders matched to a known class list by name (loosely: case, '_').
	known := []string{"Cat", "dog", "bee", "ant"}
	ds, err := OpenFolder(p, FolderOptions{Classes: known})
	if err != nil {
		t.Fatal(err)
	}
	checkFolder(t, ds, folderFiles, folderWidths, []int{3, 3, 3, 2, 0, 0}, known)

	// Folder names given per class, as ImageNet wnids.
	ds, err = OpenFolder(p, FolderOptions{Classes: []string{"A", "B", "C", "D"}, FolderNames: []string{"x", "cat", "bee", "ant"}})
	if err != nil {
		t.Fatal(err)
	}
	checkFolder(t, ds, folderFiles, folderWidths, []int{3, 3, 3, 2, 1, 1}, []string{"A", "B", "C", "D"})

	// A subset, in the list's order.
	files := []string{"cat/2.png", "ant/sub/0.png"}
	ds, err = OpenFolder(p, FolderOptions{Files: files})
	if err != nil {
		t.Fatal(err)
	}
	checkFolder(t, ds, files, []int{2, 6}, []int{2, 0}, []string{"ant", "bee", "cat"})

	_, err = OpenFolder(p, FolderOptions{Classes: []string{"ant", "bee"}})
	mustErr(t, err, "tree.tar.gz", `class folder "cat"`)
	_, err = OpenFolder(p, FolderOptions{FolderNames: []string{"ant", "bee"}})
	mustErr(t, err, "tree.tar.gz", `"cat"`)
	_, err = OpenFolder(p, FolderOptions{FolderNames: []string{"ant", "bee", "ant"}})
	mustErr(t, err, `"ant" is given twice`)
	_, err = OpenFolder(p, FolderOptions{Files: []string{"cat/3.png"}})
	mustErr(t, err, "tree.tar.gz", "cat/3.png")
	_, err = OpenFolder(p, FolderOptions{Root: "train"})
	mustErr(t, err, "tree.tar.gz", `"train"`)
}

func TestFolderErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := OpenFolder(filepath.Join(dir, "absent"), FolderOptions{})
	mustErr(t, err, "absent")

	// An empty class folder; an empty archive; a file that is no archive.
	os.MkdirAll(filepath.Join(dir, "empty", "cat"), 0o755)
	_, err = OpenFolder(filepath.Join(dir, "empty"), FolderOptions{})
	mustErr(t, err, `"cat"`, "no images")
	writeTar(t, filepath.Join(dir, "none.tar"), false, []member{{"a/readme.txt", []byte("x")}})
	_, err = OpenFolder(filepath.Join(dir, "none.tar"), FolderOptions{})
	mustErr(t, err, "none.tar", "no images")
	os.WriteFile(filepath.Join(dir, "junk.tar"), []byte("this is not a tar archive, it is just text of some length"), 0o644)
	_, err = OpenFolder(filepath.Join(dir, "junk.tar"), FolderOptions{})
	mustErr(t, err, "junk.tar")

	// An unreadable image: an error naming it, from every source.
	ms := []member{{"cat/ok.png", pngOf(t, 2, 2, 1, 2, 3)}, {"cat/bad.jpg", []byte("\xff\xd8\xff\xe0 truncated jpeg")}, {"dog/bad.png", pngOf(t, 2, 2, 1, 2, 3)[:40]}}
	writeTree(t, filepath.Join(dir, "bad"), ms)
	writeTar(t, filepath.Join(dir, "bad.tar"), false, ms)
	writeTar(t, filepath.Join(dir, "bad.tar.gz"), true, ms)
	for _, p := range []string{"bad", "bad.tar", "bad.tar.gz"} {
		ds, err := OpenFolder(filepath.Join(dir, p), FolderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range []string{"cat/bad.jpg", "", "dog/bad.png"} {
			_, _, err := ds.Item(i)
			if want == "" {
				if err != nil {
					t.Errorf("%s: image %d: %v", p, i, err)
				}
				continue
			}
			mustErr(t, err, p, want)
		}
		_, _, err = ds.Item(-1)
		mustErr(t, err, "index -1")
		ds.Close()
	}
}

// TestCIFAR10TestJPG reads the real CIFAR-10 test set as JPEGs in a
// .tar.gz. It decodes one image per class only, to stay fast.
func TestCIFAR10TestJPG(t *testing.T) {
	p := fixtureAsset(t, "assets/cifar10/test-jpg.tar.gz")
	classes, err := ReadLines(fixtureAsset(t, "assets/labels/cifar10_classes.txt"))
	if err != nil {
		t.Fatal(err)
	}
	ds, err := OpenFolder(p, FolderOptions{Classes: classes})
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	counts := ClassCounts(ds)
	t.Logf("%s: %d images, per class %v", p, ds.Len(), counts)
	if ds.Len() != 10000 || len(counts) != 10 {
		t.Fatalf("%d images in %d classes, want 10000 in 10", ds.Len(), len(counts))
	}
	for c, n := range counts {
		if n != 1000 {
			t.Errorf("class %d (%s): %d images, want 1000", c, classes[c], n)
		}
	}
	for c := range 10 {
		i := 1000 * c // sorted folder names are CIFAR-10's class order
		if want := fmt.Sprintf("%s/0000.jpg", classes[c]); ds.File(i) != want {
			t.Errorf("image %d is %s, want %s", i, ds.File(i), want)
		}
		m, l, err := ds.Item(i)
		if err != nil {
			t.Fatal(err)
		}
		if m.W != 32 || m.H != 32 || l != c {
			t.Errorf("image %d: %dx%d label %d, want 32x32 label %d", i, m.W, m.H, l, c)
		}
	}
}
