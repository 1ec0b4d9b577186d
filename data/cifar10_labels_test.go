package data

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestCheckCIFARClassFolders: a clean folder's class folders, taken in
// sorted order as the labels, must be all of the set's classes (and
// CIFAR-10's names); the error names the first difference.
func TestCheckCIFARClassFolders(t *testing.T) {
	hundred := make([]string, 100)
	for i := range hundred {
		hundred[i] = fmt.Sprintf("c%03d", i)
	}
	ten := append([]string{"aclass"}, CIFAR10Classes[1:]...)
	// Label numbers as names, sorted as the folder reader sorts them: 0-99
	// unpadded leaves the numbers' order ("10" before "2"), padded keeps it.
	numbers, padded := make([]string, 100), make([]string, 100)
	for i := range numbers {
		numbers[i], padded[i] = fmt.Sprint(i), fmt.Sprintf("%02d", i)
	}
	slices.Sort(numbers)
	for _, tc := range []struct {
		set     string
		folders []string
		want    string // "" for no error
	}{
		{"cifar10", CIFAR10Classes, ""},
		{"cifar10", []string{"bar", "foo"}, "2 class folders (bar, foo), cifar10 has 10"},
		{"cifar10", ten, `class folder "aclass" is not CIFAR-10's class "airplane"`},
		{"cifar100", hundred, ""},
		{"cifar100", padded, ""},
		{"cifar100", numbers, `the class folders are numbers, and sorted as names (the label order) "19" comes before "2"; pad them to one width ("02", "19")`},
		{"cifar100", CIFAR10Classes, "10 class folders (airplane, automobile, bird, cat, deer, …), cifar100 has 100"},
	} {
		err := CheckCIFARClassFolders(tc.set, tc.folders)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s %q: %v", tc.set, tc.folders, err)
		case tc.want != "" && (!errors.Is(err, ErrCIFARClassFolders) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s %q: %v, want %q", tc.set, tc.folders, err, tc.want)
		}
	}
}
