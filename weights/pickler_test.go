package weights

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"math"
	"strconv"
	"strings"
	"testing"
)

// pickler writes the subset of pickle protocol 2 that torch.save and
// torch.jit.save emit, so that tests can build archives byte by byte.
type pickler struct {
	bytes.Buffer
	memo    int
	globals map[string]int // memo slots of globals already written
}

func (p *pickler) op(b ...byte) { p.Write(b) }

func (p *pickler) put() {
	if p.memo < 256 {
		p.op('q', byte(p.memo))
	} else {
		p.op('r')
		binary.Write(p, binary.LittleEndian, uint32(p.memo))
	}
	p.memo++
}

func (p *pickler) get(id int) {
	if id < 256 {
		p.op('h', byte(id))
	} else {
		p.op('j')
		binary.Write(p, binary.LittleEndian, uint32(id))
	}
}

// global writes GLOBAL once and BINGET afterwards, as Python's pickler does.
func (p *pickler) global(module, name string) {
	key := module + "\n" + name + "\n"
	if id, ok := p.globals[key]; ok {
		p.get(id)
		return
	}
	if p.globals == nil {
		p.globals = map[string]int{}
	}
	p.WriteString("c" + key)
	p.globals[key] = p.memo
	p.put()
}

func (p *pickler) str(s string) {
	p.op('X')
	binary.Write(p, binary.LittleEndian, uint32(len(s)))
	p.WriteString(s)
}

func (p *pickler) int(n int) {
	switch {
	case n >= 0 && n < 256:
		p.op('K', byte(n))
	case n >= 0 && n < 65536:
		p.op('M', byte(n), byte(n>>8))
	default:
		p.op('J')
		binary.Write(p, binary.LittleEndian, int32(n))
	}
}

func (p *pickler) ints(xs []int) {
	switch len(xs) {
	case 0:
		p.op(')')
	case 1:
		p.int(xs[0])
		p.op(0x85)
	case 2:
		p.int(xs[0])
		p.int(xs[1])
		p.op(0x86)
	default:
		p.op('(')
		for _, x := range xs {
			p.int(x)
		}
		p.op('t')
	}
}

// storage writes the persistent id of torch.<class>, memoised by key.
func (p *pickler) storage(class, key string, numel int, seen map[string]int) {
	if id, ok := seen[key]; ok {
		p.get(id)
		return
	}
	p.op('(')
	p.str("storage")
	p.global("torch", class)
	p.str(key)
	p.str("cpu")
	p.int(numel)
	p.op('t', 'Q')
	seen[key] = p.memo
	p.put()
}

// tensor writes _rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict()).
func (p *pickler) tensor(class, key string, numel, offset int, size, stride []int, seen map[string]int) {
	p.global("torch._utils", "_rebuild_tensor_v2")
	p.op('(')
	p.storage(class, key, numel, seen)
	p.int(offset)
	p.ints(size)
	p.ints(stride)
	p.op(0x89) // NEWFALSE
	p.global("collections", "OrderedDict")
	p.op(')', 'R', 't', 'R')
}

func contiguousStride(shape []int) []int {
	st := make([]int, len(shape))
	n := 1
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = n
		n *= shape[i]
	}
	return st
}

// zipEntry is one file of a test archive.
type zipEntry struct {
	name string
	data []byte
}

// makeZip stores entries uncompressed, as torch does.
func makeZip(t testing.TB, entries []zipEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: e.name, Method: zip.Store})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(e.data)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func f32bytes(x []float32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

// module is a node of a TorchScript-like module tree: attributes in order,
// each a submodule or a tensor (index into the flat tensor list).
type module struct {
	names  []string
	subs   map[string]*module
	tensor map[string]int
}

func newModule() *module { return &module{subs: map[string]*module{}, tensor: map[string]int{}} }

// torchScriptArchive builds what torch.jit.save writes for a module whose
// parameters are the given tensors, named by attribute path: code/,
// constants.pkl, and a data.pkl pickling the module tree (each module an
// object built by NEWOBJ whose BUILD sets a dict of attributes), with fp32
// storages under data/.
func torchScriptArchive(t testing.TB, prefix string, names []string, shapes [][]int, data [][]float32) []byte {
	root := newModule()
	for i, n := range names {
		parts := strings.Split(n, ".")
		m := root
		for _, part := range parts[:len(parts)-1] {
			sub, ok := m.subs[part]
			if !ok {
				sub = newModule()
				m.subs[part] = sub
				m.names = append(m.names, part)
			}
			m = sub
		}
		leaf := parts[len(parts)-1]
		m.tensor[leaf] = i
		m.names = append(m.names, leaf)
	}
	var p pickler
	seen := map[string]int{}
	var emit func(m *module, class string)
	emit = func(m *module, class string) {
		p.global("__torch__.model", class)
		p.op(')', 0x81) // EMPTY_TUPLE NEWOBJ
		p.put()
		p.op('}', '(')
		p.str("training")
		p.op(0x89)
		for _, n := range m.names {
			p.str(n)
			if sub, ok := m.subs[n]; ok {
				emit(sub, "Module_"+n)
				continue
			}
			i := m.tensor[n]
			p.tensor("FloatStorage", strconv.Itoa(i), len(data[i]), 0, shapes[i], contiguousStride(shapes[i]), seen)
		}
		p.op('u', 'b') // SETITEMS BUILD
	}
	p.op(0x80, 2)
	emit(root, "CLIP")
	p.op('.')
	entries := []zipEntry{
		{prefix + "/data.pkl", p.Bytes()},
		{prefix + "/code/__torch__/model.py", []byte("class CLIP(Module):\n  pass\n")},
		{prefix + "/constants.pkl", []byte{0x80, 2, ')', '.'}},
		{prefix + "/version", []byte("1\n")},
	}
	for i := range data {
		entries = append(entries, zipEntry{prefix + "/data/" + strconv.Itoa(i), f32bytes(data[i])})
	}
	return makeZip(t, entries)
}
