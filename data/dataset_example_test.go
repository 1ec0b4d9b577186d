package data_test

import (
	"bytes"
	"fmt"
	"image"
	"image/png"
	"log"
	"os"
	"path/filepath"

	"github.com/subtta/subtta/data"
)

// Open an image-folder tree (here written on the fly: two classes, three
// images) and read it in batches, the labels indexing a known class list.
func ExampleOpenFolder() {
	dir, err := os.MkdirTemp("", "folder-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	for _, name := range []string{"truck/0001.png", "airplane/0001.png", "airplane/0000.png"} {
		var buf bytes.Buffer
		png.Encode(&buf, image.NewGray(image.Rect(0, 0, 32, 32)))
		p := filepath.Join(dir, "test", filepath.FromSlash(name))
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, buf.Bytes(), 0o644)
	}

	classes := []string{"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"}
	ds, err := data.OpenFolder(dir, data.FolderOptions{Root: "test", Classes: classes})
	if err != nil {
		log.Fatal(err)
	}
	defer ds.Close()
	imgs, labels, err := data.ReadBatch(ds, []int{0, 1, 2}, 0)
	if err != nil {
		log.Fatal(err)
	}
	for i, m := range imgs {
		fmt.Printf("%s: %dx%d, label %d (%s)\n", ds.File(i), m.W, m.H, labels[i], classes[labels[i]])
	}
	fmt.Println(data.FormatPrompt(data.DefaultTemplate, classes[labels[2]]))
	// Output:
	// airplane/0000.png: 32x32, label 0 (airplane)
	// airplane/0001.png: 32x32, label 0 (airplane)
	// truck/0001.png: 32x32, label 9 (truck)
	// a photo of a truck.
}
