package tta

import (
	"fmt"
	"slices"
	"strings"
)

// ImageNetTemplates are the 80 prompt templates of CLIP's ImageNet
// zero-shot ensemble, as OpenAI published them (the CLIP repository,
// notebooks/Prompt_Engineering_for_ImageNet.ipynb and data/prompts.md;
// MIT licence, Copyright (c) 2021 OpenAI), in their order, "{}" standing
// for the class name.
var ImageNetTemplates = []string{
	"a bad photo of a {}.",
	"a photo of many {}.",
	"a sculpture of a {}.",
	"a photo of the hard to see {}.",
	"a low resolution photo of the {}.",
	"a rendering of a {}.",
	"graffiti of a {}.",
	"a bad photo of the {}.",
	"a cropped photo of the {}.",
	"a tattoo of a {}.",
	"the embroidered {}.",
	"a photo of a hard to see {}.",
	"a bright photo of a {}.",
	"a photo of a clean {}.",
	"a photo of a dirty {}.",
	"a dark photo of the {}.",
	"a drawing of a {}.",
	"a photo of my {}.",
	"the plastic {}.",
	"a photo of the cool {}.",
	"a close-up photo of a {}.",
	"a black and white photo of the {}.",
	"a painting of the {}.",
	"a painting of a {}.",
	"a pixelated photo of the {}.",
	"a sculpture of the {}.",
	"a bright photo of the {}.",
	"a cropped photo of a {}.",
	"a plastic {}.",
	"a photo of the dirty {}.",
	"a jpeg corrupted photo of a {}.",
	"a blurry photo of the {}.",
	"a photo of the {}.",
	"a good photo of the {}.",
	"a rendering of the {}.",
	"a {} in a video game.",
	"a photo of one {}.",
	"a doodle of a {}.",
	"a close-up photo of the {}.",
	"a photo of a {}.",
	"the origami {}.",
	"the {} in a video game.",
	"a sketch of a {}.",
	"a doodle of the {}.",
	"a origami {}.",
	"a low resolution photo of a {}.",
	"the toy {}.",
	"a rendition of the {}.",
	"a photo of the clean {}.",
	"a photo of a large {}.",
	"a rendition of a {}.",
	"a photo of a nice {}.",
	"a photo of a weird {}.",
	"a blurry photo of a {}.",
	"a cartoon {}.",
	"art of a {}.",
	"a sketch of the {}.",
	"a embroidered {}.",
	"a pixelated photo of a {}.",
	"itap of the {}.",
	"a jpeg corrupted photo of the {}.",
	"a good photo of a {}.",
	"a plushie {}.",
	"a photo of the nice {}.",
	"a photo of the small {}.",
	"a photo of the weird {}.",
	"the cartoon {}.",
	"art of the {}.",
	"a drawing of the {}.",
	"a photo of the large {}.",
	"a black and white photo of a {}.",
	"the plushie {}.",
	"a dark photo of a {}.",
	"itap of a {}.",
	"graffiti of the {}.",
	"a toy {}.",
	"itap of my {}.",
	"a photo of a cool {}.",
	"a photo of a small {}.",
	"a tattoo of the {}.",
}

// PromptTableTemplates are the eight single templates of the paper's
// prompt-design table, T0 to T7: T0 is SubTTA's "a photo of a {}.", T1 to
// T7 are MINT's seven (MINTTemplates).
var PromptTableTemplates = append([]string{"a photo of a {}."}, MINTTemplates...)

// TemplateSetNames are the names TemplateSet accepts, in the order help
// texts list them.
var TemplateSetNames = []string{"cifar-ensemble", "imagenet-ensemble", "mint", "watt", "t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"}

// TemplateSet returns a named set of prompt templates: "cifar-ensemble"
// (CLIP's 18 for CIFAR, CIFARTemplates), "imagenet-ensemble" (CLIP's 80,
// ImageNetTemplates), "mint" (MINTTemplates), "watt" (WATTTemplates), or
// "t0" … "t7", one template of the paper's prompt table each
// (PromptTableTemplates). The slice is the caller's.
func TemplateSet(name string) ([]string, error) {
	switch name {
	case "cifar-ensemble":
		return slices.Clone(CIFARTemplates), nil
	case "imagenet-ensemble":
		return slices.Clone(ImageNetTemplates), nil
	case "mint":
		return slices.Clone(MINTTemplates), nil
	case "watt":
		return slices.Clone(WATTTemplates), nil
	}
	if len(name) == 2 && name[0] == 't' && name[1] >= '0' && name[1] <= '7' {
		return []string{PromptTableTemplates[name[1]-'0']}, nil
	}
	return nil, fmt.Errorf("tta: unknown template set %q (want a template with \"{}\" or one of %s)", name, strings.Join(TemplateSetNames, ", "))
}

// SetTemplates replaces the preset's prompt templates (each with "{}"
// exactly once). A method that trains against one head per template
// (PerTemplateHeads) then has one per given template.
func (p *Preset) SetTemplates(templates []string) error {
	if len(templates) == 0 {
		return fmt.Errorf("tta: %s: no template", p.Method)
	}
	for _, t := range templates {
		if strings.Count(t, "{}") != 1 {
			return fmt.Errorf("tta: %s: template %q must contain \"{}\" exactly once", p.Method, t)
		}
	}
	p.Templates = slices.Clone(templates)
	return nil
}
