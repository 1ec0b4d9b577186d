package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"

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

// embedOptions are the flags of embed.
type embedOptions struct {
	model         modelOptions
	normalize     bool
	images, texts stringList
	bulk          *bulkFlags
	precision     precisionFlag
	device        deviceOptions

	stdout, stderr io.Writer
}

// newEmbedCmd is `subtta embed`.
func newEmbedCmd(stdout, stderr io.Writer) *cobra.Command {
	const summary = "image and text features of a model (JSON)"
	o := &embedOptions{stdout: stdout, stderr: stderr}
	c := &cobra.Command{
		Use:   "embed",
		Short: summary,
		Long:  summary,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !o.bulk.given() {
				if err := o.bulk.checkUnused(cmd.Flags()); err != nil {
					return err
				}
			}
			return o.run(args)
		},
	}
	f := c.Flags()
	configFlags(f, stdout)
	o.bulk = addBulkFlags(f, true, "with --images or --texts: the folder for images.npy (float32, one row per image), images.jsonl (its path, label and content digest), texts.npy and texts.jsonl; an interrupted run resumes there")
	addModelFlags(f, &o.model, "", true)
	f.BoolVar(&o.normalize, "normalize", false, "L2-normalise the features")
	f.Var(&o.images, "image", "image file (repeatable)")
	f.Var(&o.texts, "text", "text (repeatable)")
	o.precision = addPrecisionFlag(f)
	addDeviceFlags(f, &o.device)
	return c
}

