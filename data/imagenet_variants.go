package data

import (
	"fmt"
	"strings"
)

// ImageNetVariants names the ImageNet test sets without corruptions that
// OpenImageNetVariant reads: ImageNet-R (renditions, 200 classes),
// ImageNet-A (natural adversarial examples, 200 classes) and
// ImageNet-Sketch ("imagenet-k", the paper's ImageNet-K, 1000 classes).
var ImageNetVariants = []string{"imagenet-r", "imagenet-a", "imagenet-k"}

// ImageNetVariantClasses returns the classes of an ImageNet variant as
// indices into ImageNetWNIDs, ascending.
func ImageNetVariantClasses(name string) ([]int, error) {
	switch name {
	case "imagenet-r":
		return ImageNetRClasses, nil
	case "imagenet-a":
		return ImageNetAClasses, nil
	case "imagenet-k":
		all := make([]int, len(ImageNetWNIDs))
		for i := range all {
			all[i] = i
		}
		return all, nil
	}
	return nil, fmt.Errorf("data: unknown ImageNet variant %q (want one of %s)", name, strings.Join(ImageNetVariants, ", "))
}

// OpenImageNetVariant opens ImageNet-R, ImageNet-A or ImageNet-Sketch (see
// ImageNetVariants) in their published layout, path/<wnid>/<images> (a
// directory, .tar or .tar.gz, see OpenFolder). classes are the 1000
// ImageNet class names in class-index order (OpenAI's
// imagenet_classes_openai.txt), nil for the wnids. The dataset has the
// variant's classes only, in ImageNet order, labelled 0…199 for R and A
// (the head is restricted to them, as their authors evaluate) and 0…999
// for Sketch.
//
// Every class of the variant must have a folder, and every folder must be
// a class of the variant: a missing class folder, a wnid that is not an
// ImageNet class and a class of ImageNet outside the variant are errors
// that name the folder.
func OpenImageNetVariant(path, name string, classes []string) (Dataset, error) {
	keep, err := ImageNetVariantClasses(name)
	if err != nil {
		return nil, err
	}
	if classes != nil && len(classes) != len(ImageNetWNIDs) {
		return nil, fmt.Errorf("data: %s: %d class names, ImageNet has %d", name, len(classes), len(ImageNetWNIDs))
	}
	fd, err := OpenImageNetFolder(path, ImageNetOptions{Classes: classes, WNIDs: ImageNetWNIDs, Name: name})
	if err != nil {
		return nil, fmt.Errorf("data: %s: %w (the folders must be ImageNet wnids)", name, err)
	}
	inVariant := make([]bool, len(ImageNetWNIDs))
	for _, k := range keep {
		inVariant[k] = true
	}
	counts := ClassCounts(fd)
	var missing []string
	for c, n := range counts {
		switch {
		case n > 0 && !inVariant[c]:
			fd.Close()
			return nil, fmt.Errorf("data: %s: folder %s (%s) is an ImageNet class but not one of %s's %d", path, ImageNetWNIDs[c], fd.Classes()[c], name, len(keep))
		case n == 0 && inVariant[c]:
			missing = append(missing, ImageNetWNIDs[c])
		}
	}
	if len(missing) > 0 {
		fd.Close()
		more := ""
		if len(missing) > 5 {
			more = fmt.Sprintf(" and %d more", len(missing)-5)
		}
		return nil, fmt.Errorf("data: %s: %d of %s's %d class folders are missing: %s%s", path, len(missing), name, len(keep),
			strings.Join(missing[:min(5, len(missing))], ", "), more)
	}
	return ClassSubset(fd, keep), nil
}
