package data

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/subtta/subtta/internal/fixture"
)

func TestReadLabelsAssets(t *testing.T) {
	dir := filepath.Dir(fixture.Path(t, "assets/labels/cifar10_classes.txt"))
	for _, tc := range []struct {
		set       string
		classes   int
		templates int
		class     int // a class index whose name is checked
		name      string
	}{
		// Counts and names are those of the published label sets.
		{"cifar10", 10, 18, 0, "airplane"},
		{"cifar100", 100, 18, 1, "aquarium fish"},
		{"cifar100_underscore", 100, 18, 1, "aquarium_fish"},
		{"imagenet", 1000, 80, 0, "tench"},
	} {
		l, err := ReadLabels(dir, tc.set)
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Classes) != tc.classes || len(l.Templates) != tc.templates {
			t.Errorf("%s: %d classes and %d templates, want %d and %d", tc.set, len(l.Classes), len(l.Templates), tc.classes, tc.templates)
		}
		if l.Classes[tc.class] != tc.name {
			t.Errorf("%s: class %d is %q, want %q", tc.set, tc.class, l.Classes[tc.class], tc.name)
		}
		p := l.Prompts("")
		if want := "a photo of a " + tc.name + "."; p[tc.class] != want {
			t.Errorf("%s: default prompt %q, want %q", tc.set, p[tc.class], want)
		}
	}
	// The CIFAR template files start with SubTTA's default template.
	l, err := ReadLabels(dir, "cifar10")
	if err != nil {
		t.Fatal(err)
	}
	if l.Templates[0] != DefaultTemplate {
		t.Errorf("first CIFAR-10 template %q, want %q", l.Templates[0], DefaultTemplate)
	}
}

func TestReadLabelsErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mustErr(t, func() error { _, err := ReadLabels(dir, "cifar10"); return err }(), "cifar10_classes.txt")
	mustErr(t, func() error { _, err := ReadLabels(dir, "mnist"); return err }(), `"mnist"`, "cifar100_underscore")

	// No template file: the default template. CRLF and trailing blank
	// lines are accepted.
	write("cifar10_classes.txt", "cat\r\ndog\r\n\r\n\n")
	l, err := ReadLabels(dir, "cifar10")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(l.Classes, []string{"cat", "dog"}) || !slices.Equal(l.Templates, []string{DefaultTemplate}) {
		t.Errorf("got %q %q", l.Classes, l.Templates)
	}
	if got := l.Prompts("itap of a {}."); !slices.Equal(got, []string{"itap of a cat.", "itap of a dog."}) {
		t.Errorf("prompts %q", got)
	}

	write("cifar10_templates.txt", "a photo of a {}.\na photo\n")
	mustErr(t, func() error { _, err := ReadLabels(dir, "cifar10"); return err }(), "cifar10_templates.txt", `"a photo"`)

	write("cifar10_classes.txt", "cat\n\ndog\n")
	mustErr(t, func() error { _, err := ReadLabels(dir, "cifar10"); return err }(), "cifar10_classes.txt", "line 2 is blank")

	write("cifar10_classes.txt", "\n\n")
	mustErr(t, func() error { _, err := ReadLabels(dir, "cifar10"); return err }(), "cifar10_classes.txt", "no entries")
}
