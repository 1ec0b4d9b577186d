package clip

// Labels are the class names a zero-shot head classifies into and the
// prompt templates it builds them with ("{}" is the class name).
type Labels struct {
	Classes, Templates []string
}

// ChooseLabels returns the labels to classify with, each of the class
// names and the templates chosen apart: those given, else those the model
// records (Model.Classes and Model.Templates, as a model of `subtta train`
// stores them), else the fallback's (a program's built-in ones, such as
// CIFAR-10's for the built-in model). A nil or empty list is not given.
// Either may still be empty; the caller says what it needs.
func (m *Model) ChooseLabels(given, fallback Labels) Labels {
	first := func(lists ...[]string) []string {
		for _, l := range lists {
			if len(l) > 0 {
				return l
			}
		}
		return nil
	}
	return Labels{
		Classes:   first(given.Classes, m.Classes, fallback.Classes),
		Templates: first(given.Templates, m.Templates, fallback.Templates),
	}
}
