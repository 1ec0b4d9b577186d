package data

import (
	"image"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeVariant writes one 8×8 PNG per class folder named by wnid.
func writeVariant(t *testing.T, wnids []string) string {
	t.Helper()
	root := t.TempDir()
	for i, w := range wnids {
		dir := filepath.Join(root, w)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		img := image.NewGray(image.Rect(0, 0, 8, 8))
		img.Pix[0] = uint8(i)
		f, err := os.Create(filepath.Join(dir, "a.png"))
		if err != nil {
			t.Fatal(err)
		}
		if err := png.Encode(f, img); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	return root
}

func variantWNIDs(keep []int) []string {
	out := make([]string, len(keep))
	for i, k := range keep {
		out[i] = ImageNetWNIDs[k]
	}
	return out
}

// TestImageNetVariants reads generated ImageNet-R and ImageNet-A trees:
// 200 classes each, labelled in ImageNet order, named after ImageNet's
// classes; a missing class folder, an unknown wnid and an ImageNet class
// outside the variant are errors naming the folder.
func TestImageNetVariants(t *testing.T) {
	if len(ImageNetWNIDs) != 1000 || !slices.IsSorted(ImageNetWNIDs) {
		t.Fatalf("%d wnids, sorted %v", len(ImageNetWNIDs), slices.IsSorted(ImageNetWNIDs))
	}
	names := make([]string, 1000)
	for i := range names {
		names[i] = "class " + ImageNetWNIDs[i]
	}
	for _, tc := range []struct {
		name  string
		keep  []int
		first string // wnid of class 0
	}{
		{"imagenet-r", ImageNetRClasses, "n01443537"},
		{"imagenet-a", ImageNetAClasses, "n01498041"},
	} {
		if len(tc.keep) != 200 || !slices.IsSorted(tc.keep) {
			t.Fatalf("%s: %d classes", tc.name, len(tc.keep))
		}
		wnids := variantWNIDs(tc.keep)
		if wnids[0] != tc.first {
			t.Errorf("%s: first class %s, want %s", tc.name, wnids[0], tc.first)
		}
		root := writeVariant(t, wnids)
		ds, err := OpenImageNetVariant(root, tc.name, names)
		if err != nil {
			t.Fatal(err)
		}
		if ds.Len() != 200 || len(ds.Classes()) != 200 || ds.Classes()[7] != "class "+wnids[7] {
			t.Fatalf("%s: %d images, %d classes", tc.name, ds.Len(), len(ds.Classes()))
		}
		for i := range ds.Len() {
			img, l, err := ds.Item(i)
			if err != nil {
				t.Fatal(err)
			}
			if l != i || img.Pix[0] != uint8(i) { // one image per folder, in wnid order
				t.Errorf("%s: image %d has label %d, pixel %d", tc.name, i, l, img.Pix[0])
			}
		}
		ds.Close()

		// A class folder missing.
		os.RemoveAll(filepath.Join(root, wnids[3]))
		if _, err := OpenImageNetVariant(root, tc.name, names); err == nil || !strings.Contains(err.Error(), wnids[3]) || !strings.Contains(err.Error(), "missing") {
			t.Errorf("%s: missing folder: err = %v", tc.name, err)
		}
		// An unknown wnid.
		bad := writeVariant(t, append(slices.Clone(wnids), "n99999999"))
		if _, err := OpenImageNetVariant(bad, tc.name, names); err == nil || !strings.Contains(err.Error(), "n99999999") {
			t.Errorf("%s: unknown wnid: err = %v", tc.name, err)
		}
		// A class of ImageNet that is not one of the variant's.
		other := writeVariant(t, append(slices.Clone(wnids), ImageNetWNIDs[0]))
		if _, err := OpenImageNetVariant(other, tc.name, names); err == nil || !strings.Contains(err.Error(), ImageNetWNIDs[0]) {
			t.Errorf("%s: class outside: err = %v", tc.name, err)
		}
	}
	// R and A are different subsets.
	if slices.Equal(ImageNetRClasses, ImageNetAClasses) {
		t.Error("R and A have the same classes")
	}
	if _, err := ImageNetVariantClasses("imagenet-z"); err == nil {
		t.Error("imagenet-z accepted")
	}
}
