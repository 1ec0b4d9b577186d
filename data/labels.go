package data

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// DefaultTemplate is the single prompt template SubTTA uses: the class name
// replaces "{}".
const DefaultTemplate = "a photo of a {}."

// Labels are the class names and prompt templates of a dataset.
type Labels struct {
	Name      string   // the label set, e.g. "cifar10"
	Classes   []string // class names in label order
	Templates []string // prompt templates, each with one "{}"
}

// labelFiles maps a label set to its class and template files in the
// assets' labels/ folder.
var labelFiles = map[string]struct{ classes, templates string }{
	"cifar10":             {"cifar10_classes.txt", "cifar10_templates.txt"},
	"cifar100":            {"cifar100_classes.txt", "cifar100_templates.txt"},
	"cifar100_underscore": {"cifar100_classes_torchvision_underscore.txt", "cifar100_templates.txt"},
	"imagenet":            {"imagenet_classes_openai.txt", "imagenet_templates_openai80.txt"},
}

// LabelSets returns the names ReadLabels accepts.
func LabelSets() []string {
	return []string{"cifar10", "cifar100", "cifar100_underscore", "imagenet"}
}

// ReadLabels reads the class names and prompt templates of a label set
// from dir, a folder laid out as the shared assets' labels/:
//
//	cifar10              cifar10_classes.txt, cifar10_templates.txt
//	cifar100             cifar100_classes.txt (names with spaces), cifar100_templates.txt
//	cifar100_underscore  cifar100_classes_torchvision_underscore.txt, cifar100_templates.txt
//	imagenet             imagenet_classes_openai.txt (OpenAI's 1000 names, in wnid order),
//	                     imagenet_templates_openai80.txt
//
// The class file is required. Without a template file, Templates is
// []string{DefaultTemplate}.
func ReadLabels(dir, set string) (*Labels, error) {
	files, ok := labelFiles[set]
	if !ok {
		return nil, fmt.Errorf("data: unknown label set %q (want one of %s)", set, strings.Join(LabelSets(), ", "))
	}
	classes, err := ReadLines(filepath.Join(dir, files.classes))
	if err != nil {
		return nil, err
	}
	templates, err := ReadLines(filepath.Join(dir, files.templates))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		templates = []string{DefaultTemplate}
	case err != nil:
		return nil, err
	}
	for _, t := range templates {
		if strings.Count(t, "{}") != 1 {
			return nil, fmt.Errorf("data: %s: template %q must contain \"{}\" exactly once", filepath.Join(dir, files.templates), t)
		}
	}
	return &Labels{Name: set, Classes: classes, Templates: templates}, nil
}

// Prompts returns the prompt of every class for template (DefaultTemplate
// if template is empty).
func (l *Labels) Prompts(template string) []string {
	if template == "" {
		template = DefaultTemplate
	}
	out := make([]string, len(l.Classes))
	for i, c := range l.Classes {
		out[i] = FormatPrompt(template, c)
	}
	return out
}

// FormatPrompt replaces the first "{}" of template with class, as Python's
// template.format(class) does for these templates.
func FormatPrompt(template, class string) string {
	return strings.Replace(template, "{}", class, 1)
}

// ReadLines reads a list file: one entry per line, surrounding white space
// (and a CR of CRLF files) removed. Blank lines at the end are ignored; a
// blank line before the last entry is an error, since it would shift every
// later index.
func ReadLines(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	lines, err := parseLines(b)
	if err != nil {
		return nil, fmt.Errorf("data: %s: %w", path, err)
	}
	return lines, nil
}

func parseLines(b []byte) ([]string, error) {
	var lines []string
	blank := 0 // line number of the first blank line not yet followed by an entry
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" {
			if blank == 0 {
				blank = n
			}
			continue
		}
		if blank != 0 {
			return nil, fmt.Errorf("line %d is blank", blank)
		}
		lines = append(lines, s)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(lines) == 0 {
		return nil, errors.New("no entries")
	}
	return lines, nil
}
