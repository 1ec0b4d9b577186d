package data

import (
	"errors"
	"fmt"
	"strings"
)

// CIFAR10Classes are CIFAR-10's class names in label order (the dataset's
// batches.meta.txt).
var CIFAR10Classes = []string{"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"}

// CIFAR10Templates are the 18 prompt templates OpenAI used for CIFAR-10
// zero-shot classification ("{}" stands for the class name).
var CIFAR10Templates = []string{
	"a photo of a {}.",
	"a blurry photo of a {}.",
	"a black and white photo of a {}.",
	"a low contrast photo of a {}.",
	"a high contrast photo of a {}.",
	"a bad photo of a {}.",
	"a good photo of a {}.",
	"a photo of a small {}.",
	"a photo of a big {}.",
	"a photo of the {}.",
	"a blurry photo of the {}.",
	"a black and white photo of the {}.",
	"a low contrast photo of the {}.",
	"a high contrast photo of the {}.",
	"a bad photo of the {}.",
	"a good photo of the {}.",
	"a photo of the small {}.",
	"a photo of the big {}.",
}

// ErrCIFARClassFolders is wrapped by CheckCIFARClassFolders's error.
var ErrCIFARClassFolders = errors.New("the class folders are not the dataset's classes")

// CheckCIFARClassFolders checks the sorted class folder names of a clean
// image folder read as set ("cifar10" or "cifar100") without a class list:
// their sorted order is then taken as the label order, which is the
// dataset's only when the folders are its classes, all of them (10 or 100;
// for CIFAR-10, its names, whose sorted order is its label order). The
// error wraps ErrCIFARClassFolders and names the first difference.
func CheckCIFARClassFolders(set string, folders []string) error {
	n := map[string]int{"cifar10": 10, "cifar100": 100}[set]
	if n == 0 {
		return fmt.Errorf("data: CheckCIFARClassFolders: unknown set %q", set)
	}
	if len(folders) != n {
		shown := folders
		if len(shown) > 5 {
			shown = shown[:5]
		}
		more := ""
		if len(folders) > len(shown) {
			more = ", …"
		}
		return fmt.Errorf("%w: %d class folders (%s%s), %s has %d", ErrCIFARClassFolders, len(folders), strings.Join(shown, ", "), more, set, n)
	}
	if set == "cifar10" {
		for i, c := range folders {
			if c != CIFAR10Classes[i] {
				return fmt.Errorf("%w: class folder %q is not CIFAR-10's class %q (the folders, sorted, are taken as CIFAR-10's classes in order)", ErrCIFARClassFolders, c, CIFAR10Classes[i])
			}
		}
		return nil
	}
	// CIFAR-100's names are not known here. Folders named by the labels'
	// numbers are, and sorted as names they leave the numbers' order ("10"
	// before "2"): every class would get another's label.
	width := 0
	for _, c := range folders {
		if !isDecimal(c) {
			return nil
		}
		width = max(width, len(c))
	}
	pad := func(c string) string { return strings.Repeat("0", width-len(c)) + c }
	for i := 1; i < len(folders); i++ {
		if numericLess(folders[i], folders[i-1]) {
			return fmt.Errorf("%w: the class folders are numbers, and sorted as names (the label order) %q comes before %q; pad them to one width (%q, %q) or name them by class",
				ErrCIFARClassFolders, folders[i-1], folders[i], pad(folders[i]), pad(folders[i-1]))
		}
	}
	return nil
}

// numericLess reports whether the decimal a is less than the decimal b
// (digits alone, of any length).
func numericLess(a, b string) bool {
	a, b = strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// isDecimal reports whether s is digits alone.
func isDecimal(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
