package feature

// This file reproduces, for the tests only, the order in which torch's CPU
// top-k (ATen SortingKernel topk_impl_loop, sorted, largest) returns equal
// values. ECALPGraph orders ties by node index (topk.go); the tests run it
// also in torch's order, which the public fixture's lists follow at every
// step, and use it to make a reference with torch's order at ties for a
// stream with duplicate images (ecalp_ties_test.go). torch selects with
// the C++ library's partial_sort when 64·k ≤ n, and otherwise with
// nth_element at k−1 followed by sort of the first k−1;
// both are GNU libstdc++'s introselect (median of three moved to the
// front, unguarded partition, insertion sort below four items), introsort
// (insertion sort below 17 items) and binary-heap selection, re-implemented
// below step for step because the order of ties is a property of those
// exact steps. The comparison is torch's: x before y if x is NaN and y is
// not, or x > y. The fixture's lists exercise the nth_element path; the
// partial_sort path (n ≥ 64·k, the new image's list in domains of
// hundreds of images) follows the same library but no fixture covers its
// ties.

// torchTopK returns the first k items of q (which it reorders) in torch's
// order.
func torchTopK(q []rankItem, k int) []rankItem {
	n := len(q)
	k = min(k, n)
	if k <= 0 {
		return nil
	}
	if k*64 <= n {
		partialSort(q, k)
	} else {
		nthElement(q, k-1)
		introSort(q[:k-1])
	}
	return q[:k]
}

// floorLog2 is ⌊log₂ n⌋ for n ≥ 1.
func floorLog2(n int) int {
	l := 0
	for n > 1 {
		n >>= 1
		l++
	}
	return l
}

func nthElement(q []rankItem, nth int) {
	if len(q) == 0 || nth >= len(q) {
		return
	}
	first, last := 0, len(q)
	depth := 2 * floorLog2(len(q))
	for last-first > 3 {
		if depth == 0 {
			heapSelect(q[first:last], nth+1-first)
			q[first], q[nth] = q[nth], q[first]
			return
		}
		depth--
		cut := first + partitionPivot(q[first:last])
		if cut <= nth {
			first = cut
		} else {
			last = cut
		}
	}
	insertionSort(q[first:last])
}

// partitionPivot moves the median of q[1], q[mid], q[last] to q[0] and
// partitions q[1:] around it; it returns the cut.
func partitionPivot(q []rankItem) int {
	mid := len(q) / 2
	moveMedianToFirst(q, 0, 1, mid, len(q)-1)
	// Unguarded partition of q[1:] around q[0].
	lo, hi := 1, len(q)
	for {
		for rankBefore(q[lo], q[0]) {
			lo++
		}
		hi--
		for rankBefore(q[0], q[hi]) {
			hi--
		}
		if lo >= hi {
			return lo
		}
		q[lo], q[hi] = q[hi], q[lo]
		lo++
	}
}

func moveMedianToFirst(q []rankItem, result, a, b, c int) {
	var m int
	switch {
	case rankBefore(q[a], q[b]):
		switch {
		case rankBefore(q[b], q[c]):
			m = b
		case rankBefore(q[a], q[c]):
			m = c
		default:
			m = a
		}
	case rankBefore(q[a], q[c]):
		m = a
	case rankBefore(q[b], q[c]):
		m = c
	default:
		m = b
	}
	q[result], q[m] = q[m], q[result]
}

func insertionSort(q []rankItem) {
	for i := 1; i < len(q); i++ {
		if rankBefore(q[i], q[0]) {
			v := q[i]
			copy(q[1:i+1], q[:i])
			q[0] = v
			continue
		}
		linearInsert(q, i)
	}
}

// linearInsert moves q[i] down past the items it ranks before (a smaller
// item is known to exist below it).
func linearInsert(q []rankItem, i int) {
	v := q[i]
	j := i - 1
	for rankBefore(v, q[j]) {
		q[i] = q[j]
		i = j
		j--
	}
	q[i] = v
}

// introSort is the library's sort: introsort loops above 16 items, then
// a final insertion sort.
func introSort(q []rankItem) {
	if len(q) == 0 {
		return
	}
	introSortLoop(q, 2*floorLog2(len(q)))
	if len(q) > 16 {
		insertionSort(q[:16])
		for i := 16; i < len(q); i++ {
			linearInsert(q, i)
		}
		return
	}
	insertionSort(q)
}

func introSortLoop(q []rankItem, depth int) {
	for len(q) > 16 {
		if depth == 0 {
			partialSort(q, len(q))
			return
		}
		depth--
		cut := partitionPivot(q)
		introSortLoop(q[cut:], depth)
		q = q[:cut]
	}
}

// partialSort orders the first m items (heap select, then heap sort).
func partialSort(q []rankItem, m int) {
	heapSelect(q, m)
	for last := m; last > 1; {
		last--
		popHeap(q[:last], last, q)
	}
}

// heapSelect makes q[:m] a heap holding the m items that rank first.
func heapSelect(q []rankItem, m int) {
	makeHeap(q[:m])
	for i := m; i < len(q); i++ {
		if rankBefore(q[i], q[0]) {
			popHeap(q[:m], i, q)
		}
	}
}

func makeHeap(h []rankItem) {
	n := len(h)
	if n < 2 {
		return
	}
	for parent := (n - 2) / 2; ; parent-- {
		adjustHeap(h, parent, h[parent])
		if parent == 0 {
			return
		}
	}
}

// popHeap moves the heap's top to all[result] and re-inserts the item
// that was there.
func popHeap(h []rankItem, result int, all []rankItem) {
	v := all[result]
	all[result] = h[0]
	adjustHeap(h, 0, v)
}

func adjustHeap(h []rankItem, hole int, v rankItem) {
	n := len(h)
	top, child := hole, hole
	for child < (n-1)/2 {
		child = 2 * (child + 1)
		if rankBefore(h[child], h[child-1]) {
			child--
		}
		h[hole] = h[child]
		hole = child
	}
	if n%2 == 0 && child == (n-2)/2 {
		child = 2 * (child + 1)
		h[hole] = h[child-1]
		hole = child - 1
	}
	// Push v up from hole towards top.
	parent := (hole - 1) / 2
	for hole > top && rankBefore(h[parent], v) {
		h[hole] = h[parent]
		hole = parent
		parent = (hole - 1) / 2
	}
	h[hole] = v
}
