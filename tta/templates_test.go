package tta

import (
	"slices"
	"testing"

	"github.com/subtta/subtta/data"
	"github.com/subtta/subtta/internal/fixture"
)

// TestTemplateSets: the 80 ImageNet templates are those of the shared
// assets' imagenet_templates_openai80.txt, the 18 CIFAR ones those of
// cifar10_templates.txt; every name resolves and T0–T7 are the paper's.
func TestTemplateSets(t *testing.T) {
	for _, tc := range []struct {
		file string
		want []string
	}{
		{"assets/labels/imagenet_templates_openai80.txt", ImageNetTemplates},
		{"assets/labels/cifar10_templates.txt", CIFARTemplates},
	} {
		lines, err := data.ReadLines(fixture.Path(t, tc.file))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(lines, tc.want) {
			t.Errorf("%s differs from the built-in list", tc.file)
		}
	}
	if len(ImageNetTemplates) != 80 {
		t.Errorf("%d ImageNet templates", len(ImageNetTemplates))
	}
	for _, n := range TemplateSetNames {
		ts, err := TemplateSet(n)
		if err != nil || len(ts) == 0 {
			t.Errorf("%s: %v", n, err)
		}
	}
	t7, _ := TemplateSet("t7")
	if t0, _ := TemplateSet("t0"); t0[0] != "a photo of a {}." || t7[0] != "a photo of the small {}." {
		t.Errorf("t0 %q, t7 %q", t0, t7)
	}
	if _, err := TemplateSet("t8"); err == nil {
		t.Error("t8 accepted")
	}
	p, _ := Lookup("cifar10-c", "source")
	if err := p.SetTemplates([]string{"no placeholder"}); err == nil {
		t.Error("a template without {} accepted")
	}
}
