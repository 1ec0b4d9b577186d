package flagfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	goyaml "go.yaml.in/yaml/v2"
	"sigs.k8s.io/yaml"
)

// Errors Apply returns, wrapped with the key and the file.
var (
	// ErrUnknownKey: a key that names no flag.
	ErrUnknownKey = errors.New("unknown key")
	// ErrBadValue: a value the flag does not take, or of the wrong shape
	// (a block for a flag that takes one value).
	ErrBadValue = errors.New("bad value")
	// ErrTwice: one flag given twice in a file ("batch-size" and "batch_size").
	ErrTwice = errors.New("key given twice")
	// ErrNotMapping: the file is not a mapping of keys to values.
	ErrNotMapping = errors.New("not a mapping of flag names to values")
	// ErrDocuments: the file holds more than one YAML document ("---"
	// between them), of which only the first would be read.
	ErrDocuments = errors.New("more than one YAML document")
)

// Options adjust how a flag set meets a file.
type Options struct {
	// Skip names flags that a file neither sets nor lists: the flag that
	// names the file, and --print-config.
	Skip []string
	// Aliases maps other keys to flag names: a key of an older file
	// format ("method_options" for "set"). Keys are compared after
	// normalisation (Key).
	Aliases map[string]string
}

// Key is the normal form of a file's key: "_" read as "-".
func Key(k string) string { return strings.ReplaceAll(k, "_", "-") }

// KeyValues is a repeatable flag of KEY=VALUE entries, KEY a dotted path
// (--set subtta-m.rank=8): a file gives its entries as nested blocks
// (set: {subtta-m: {rank: 8}}) or as a list of entries, and Write writes
// them as blocks.
type KeyValues []string

func (kv *KeyValues) String() string {
	if kv == nil {
		return ""
	}
	return strings.Join(*kv, ",")
}

// Set adds an entry; it must have a key before its "=".
func (kv *KeyValues) Set(v string) error {
	if k, _, ok := strings.Cut(v, "="); !ok || k == "" {
		return fmt.Errorf("%q: want KEY=VALUE", v)
	}
	*kv = append(*kv, v)
	return nil
}

// Get returns the entries, as flag.Getter.
func (kv *KeyValues) Get() any { return []string(*kv) }

// Type names the flag's values in help as pflag names a repeatable
// string flag's.
func (kv *KeyValues) Type() string { return "stringArray" }

// Read reads the file at path into a mapping from keys to values (JSON
// types: string, json.Number, bool, nil, []any, map[string]any).
func Read(path string) (map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(b)
}

// Parse reads a file's contents as Read does. A file of more than one
// YAML document is refused (ErrDocuments): only the first would be read,
// the keys of the others silently left out.
func Parse(b []byte) (map[string]any, error) {
	// Strict: a key given twice is an error, not the last one silently.
	j, err := yaml.YAMLToJSONStrict(b)
	if err != nil {
		return nil, err
	}
	if err := oneDocument(b); err != nil {
		return nil, err
	}
	if t := bytes.TrimSpace(j); len(t) == 0 || string(t) == "null" {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber() // seeds beyond 2^53 stay exact
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, ErrNotMapping
	}
	return m, nil
}

// oneDocument refuses YAML of more than one document, which
// yaml.YAMLToJSONStrict reads the first of: a second document ("---"),
// even an empty one, or anything after an end of document ("...").
func oneDocument(b []byte) error {
	dec := goyaml.NewDecoder(bytes.NewReader(b))
	for n := 0; ; n++ {
		var v any
		err := dec.Decode(&v)
		switch {
		case err == io.EOF:
			return nil
		case err != nil:
			return fmt.Errorf("%w: after the first: %w", ErrDocuments, err)
		case n == 1:
			return fmt.Errorf("%w: the second (after ---) would not be read; give every key in one", ErrDocuments)
		}
	}
}

