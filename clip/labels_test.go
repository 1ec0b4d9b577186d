package clip

import (
	"reflect"
	"testing"
)

// TestChooseLabels: class names and templates are each chosen apart:
// given, else the model's, else the fallback's.
func TestChooseLabels(t *testing.T) {
	recorded := &Model{Classes: []string{"cat", "dog"}, Templates: []string{"a {}"}}
	bare := &Model{}
	fb := Labels{Classes: []string{"plane"}, Templates: []string{"{}"}}
	for _, c := range []struct {
		name  string
		m     *Model
		given Labels
		want  Labels
	}{
		{"given", recorded, Labels{[]string{"x"}, []string{"t {}"}}, Labels{[]string{"x"}, []string{"t {}"}}},
		{"recorded", recorded, Labels{}, Labels{[]string{"cat", "dog"}, []string{"a {}"}}},
		{"classes given, templates recorded", recorded, Labels{Classes: []string{"x"}}, Labels{[]string{"x"}, []string{"a {}"}}},
		{"fallback", bare, Labels{}, fb},
		{"templates given, classes fallback", bare, Labels{Templates: []string{"t {}"}}, Labels{[]string{"plane"}, []string{"t {}"}}},
		{"none", bare, Labels{Classes: []string{}}, Labels{}},
	} {
		f := fb
		if c.name == "none" {
			f = Labels{}
		}
		if got := c.m.ChooseLabels(c.given, f); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
