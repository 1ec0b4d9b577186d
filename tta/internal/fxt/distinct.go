package fxt

// Distinct is the set of values in a.
func Distinct(a []int) map[int]bool {
	m := map[int]bool{}
	for _, v := range a {
		m[v] = true
	}
	return m
}