// run runs the command with the positional arguments args.
func (o *embedOptions) run(args []string) error {
	prec, g, err := o.precision.choose(o.device.name)
	if err != nil {
		return err
	}
	release, err := o.device.use(g, o.stderr)
	if err != nil {
		return err
	}
	defer release()
	if o.bulk.given() {
		if err := o.bulk.check("a folder"); err != nil {
			return err
		}
		if len(o.images)+len(o.texts) > 0 || len(args) > 0 {
			return usagef("give --image/--text or --images/--texts, not both")
		}
	} else if len(o.images)+len(o.texts) == 0 || len(args) > 0 {
		return usagef("give --image FILE and/or --text TEXT (repeatable), or --images and/or --texts with --out")
	}
	b, err := o.model.open(prec.Precision, o.stderr)
	if err != nil {
		return err
	}
	m := b.Model
	if o.bulk.given() {
		return bulkEmbed(o.bulk, b, o.model.model, prec, o.normalize, o.stdout, o.stderr)
	}
	// A row is an image's (its "image" key) or a text's (its "text"
	// key, there for the empty text too), never both.
	type feature struct {
		Image    *string   `json:"image,omitempty"`
		Text     *string   `json:"text,omitempty"`
		Features []float64 `json:"features"`
	}
	var out []feature
	if len(o.images) > 0 {
		px, err := preprocessImages(b.Preprocessor, o.images)
		if err != nil {
			return err
		}
		f, err := m.EncodeImage(px, len(o.images))
		if err != nil {
			return err
		}
		for i, row := range rows(f.Value().Data().F64(), len(o.images), o.normalize) {
			out = append(out, feature{Image: &o.images[i], Features: row})
		}
	}
	if len(o.texts) > 0 {
		tok, err := b.Tokenizer()
		if err != nil {
			return err
		}
		warnCut(o.stderr, tok, o.texts, m.Config.Text.ContextLength)
		ids := make([][]int, len(o.texts))
		for i, t := range o.texts {
			if ids[i], err = tok.Tokenize(t, m.Config.Text.ContextLength, true); err != nil {
				return err
			}
		}
		f, err := m.EncodeText(ids)
		if err != nil {
			return err
		}
		for i, row := range rows(f.Value().Data().F64(), len(o.texts), o.normalize) {
			out = append(out, feature{Text: &o.texts[i], Features: row})
		}
	}
	return writeJSON(o.stdout, out)
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

// classifyOptions are the flags of classify.
type classifyOptions struct {
	model       modelOptions
	labels      string
	template    string
	jsonOut     bool
	bulk        *bulkFlags
	labelsGiven bool // whether --labels was given
	precision   precisionFlag
	device      deviceOptions

	stdout, stderr io.Writer
}

// newClassifyCmd is `subtta classify IMAGE...`.
func newClassifyCmd(stdout, stderr io.Writer) *cobra.Command {
	const summary = "zero-shot classification of images against labels"
	o := &classifyOptions{stdout: stdout, stderr: stderr}
	c := &cobra.Command{
		Use:   "classify IMAGE...",
		Short: summary,
		Long:  summary,
		RunE: func(cmd *cobra.Command, args []string) error {
			fs := cmd.Flags()
			o.labelsGiven = fs.Changed("labels")
			if fs.Changed("template") && strings.TrimSpace(o.template) == "" {
				return usagef("--template %q: no template (leave the flag out for the default)", o.template)
			}
			if o.bulk.given() {
				if o.jsonOut {
					return usagef("--json is for images given as arguments: with --images, --out's extension (.csv or .jsonl) chooses the format")
				}
			} else if err := o.bulk.checkUnused(fs); err != nil {
				return err
			}
			return o.run(args)
		},
	}
	f := c.Flags()
	configFlags(f, stdout)
	o.bulk = addBulkFlags(f, false, "with --images: the .csv (path, label, prediction, probability, a column per class) or .jsonl file to write; it grows in OUT.part, and an interrupted run resumes there")
	addModelFlags(f, &o.model, "", true)
	f.StringVar(&o.labels, "labels", "", `comma-separated labels, e.g. "a diagram,a dog,a cat" (default: those the model records, as train's models do; with the built-in model CIFAR-10's classes)`)
	f.StringVar(&o.template, "template", "", `prompt template; {} is replaced by each label (e.g. "a photo of a {}."; default "{}", or with the built-in model the 18 CIFAR-10 templates, averaged)`)
	f.BoolVar(&o.jsonOut, "json", false, "print JSON instead of a table")
	o.precision = addPrecisionFlag(f)
	addDeviceFlags(f, &o.device)
	return c
}

// run runs the command with the positional arguments args.
func (o *classifyOptions) run(args []string) error {
	prec, g, err := o.precision.choose(o.device.name)
	if err != nil {
		return err
	}
	release, err := o.device.use(g, o.stderr)
	if err != nil {
		return err
	}
	defer release()
	if o.bulk.given() {
		if err := o.bulk.check("a .csv or .jsonl file"); err != nil {
			return err
		}
		if len(args) > 0 {
			return usagef("give images as arguments or --images, not both")
		}
	} else if len(args) == 0 {
		return usagef("give at least one image")
	}
	var classes []string
	if o.labelsGiven {
		for i, l := range strings.Split(o.labels, ",") {
			if l = strings.TrimSpace(l); l == "" {
				if strings.Trim(o.labels, ", \t") == "" {
					return usagef("--labels %q: no label (leave the flag out for the model's own classes)", o.labels)
				}
				return usagef("--labels %q: entry %d is empty", o.labels, i+1)
			}
			if slices.Contains(classes, l) {
				return usagef("--labels: %q is given twice", l)
			}
			classes = append(classes, l)
		}
	}
	if o.template != "" && !strings.Contains(o.template, "{}") {
		return usagef("--template %q has no {} for the label", o.template)
	}
	b, err := o.model.open(prec.Precision, o.stderr)
	if err != nil {
		return err
	}
	m := b.Model
	classes, templates, err := defaultLabels(m, o.model.model, classes, []string{o.template})
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
	warnCut(o.stderr, tok, prompts, m.Config.Text.ContextLength)
	head, err := m.ZeroShotHead(tok, classes, templates)
	if err != nil {
		return err
	}
	if o.bulk.given() {
		return bulkClassify(o.bulk, b, o.model.model, prec, head, classes, templates, o.stderr)
	}
	px, err := preprocessImages(b.Preprocessor, args)
	if err != nil {
		return err
	}
	f, err := m.EncodeImage(px, len(args))
	if err != nil {
		return err
	}
	probs := clip.Softmax(m.Classify(head, f))
	if o.jsonOut {
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
			r := result{Image: args[i]}
			for j, c := range classes {
				r.Probs = append(r.Probs, labelProb{c, p[j]})
			}
			out = append(out, r)
		}
		return writeJSON(o.stdout, out)
	}
	for i, p := range probs {
		fmt.Fprintln(o.stdout, args[i])
		order := make([]int, len(p))
		for j := range order {
			order[j] = j
		}
		sort.SliceStable(order, func(a, b int) bool { return p[order[a]] > p[order[b]] })
		for _, j := range order {
			fmt.Fprintf(o.stdout, "  %-30s %.4f\n", classes[j], p[j])
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