// Apply sets from values (as Read returns them) every flag of fs that is
// not set yet (Changed), that is, not given on the command line. A key
// sets its flag as the same value on the command line would, its
// default's value included (a flag whose meaning depends on being given,
// such as eval's --limit, keeps it); null leaves the flag unset. A list sets
// a List flag once per element, and a String flag whose help says
// "comma-separated" (CommaSeparated) once to its elements joined with
// commas (an element with a comma of its own is refused); a block sets a Map flag once per leaf, KEY=VALUE
// with the path of dotted keys. Errors wrap ErrUnknownKey, ErrBadValue or
// ErrTwice and name the key.
func Apply(fs FlagSet, values map[string]any, opt Options) error {
	seen := map[string]string{} // flag name → key that set it
	for _, key := range slices.Sorted(maps.Keys(values)) {
		f, err := lookup(fs, key, opt)
		if err != nil {
			return err
		}
		if k, ok := seen[f.Name]; ok {
			return fmt.Errorf("%w: %s and %s both name --%s", ErrTwice, k, key, f.Name)
		}
		seen[f.Name] = key
		if fs.Changed(f.Name) {
			continue // the command line wins
		}
		args, err := flagArgs(f, values[key])
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		for _, a := range args {
			if err := fs.Set(f.Name, a); err != nil {
				return fmt.Errorf("%s: %w: %q%s", key, ErrBadValue, a, want(f.Kind, err))
			}
		}
	}
	return nil
}

// lookup returns the flag key names.
func lookup(fs FlagSet, key string, opt Options) (Flag, error) {
	name := Key(key)
	for a, n := range opt.Aliases {
		if Key(a) == name {
			name = n
		}
	}
	f, ok := fs.Lookup(name)
	if ok && !slices.Contains(opt.Skip, f.Name) {
		return f, nil
	}
	if ok {
		return f, fmt.Errorf("%w %s: --%s is not read from a file", ErrUnknownKey, key, f.Name)
	}
	if near := nearest(fs, name, opt); near != "" {
		return f, fmt.Errorf("%w %s; did you mean %s?", ErrUnknownKey, key, near)
	}
	return f, fmt.Errorf("%w %s (not a flag of %s)", ErrUnknownKey, key, fs.Name())
}

// nearest is the name of the flag of fs spelt most like name, if one is
// near enough to be meant: within two edits or a third of its length, or
// a prefix of it or (three letters or more) it of the flag's.
func nearest(fs FlagSet, name string, opt Options) string {
	best, bestD := "", 0
	fs.VisitAll(func(f Flag) {
		if slices.Contains(opt.Skip, f.Name) {
			return
		}
		d := EditDistance(name, f.Name)
		prefix := len(name) >= 3 && (strings.HasPrefix(name, f.Name) || strings.HasPrefix(f.Name, name))
		if d > max(2, len(name)/3) && !prefix {
			return
		}
		if best == "" || d < bestD {
			best, bestD = f.Name, d
		}
	})
	return best
}

// flagArgs turns a file's value into the arguments of f's Sets.
func flagArgs(f Flag, v any) ([]string, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case []any:
		var out []string
		for _, e := range v {
			s, err := scalar(e)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
		if f.Kind == List || f.Kind == Map {
			return out, nil
		}
		if !CommaSeparated(f) {
			return nil, fmt.Errorf("%w: a list, but --%s takes one value", ErrBadValue, f.Name)
		}
		for _, e := range out {
			if strings.Contains(e, ",") {
				return nil, fmt.Errorf("%w: list element %q holds a comma, which --%s splits on", ErrBadValue, e, f.Name)
			}
		}
		return []string{strings.Join(out, ",")}, nil
	case map[string]any:
		if f.Kind != Map {
			return nil, fmt.Errorf("%w: a block, but --%s takes a value", ErrBadValue, f.Name)
		}
		var out []string
		var walk func(prefix string, m map[string]any) error
		walk = func(prefix string, m map[string]any) error {
			for _, k := range slices.Sorted(maps.Keys(m)) {
				switch e := m[k].(type) {
				case map[string]any:
					if err := walk(prefix+k+".", e); err != nil {
						return err
					}
				default:
					s, err := scalar(e)
					if err != nil {
						return fmt.Errorf("%s%s: %w", prefix, k, err)
					}
					out = append(out, prefix+k+"="+s)
				}
			}
			return nil
		}
		return out, walk("", v)
	}
	s, err := scalar(v)
	if err != nil {
		return nil, err
	}
	return []string{s}, nil
}

