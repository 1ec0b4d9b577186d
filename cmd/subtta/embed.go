package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/data"
)

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// Type names the flag's values in help as pflag names a repeatable
// string flag's.
func (s *stringList) Type() string { return "stringArray" }

// preprocessImages reads image files and preprocesses them with pre.
func preprocessImages(pre *data.Preprocessor, paths []string) ([]float32, error) {
	px := make([]float32, 0, len(paths)*pre.OutputLen())
	for _, p := range paths {
		img, err := data.ReadRGB(p)
		if err != nil {
			return nil, err
		}
		out, err := pre.Transform(nil, img)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		px = append(px, out...)
	}
	return px, nil
}

func runEmbed(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("embed", "", stderr)
	configFlags(fs, "embed", stdout)
	bulk := addBulkFlags(fs, true, "with --images or --texts: the folder for images.npy (float32, one row per image), images.jsonl (its path, label and content digest), texts.npy and texts.jsonl; an interrupted run resumes there")
	model := fs.String("model", "", modelFlagHelp)
	modelConfig := fs.String("model-config", "", modelConfigHelp)
	arch := fs.String("arch", "", archHelp)
	vocab := fs.String("vocab", "", "CLIP vocabulary (see subtta tokenize -h)")
	normalize := fs.Bool("normalize", false, "L2-normalise the features")
	var images, texts stringList
	fs.Var(&images, "image", "image file (repeatable)")
	fs.Var(&texts, "text", "text (repeatable)")
	precision := addPrecisionFlag(fs)
	device := deviceFlag(fs)
	release, err := parseOnDevice(fs, device, args, stderr)
	if err != nil {
		return err
	}
	defer release()
	if bulk.given() {
		if err := bulk.check("a folder"); err != nil {
			return err
		}
		if len(images)+len(texts) > 0 || fs.NArg() > 0 {
			return usagef("give --image/--text or --images/--texts, not both")
		}
	} else if len(images)+len(texts) == 0 || fs.NArg() > 0 {
		return usagef("give --image FILE and/or --text TEXT (repeatable), or --images and/or --texts with --out")
	}
	prec, err := precision.choose(*device.name)
	if err != nil {
		return err
	}
	b, err := openModel(*model, *modelConfig, *arch, *vocab, prec.Precision, stderr)
	if err != nil {
		return err
	}
	m := b.Model
	if bulk.given() {
		return bulkEmbed(bulk, b, *model, prec, *normalize, stdout, stderr)
	}
	type feature struct {
		Image    string    `json:"image,omitempty"`
		Text     string    `json:"text,omitempty"`
		Features []float64 `json:"features"`
	}
	var out []feature
	if len(images) > 0 {
		px, err := preprocessImages(b.Preprocessor, images)
		if err != nil {
			return err
		}
		f, err := m.EncodeImage(px, len(images))
		if err != nil {
			return err
		}
		for i, row := range rows(f.Value().Data().F64(), len(images), *normalize) {
			out = append(out, feature{Image: images[i], Features: row})
		}
	}
	if len(texts) > 0 {
		tok, err := b.Tokenizer()
		if err != nil {
			return err
		}
		ids := make([][]int, len(texts))
		for i, t := range texts {
			if ids[i], err = tok.Tokenize(t, m.Config.Text.ContextLength, true); err != nil {
				return err
			}
		}
		f, err := m.EncodeText(ids)
		if err != nil {
			return err
		}
		for i, row := range rows(f.Value().Data().F64(), len(texts), *normalize) {
			out = append(out, feature{Text: texts[i], Features: row})
		}
	}
	return writeJSON(stdout, out)
}

// rows splits a row-major matrix, optionally L2-normalising each row.
func rows(v []float64, n int, normalize bool) [][]float64 {
	w := len(v) / n
	out := make([][]float64, n)
	for i := range out {
		r := append([]float64(nil), v[i*w:(i+1)*w]...)
		if normalize {
			var s float64
			for _, x := range r {
				s += x * x
			}
			if s > 0 {
				s = 1 / math.Sqrt(s)
				for j := range r {
					r[j] *= s
				}
			}
		}
		out[i] = r
	}
	return out
}

