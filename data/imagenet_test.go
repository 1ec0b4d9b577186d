package data

import (
	"bytes"
	"fmt"
	"image"
	"image/jpeg"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

var testWNIDs = []string{"n01440764", "n01443537", "n01484850", "n01491361"}

func jpegOf(t *testing.T, w, h int) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, image.NewGray(image.Rect(0, 0, w, h)), nil); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// imagenetCTree writes dir/<corruption>/<sev>/<wnid>/ILSVRC2012_val_<k>.JPEG
// for the 4 test wnids (3 images each, image k of class c is 8+c wide).
func imagenetCTree(t *testing.T, dir string) {
	t.Helper()
	var ms []member
	for _, corr := range []string{"gaussian_noise", "fog"} {
		for sev := 1; sev <= 5; sev++ {
			for c, w := range testWNIDs {
				for k := range 3 {
					name := fmt.Sprintf("%s/%d/%s/ILSVRC2012_val_%08d.JPEG", corr, sev, w, 10*c+k)
					ms = append(ms, member{name, jpegOf(t, 8+c, 4+sev)})
				}
			}
		}
	}
	writeTree(t, dir, ms)
}

func TestImageNetC(t *testing.T) {
	dir := t.TempDir()
	imagenetCTree(t, dir)
	names := []string{"tench", "goldfish", "great white shark", "tiger shark"}

	ds, err := OpenImageNetC(dir, "fog", 3, ImageNetOptions{Classes: names})
	if err != nil {
		t.Fatal(err)
	}
	if ds.Len() != 12 || ds.Name() != "fog/3" || !slices.Equal(ds.Classes(), names) {
		t.Fatalf("%s: %d images, classes %q", ds.Name(), ds.Len(), ds.Classes())
	}
	if got := ClassCounts(ds); !slices.Equal(got, []int{3, 3, 3, 3}) {
		t.Errorf("class counts %v", got)
	}
	m, l, err := ds.Item(7)
	if err != nil {
		t.Fatal(err)
	}
	if ds.File(7) != "n01484850/ILSVRC2012_val_00000021.JPEG" || l != 2 || m.W != 10 || m.H != 7 {
		t.Errorf("image 7: %s %dx%d label %d", ds.File(7), m.W, m.H, l)
	}
	ds.Close()

	// The 5,000-image subset: a list in robustbench's format, kept in order.
	list := filepath.Join(dir, "imagenet_test_image_ids.txt")
	os.WriteFile(list, []byte("n01491361/ILSVRC2012_val_00000031.JPEG\nn01440764/ILSVRC2012_val_00000000.JPEG\nn01484850/ILSVRC2012_val_00000022.JPEG\n"), 0o644)
	ds, err = OpenImageNetC(dir, "gaussian_noise", 5, ImageNetOptions{Classes: names, SubsetList: list})
	if err != nil {
		t.Fatal(err)
	}
	imgs, labels, err := ReadBatch(ds, []int{0, 1, 2}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(labels, []int{3, 0, 2}) || imgs[0].W != 11 || imgs[1].W != 8 || imgs[2].H != 9 {
		t.Errorf("subset labels %v, sizes %dx%d %dx%d %dx%d", labels, imgs[0].W, imgs[0].H, imgs[1].W, imgs[1].H, imgs[2].W, imgs[2].H)
	}
	ds.Close()

	// Errors: unknown corruption, a known one that is absent, severity,
	// missing folder, a listed image that is absent, a bad list line.
	_, err = OpenImageNetC(dir, "gausian_noise", 5, ImageNetOptions{})
	mustErr(t, err, "unknown corruption", `"gausian_noise"`)
	_, err = OpenImageNetC(dir, "snow", 5, ImageNetOptions{})
	mustErr(t, err, `"snow"`, "fog, gaussian_noise")
	_, err = OpenImageNetC(dir, "fog", 6, ImageNetOptions{})
	mustErr(t, err, "severity 6")
	_, err = OpenImageNetC(filepath.Join(dir, "nope"), "fog", 1, ImageNetOptions{})
	mustErr(t, err, "nope")
	os.WriteFile(list, []byte("n01440764/ILSVRC2012_val_00000000.JPEG\nn01440764/ILSVRC2012_val_00000099.JPEG\n"), 0o644)
	_, err = OpenImageNetC(dir, "fog", 1, ImageNetOptions{SubsetList: list})
	mustErr(t, err, "listed image 2 of 2", "ILSVRC2012_val_00000099.JPEG")
	os.WriteFile(list, []byte("ILSVRC2012_val_00000000.JPEG\n"), 0o644)
	_, err = OpenImageNetC(dir, "fog", 1, ImageNetOptions{SubsetList: list})
	mustErr(t, err, list, "line 1", "<wnid>/<file>")
	// Fewer folders than classes, and no wnid list to place them.
	_, err = OpenImageNetC(dir, "fog", 1, ImageNetOptions{Classes: append(names, "hammerhead shark")})
	mustErr(t, err, "4 class folders for 5 classes", "wnid")
}

// An ImageNet-A/R-style tree holds some of the classes; a wnid list places
// them among all classes.
func TestImageNetFolderWNIDs(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "imagenet-r")
	writeTree(t, root, []member{
		{"n01491361/art_1.jpg", jpegOf(t, 3, 3)},
		{"n01443537/cartoon_7.jpg", jpegOf(t, 3, 3)},
		{"n01443537/cartoon_8.jpg", jpegOf(t, 3, 3)},
	})
	// LOC_synset_mapping.txt format: the wnid, then its WordNet names.
	wfile := filepath.Join(dir, "LOC_synset_mapping.txt")
	var b bytes.Buffer
	for i, w := range testWNIDs {
		fmt.Fprintf(&b, "%s name%d, other name\n", w, i)
	}
	os.WriteFile(wfile, b.Bytes(), 0o644)
	wnids, err := ReadWNIDs(wfile)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(wnids, testWNIDs) {
		t.Fatalf("ReadWNIDs = %q", wnids)
	}
	ds, err := OpenImageNetFolder(root, ImageNetOptions{WNIDs: wnids})
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	if ds.Len() != 3 || ds.Label(0) != 1 || ds.Label(1) != 1 || ds.Label(2) != 3 || !slices.Equal(ds.Classes(), wnids) {
		t.Errorf("%d images, labels %d %d %d, classes %q", ds.Len(), ds.Label(0), ds.Label(1), ds.Label(2), ds.Classes())
	}
	_, err = OpenImageNetFolder(root, ImageNetOptions{WNIDs: wnids[:3]})
	mustErr(t, err, `"n01491361"`)
	os.WriteFile(wfile, []byte("n01440764\nn01443537\nn01440764\n"), 0o644)
	_, err = ReadWNIDs(wfile)
	mustErr(t, err, "line 3", "n01440764")
}