// CommaSeparated reports whether f, a String flag, takes a comma-separated
// list: by the convention of its help, which says "comma-separated".
func CommaSeparated(f Flag) bool {
	return f.Kind == String && strings.Contains(f.Usage, "comma-separated")
}

// scalar is a file's string, number or boolean as a flag argument.
func scalar(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case json.Number:
		return v.String(), nil
	case bool:
		return strconv.FormatBool(v), nil
	case nil:
		return "", fmt.Errorf("%w: null in a list or block", ErrBadValue)
	}
	return "", fmt.Errorf("%w: a list or block where a string, number or boolean goes", ErrBadValue)
}

// Write writes every flag of fs (but those of opt.Skip) as a file Apply
// reads back into the same values and the same flags set, in the order of
// fs.VisitAll, each under its flag's help as a comment: a flag that is set
// (Changed: given on the command line or by a file) as a key with its
// value, any other as the same line commented out, its default shown but
// not given. header, if not empty, is written first as a comment.
func Write(w io.Writer, fs FlagSet, header string, opt Options) error {
	var b bytes.Buffer
	comment := func(text string) {
		for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
			b.WriteString(strings.TrimRight("# "+line, " ") + "\n")
		}
	}
	if header != "" {
		comment(header)
	}
	var err error
	fs.VisitAll(func(f Flag) {
		if err != nil || slices.Contains(opt.Skip, f.Name) {
			return
		}
		var y []byte
		if y, err = yaml.Marshal(map[string]any{f.Name: fileValue(f)}); err != nil {
			err = fmt.Errorf("--%s: %w", f.Name, err)
			return
		}
		b.WriteString("\n")
		comment(f.Usage)
		if fs.Changed(f.Name) {
			b.Write(y)
		} else {
			comment(string(y))
		}
	})
	if err != nil {
		return err
	}
	_, err = w.Write(b.Bytes())
	return err
}

// fileValue is f's current value as Write writes it: typed as its Kind
// (a Duration as its string), a Map's entries as nested blocks when
// their keys nest.
func fileValue(f Flag) any {
	switch v := f.Value.(type) {
	case []string:
		if f.Kind == Map {
			if m, ok := nest(v); ok {
				return m
			}
		}
		return v
	case float64:
		return json.Number(strconv.FormatFloat(v, 'g', -1, 64))
	}
	return f.Value
}

// nest arranges KEY=VALUE entries as nested blocks by the dots of their
// keys, or reports false when that loses an entry: a key given twice, or
// one key a prefix of another.
func nest(entries []string) (map[string]any, bool) {
	if len(entries) == 0 {
		return nil, false
	}
	root := map[string]any{}
	for _, e := range entries {
		k, v, _ := strings.Cut(e, "=")
		parts := strings.Split(k, ".")
		m := root
		for _, p := range parts[:len(parts)-1] {
			switch sub := m[p].(type) {
			case nil:
				next := map[string]any{}
				m[p] = next
				m = next
			case map[string]any:
				m = sub
			default:
				return nil, false
			}
		}
		last := parts[len(parts)-1]
		if _, ok := m[last]; ok || slices.Contains(parts, "") {
			return nil, false
		}
		m[last] = v
	}
	return root, true
}

// EditDistance is the Levenshtein distance between a and b: how a
// misspelt name is matched to the nearest flag, here and by the command line.
func EditDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// want says what a flag of kind k takes, for the error of a value it
// refused (err, the flag's own words, for a kind with no simpler ones).
func want(k Kind, err error) string {
	switch k {
	case Bool:
		return " (want true or false)"
	case Int, Uint:
		return " (want a whole number)"
	case Float:
		return " (want a number)"
	case Duration:
		return " (want a duration such as 250ms or 2s)"
	}
	return ": " + err.Error()
}