func runClassify(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("classify", "IMAGE...", stderr)
	configFlags(fs, "classify", stdout)
	bulk := addBulkFlags(fs, false, "with --images: the .csv (path, label, prediction, probability, a column per class) or .jsonl file to write")
	model := fs.String("model", "", modelFlagHelp)
	modelConfig := fs.String("model-config", "", modelConfigHelp)
	arch := fs.String("arch", "", archHelp)
	vocab := fs.String("vocab", "", "CLIP vocabulary (see subtta tokenize -h)")
	labels := fs.String("labels", "", `comma-separated labels, e.g. "a diagram,a dog,a cat" (default: those the model records, as train's models do; with the built-in model CIFAR-10's classes)`)
	template := fs.String("template", "", `prompt template; {} is replaced by each label (e.g. "a photo of a {}."; default "{}", or with the built-in model the 18 CIFAR-10 templates, averaged)`)
	jsonOut := fs.Bool("json", false, "print JSON instead of a table")
	precision := addPrecisionFlag(fs)
	device := deviceFlag(fs)
	release, err := parseOnDevice(fs, device, args, stderr)
	if err != nil {
		return err
	}
	defer release()
	if bulk.given() {
		if err := bulk.check("a .csv or .jsonl file"); err != nil {
			return err
		}
		if fs.NArg() > 0 {
			return usagef("give images as arguments or --images, not both")
		}
	} else if fs.NArg() == 0 {
		return usagef("give at least one image")
	}
	prec, err := precision.choose(*device.name)
	if err != nil {
		return err
	}
	var classes []string
	for _, l := range strings.Split(*labels, ",") {
		if l = strings.TrimSpace(l); l != "" {
			if slices.Contains(classes, l) {
				return usagef("--labels: %q is given twice", l)
			}
			classes = append(classes, l)
		}
	}
	labelsGiven := false
	fs.Visit(func(f *flag.Flag) { labelsGiven = labelsGiven || f.Name == "labels" })
	if labelsGiven && len(classes) == 0 {
		return usagef("--labels %q: no label (leave the flag out for the model's own classes)", *labels)
	}
	b, err := openModel(*model, *modelConfig, *arch, *vocab, prec.Precision, stderr)
	if err != nil {
		return err
	}
	m := b.Model
	classes, templates, err := defaultLabels(m, *model, classes, []string{*template})
	if err != nil {
		return err
	}
	tok, err := b.Tokenizer()
	if err != nil {
		return err
	}
	var prompts []string
	for _, tmpl := range templates {
		for _, c := range classes {
			prompts = append(prompts, strings.ReplaceAll(tmpl, "{}", c))
		}
	}
	warnCut(stderr, tok, prompts, m.Config.Text.ContextLength)
	head, err := m.ZeroShotHead(tok, classes, templates)
	if err != nil {
		return err
	}
	if bulk.given() {
		return bulkClassify(bulk, b, head, classes, stderr)
	}
	px, err := preprocessImages(b.Preprocessor, fs.Args())
	if err != nil {
		return err
	}
	f, err := m.EncodeImage(px, fs.NArg())
	if err != nil {
		return err
	}
	probs := clip.Softmax(m.Classify(head, f))
	if *jsonOut {
		// Labels in the order given, as a list.
		type labelProb struct {
			Label string  `json:"label"`
			Prob  float64 `json:"prob"`
		}
		type result struct {
			Image string      `json:"image"`
			Probs []labelProb `json:"probs"`
		}
		var out []result
		for i, p := range probs {
			r := result{Image: fs.Arg(i)}
			for j, c := range classes {
				r.Probs = append(r.Probs, labelProb{c, p[j]})
			}
			out = append(out, r)
		}
		return writeJSON(stdout, out)
	}
	for i, p := range probs {
		fmt.Fprintln(stdout, fs.Arg(i))
		order := make([]int, len(p))
		for j := range order {
			order[j] = j
		}
		sort.SliceStable(order, func(a, b int) bool { return p[order[a]] > p[order[b]] })
		for _, j := range order {
			fmt.Fprintf(stdout, "  %-30s %.4f\n", classes[j], p[j])
		}
	}
	return nil
}

// defaultLabels returns the class names and templates to classify with
// (clip.Model.ChooseLabels): those given (classes, and templates unless
// the one given is ""), else those the model records (train's export),
// else for the built-in model CIFAR-10's; no class names is then a usage
// error, and no template "{}".
func defaultLabels(m *clip.Model, model string, classes, templates []string) ([]string, []string, error) {
	if len(templates) == 1 && templates[0] == "" {
		templates = nil
	}
	fallback := clip.Labels{Templates: []string{"{}"}}
	if isBuiltin(model) {
		fallback = clip.Labels{Classes: data.CIFAR10Classes, Templates: data.CIFAR10Templates}
	}
	l := m.ChooseLabels(clip.Labels{Classes: classes, Templates: templates}, fallback)
	if len(l.Classes) == 0 {
		return nil, nil, usagef("give --labels (the model records no class names; the built-in model and train's models have their own)")
	}
	return l.Classes, l.Templates, nil
}
