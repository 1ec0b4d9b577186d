package eval

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestReadConfigYAML: a YAML config reads as the JSON one with the same
// keys, and is as strict: an unknown key is refused, naming it.
func TestReadConfigYAML(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fromJSON, err := ReadConfig(write("run.json", `{"dataset": "cifar10-c", "methods": ["source", "tent"],
		"corruptions": ["fog", "clean"], "severities": [3, 5], "limit": 200, "seed": 7, "no_shuffle": true}`))
	if err != nil {
		t.Fatal(err)
	}
	const yamlText = `# settings of a run
dataset: cifar10-c
methods: [source, tent]
corruptions:
  - fog
  - clean
severities: [3, 5]
limit: 200
seed: 7
no_shuffle: true
`
	for _, name := range []string{"run.yaml", "run.YML"} {
		fromYAML, err := ReadConfig(write(name, yamlText))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(fromYAML, fromJSON) {
			t.Errorf("%s reads as\n%+v\nthe JSON as\n%+v", name, fromYAML, fromJSON)
		}
		if fromYAML.CorruptSeed != 1 {
			t.Errorf("corrupt_seed %d, want the default 1", fromYAML.CorruptSeed)
		}
	}
	for text, want := range map[string]string{
		"dataset: cifar10-c\nmethod: [tent]\n": `unknown field "method"`,
		"limit: [1, 2]\n":                      "limit",
		"dataset: [unclosed\n":                 "run.yaml",
	} {
		if _, err := ReadConfig(write("run.yaml", text)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one with %q", text, err, want)
		}
	}
}

// TestModelClassesNameUnnamedData: CIFAR-100-C files carry no class
// names; a model that records its own (train's export) names them when no
// Labels folder is given, and nothing else does.
func TestModelClassesNameUnnamedData(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "labels.npy"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Dataset: "cifar100-c", Data: dir}
	if _, err := openSourceFor(cfg, nil); err == nil || !strings.Contains(err.Error(), "give --labels") {
		t.Errorf("no class names anywhere: %v", err)
	}
	names := []string{"apple", "aquarium_fish", "baby"}
	s, err := openSourceFor(cfg, names)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !reflect.DeepEqual(s.classes, names) {
		t.Errorf("classes %q, want the model's %q", s.classes, names)
	}
}
