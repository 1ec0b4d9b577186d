package weights

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"path"
	"strconv"
	"strings"

	"github.com/nlpodyssey/gopickle/pickle"
	"github.com/nlpodyssey/gopickle/types"
)

// PyTorch zip archives (torch.save since 1.6, and torch.jit.save) hold
// <prefix>/data.pkl, a pickle whose tensors refer by key to raw storages
// <prefix>/data/<key>. A state dict pickles an OrderedDict of name ->
// tensor; a TorchScript archive pickles the module tree, each module an
// object whose attributes are its parameters and submodules, so a tensor's
// name is its attribute path (visual.conv1.weight). The same unpickler
// reads both: tensors are found by walking whatever the pickle built.

// loadPyTorch reads a PyTorch zip archive held in data. It never panics on
// corrupt input.
func loadPyTorch(name string, data []byte) (s *State, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("weights: %s: corrupt PyTorch archive: %v", name, r)
		}
	}()
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil && !errors.Is(err, zip.ErrInsecurePath) {
		return nil, fmt.Errorf("weights: %s: not a PyTorch zip archive: %w", name, err)
	}
	entries := make(map[string]*zip.File, len(zr.File))
	prefix := ""
	found := false
	for _, f := range zr.File {
		entries[f.Name] = f
		dir, base := path.Split(f.Name)
		if base == "data.pkl" && strings.Count(dir, "/") <= 1 && (!found || len(dir) < len(prefix)) {
			prefix, found = dir, true
		}
	}
	if !found {
		return nil, fmt.Errorf("weights: %s: no data.pkl in the zip archive (not a torch.save or TorchScript file)", name)
	}
	format := FormatPyTorch
	for n := range entries {
		if strings.HasPrefix(n, prefix+"code/") || n == prefix+"constants.pkl" {
			format = FormatTorchScript
			break
		}
	}
	if f, ok := entries[prefix+"byteorder"]; ok {
		b, err := readEntry(data, f)
		if err != nil {
			return nil, fmt.Errorf("weights: %s: %w", name, err)
		}
		if strings.TrimSpace(string(b)) != "little" {
			return nil, fmt.Errorf("weights: %s: byteorder %q is not supported (little-endian only)", name, b)
		}
	}
	pkl, err := readEntry(data, entries[prefix+"data.pkl"])
	if err != nil {
		return nil, fmt.Errorf("weights: %s: %w", name, err)
	}
	storage := func(key string) ([]byte, error) {
		f, ok := entries[prefix+"data/"+key]
		if !ok {
			return nil, fmt.Errorf("storage %q: no entry %sdata/%s", key, prefix, key)
		}
		return readEntry(data, f)
	}
	s, err = parsePickle(name, pkl, storage)
	if err != nil {
		return nil, err
	}
	s.Format = format
	return s, nil
}

// readEntry returns the contents of a zip entry: a slice of data for a
// stored (uncompressed) entry, as torch writes them, or a decompressed copy.
func readEntry(data []byte, f *zip.File) ([]byte, error) {
	if f.Method == zip.Store {
		off, err := f.DataOffset()
		if err != nil {
			return nil, fmt.Errorf("zip entry %s: %w", f.Name, err)
		}
		size := f.UncompressedSize64
		if f.CompressedSize64 != size || off < 0 || uint64(off) > uint64(len(data)) || size > uint64(len(data))-uint64(off) {
			return nil, fmt.Errorf("zip entry %s: %d bytes at offset %d outside the %d-byte file", f.Name, size, off, len(data))
		}
		return data[off : uint64(off)+size], nil
	}
	// Bound the claimed size by deflate's best ratio so that a corrupt
	// header cannot make us allocate without limit.
	if f.UncompressedSize64 > 1100*f.CompressedSize64+1024 {
		return nil, fmt.Errorf("zip entry %s: implausible size %d", f.Name, f.UncompressedSize64)
	}
	r, err := f.Open()
	if err != nil {
		return nil, fmt.Errorf("zip entry %s: %w", f.Name, err)
	}
	defer r.Close()
	b := make([]byte, f.UncompressedSize64)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("zip entry %s: %w", f.Name, err)
	}
	return b, nil
}

// parsePickle unpickles a data.pkl and collects its tensors; storage returns
// the bytes of a storage by key. It never panics on corrupt input.
func parsePickle(name string, pkl []byte, storage func(key string) ([]byte, error)) (s *State, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("weights: %s: corrupt pickle: %v", name, r)
		}
	}()
	if err := scanPickle(pkl); err != nil {
		return nil, fmt.Errorf("weights: %s: data.pkl: %w", name, err)
	}
	storages := map[string]*ptStorage{}
	u := pickle.NewUnpickler(bytes.NewReader(pkl))
	u.FindClass = findClass
	u.PersistentLoad = func(pid any) (any, error) {
		t, ok := pid.(*types.Tuple)
		if !ok || t.Len() != 5 || t.Get(0) != "storage" {
			return nil, fmt.Errorf("unsupported persistent id %v", pid)
		}
		st, ok1 := t.Get(1).(*storageClass)
		key, ok2 := t.Get(2).(string)
		numel, ok3 := t.Get(4).(int)
		if !ok1 || !ok2 || !ok3 || numel < 0 {
			return nil, fmt.Errorf("unsupported storage id %v", pid)
		}
		if prev, ok := storages[key]; ok {
			return prev, nil
		}
		b, err := storage(key)
		if err != nil {
			return nil, err
		}
		if st.dtype == "" {
			return nil, fmt.Errorf("storage %q: %s is not supported", key, st.name)
		}
		if uint64(numel) > uint64(len(b))/uint64(st.dtype.Size()) {
			return nil, fmt.Errorf("storage %q: %d elements of %s need %d bytes, the archive has %d",
				key, numel, st.dtype, uint64(numel)*uint64(st.dtype.Size()), len(b))
		}
		ps := &ptStorage{key: key, dtype: st.dtype, numel: numel, data: b}
		storages[key] = ps
		return ps, nil
	}
	root, err := u.Load()
	if err != nil {
		return nil, fmt.Errorf("weights: %s: data.pkl: %w", name, err)
	}
	root = unwrapCheckpoint(root)
	var c collector
	if err := c.walk(root, ""); err != nil {
		return nil, fmt.Errorf("weights: %s: %w", name, err)
	}
	if len(c.names) == 0 {
		return nil, fmt.Errorf("weights: %s: the pickle holds no tensors", name)
	}
	// open_clip training checkpoints come from DataParallel: module.<name>.
	strip := true
	for _, n := range c.names {
		strip = strip && strings.HasPrefix(n, "module.")
	}
	s = NewState(name)
	for i, n := range c.names {
		if strip {
			n = strings.TrimPrefix(n, "module.")
		}
		if s.Has(n) {
			return nil, fmt.Errorf("weights: %s: tensor %q appears twice", name, n)
		}
		p, err := c.tensors[i].param(n)
		if err != nil {
			return nil, fmt.Errorf("weights: %s: tensor %q: %w", name, n, err)
		}
		s.Set(p)
	}
	return s, nil
}

// unwrapCheckpoint returns the state dict inside a training checkpoint
// ({"state_dict": ..., "epoch": ...}), or v itself.
func unwrapCheckpoint(v any) any {
	var sd any
	switch d := v.(type) {
	case *types.Dict:
		sd, _ = d.Get("state_dict")
	case *types.OrderedDict:
		sd, _ = d.Get("state_dict")
	}
	switch sd.(type) {
	case *types.Dict, *types.OrderedDict:
		return sd
	}
	return v
}

// ptStorage is a typed storage of a PyTorch archive.
type ptStorage struct {
	key   string
	dtype DType
	numel int
	data  []byte
}

// ptTensor is a strided view of a storage, as _rebuild_tensor_v2 describes.
type ptTensor struct {
	storage *ptStorage
	offset  int
	size    []int
	stride  []int
}

// param materialises the tensor as float32 in row-major order, following
// its strides (a non-contiguous view is gathered).
func (t *ptTensor) param(name string) (*Param, error) {
	st := t.storage
	if len(t.size) != len(t.stride) {
		return nil, fmt.Errorf("size %v and stride %v differ in length", t.size, t.stride)
	}
	if t.offset < 0 || t.offset > st.numel {
		return nil, fmt.Errorf("storage offset %d outside its %d-element storage", t.offset, st.numel)
	}
	numel := 1
	last := t.offset // largest storage index touched
	contiguous := true
	want := 1
	for i := len(t.size) - 1; i >= 0; i-- {
		sz, sd := t.size[i], t.stride[i]
		if sz < 0 || sd < 0 {
			return nil, fmt.Errorf("negative size or stride: size %v stride %v", t.size, t.stride)
		}
		if sz == 0 {
			numel = 0
			continue
		}
		if numel > st.numel/sz {
			return nil, fmt.Errorf("size %v exceeds its storage of %d elements", t.size, st.numel)
		}
		numel *= sz
		if sd > 0 && sz-1 > (math.MaxInt-last)/sd {
			return nil, fmt.Errorf("stride %v reaches beyond its storage", t.stride)
		}
		last += (sz - 1) * sd
		if sz != 1 && sd != want {
			contiguous = false
		}
		want *= sz
	}
	p := &Param{Name: name, Shape: append([]int{}, t.size...), DType: st.dtype, Data: make([]float32, numel)}
	if numel == 0 {
		return p, nil
	}
	if last >= st.numel {
		return nil, fmt.Errorf("offset %d, size %v, stride %v reach element %d of a %d-element storage",
			t.offset, t.size, t.stride, last, st.numel)
	}
	es := st.dtype.Size()
	if contiguous {
		return p, decodeFloat32(p.Data, st.dtype, st.data[t.offset*es:(t.offset+numel)*es])
	}
	// Gather a strided view: walk the index like an odometer.
	idx := make([]int, len(t.size))
	pos := t.offset
	for i := range p.Data {
		if err := decodeFloat32(p.Data[i:i+1], st.dtype, st.data[pos*es:(pos+1)*es]); err != nil {
			return nil, err
		}
		for d := len(idx) - 1; d >= 0; d-- {
			idx[d]++
			pos += t.stride[d]
			if idx[d] < t.size[d] {
				break
			}
			pos -= idx[d] * t.stride[d]
			idx[d] = 0
		}
	}
	return p, nil
}

// collector gathers the tensors of an unpickled object graph by path.
type collector struct {
	names   []string
	tensors []*ptTensor
	onPath  map[any]bool // containers being walked, to break cycles
	visits  int
}

// maxVisits and maxTensors bound the walk: shared subgraphs are walked once
// per path, so a hostile pickle could otherwise make it exponential. Real
// checkpoints hold thousands of tensors.
const (
	maxVisits  = 1 << 20
	maxTensors = 1 << 17
)

func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

func (c *collector) walk(v any, prefix string) error {
	c.visits++
	if c.visits > maxVisits {
		return errors.New("object graph too large")
	}
	switch x := v.(type) {
	case *ptTensor:
		if len(c.names) == maxTensors {
			return fmt.Errorf("more than %d tensors", maxTensors)
		}
		c.names = append(c.names, prefix)
		c.tensors = append(c.tensors, x)
		return nil
	case *types.OrderedDict, *types.Dict, *object, *types.List, *types.Tuple:
	default:
		return nil // scalars, strings, classes: not weights
	}
	if c.onPath == nil {
		c.onPath = map[any]bool{}
	}
	if c.onPath[v] {
		return nil
	}
	if len(c.onPath) > 256 {
		return errors.New("objects nested too deeply")
	}
	c.onPath[v] = true
	defer delete(c.onPath, v)
	switch x := v.(type) {
	case *types.OrderedDict:
		for e := x.List.Front(); e != nil; e = e.Next() {
			entry := e.Value.(*types.OrderedDictEntry)
			if err := c.walk(entry.Value, join(prefix, keyString(entry.Key))); err != nil {
				return err
			}
		}
	case *types.Dict:
		for _, entry := range *x {
			if err := c.walk(entry.Value, join(prefix, keyString(entry.Key))); err != nil {
				return err
			}
		}
	case *object:
		for _, a := range x.attrs {
			if err := c.walk(a.value, join(prefix, a.name)); err != nil {
				return err
			}
		}
	case *types.List:
		for i, e := range *x {
			if err := c.walk(e, join(prefix, strconv.Itoa(i))); err != nil {
				return err
			}
		}
	case *types.Tuple:
		for i, e := range *x {
			if err := c.walk(e, join(prefix, strconv.Itoa(i))); err != nil {
				return err
			}
		}
	}
	return nil
}

func keyString(k any) string {
	if s, ok := k.(string); ok {
		return s
	}
	return fmt.Sprint(k)
}

// storageClass is torch.<Type>Storage; dtype is empty for the types this
// package does not read.
type storageClass struct {
	name  string
	dtype DType
}

var storageDTypes = map[string]DType{
	"FloatStorage": F32, "HalfStorage": F16, "BFloat16Storage": BF16, "DoubleStorage": F64,
	"LongStorage": I64, "IntStorage": I32, "ByteStorage": U8, "BoolStorage": U8, "CharStorage": I8,
}

// findClass resolves the globals a PyTorch pickle may name. Unknown classes
// become generic objects that record their attributes: nothing is executed.
func findClass(module, name string) (any, error) {
	switch module + "." + name {
	case "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_tensor":
		return callFunc(rebuildTensor), nil
	case "torch._utils._rebuild_parameter", "torch._utils._rebuild_parameter_with_state":
		return callFunc(firstArg), nil
	case "torch._tensor._rebuild_from_type_v2":
		return callFunc(rebuildFromType), nil
	}
	if module == "torch" && strings.HasSuffix(name, "Storage") {
		return &storageClass{name: name, dtype: storageDTypes[name]}, nil
	}
	if module == "torch.jit._pickle" {
		// build_intlist, build_tensorlist, restore_type_tag, ...: the
		// first argument is the value.
		return callFunc(firstArg), nil
	}
	return &objectClass{module: module, name: name}, nil
}

type callFunc func(args ...any) (any, error)

func (f callFunc) Call(args ...any) (any, error) { return f(args...) }

func firstArg(args ...any) (any, error) {
	if len(args) == 0 {
		return nil, errors.New("call without arguments")
	}
	return args[0], nil
}

// rebuildTensor is torch._utils._rebuild_tensor_v2(storage, offset, size,
// stride, requires_grad, backward_hooks[, metadata]).
func rebuildTensor(args ...any) (any, error) {
	if len(args) < 4 {
		return nil, fmt.Errorf("_rebuild_tensor_v2: %d arguments", len(args))
	}
	st, ok1 := args[0].(*ptStorage)
	off, ok2 := args[1].(int)
	size, err1 := intTuple(args[2])
	stride, err2 := intTuple(args[3])
	if !ok1 || !ok2 || err1 != nil || err2 != nil {
		return nil, fmt.Errorf("_rebuild_tensor_v2: unexpected arguments (%T, %T, %T, %T)", args[0], args[1], args[2], args[3])
	}
	return &ptTensor{storage: st, offset: off, size: size, stride: stride}, nil
}

// rebuildFromType is torch._tensor._rebuild_from_type_v2(func, type, args,
// state), used for tensor subclasses: the tensor is func(*args).
func rebuildFromType(args ...any) (any, error) {
	if len(args) < 3 {
		return nil, errors.New("_rebuild_from_type_v2: too few arguments")
	}
	f, ok1 := args[0].(types.Callable)
	a, ok2 := args[2].(*types.Tuple)
	if !ok1 || !ok2 {
		return nil, errors.New("_rebuild_from_type_v2: unexpected arguments")
	}
	return f.Call(*a...)
}

func intTuple(v any) ([]int, error) {
	t, ok := v.(*types.Tuple)
	if !ok {
		return nil, fmt.Errorf("%T is not a tuple", v)
	}
	out := make([]int, t.Len())
	for i := range out {
		n, ok := t.Get(i).(int)
		if !ok {
			return nil, fmt.Errorf("tuple element %T is not an int", t.Get(i))
		}
		out[i] = n
	}
	return out, nil
}

// objectClass is a class the pickle names (a TorchScript module type such as
// __torch__.torch.nn.modules.conv.Conv2d, or anything else).
type objectClass struct{ module, name string }

func (c *objectClass) PyNew(args ...any) (any, error) { return &object{class: c, args: args}, nil }
func (c *objectClass) Call(args ...any) (any, error)  { return &object{class: c, args: args}, nil }

// object is an instance of an objectClass; BUILD fills its attributes in
// the order the pickle gives them.
type object struct {
	class *objectClass
	args  []any
	attrs []attribute
}

type attribute struct {
	name  string
	value any
}

func (o *object) set(name string, v any) {
	for i := range o.attrs {
		if o.attrs[i].name == name {
			o.attrs[i].value = v
			return
		}
	}
	o.attrs = append(o.attrs, attribute{name, v})
}

// PySetState implements BUILD: a dict (or an OrderedDict, or a (dict,
// slots) pair) of attributes; any other state is kept as __state__.
func (o *object) PySetState(state any) error {
	switch s := state.(type) {
	case *types.Dict:
		for _, e := range *s {
			o.set(keyString(e.Key), e.Value)
		}
	case *types.OrderedDict:
		for e := s.List.Front(); e != nil; e = e.Next() {
			entry := e.Value.(*types.OrderedDictEntry)
			o.set(keyString(entry.Key), entry.Value)
		}
	case *types.Tuple:
		if s.Len() == 2 {
			for _, part := range *s {
				switch part.(type) {
				case *types.Dict, *types.OrderedDict:
					if err := o.PySetState(part); err != nil {
						return err
					}
				}
			}
			return nil
		}
		o.set("__state__", state)
	default:
		o.set("__state__", state)
	}
	return nil
}

// The opcodes of pickle protocols 0 to 5, by the kind of argument that
// follows them, for scanPickle.
const (
	argNone = iota
	argFixed1
	argFixed2
	argFixed4
	argFixed8
	argLine
	argTwoLines
	argLen1
	argLen4
	argLen8
)

var pickleArgs = func() [256]int8 {
	var a [256]int8
	for i := range a {
		a[i] = -1
	}
	for _, op := range []byte("(.012NRabd}el]ostu)Q\x81\x85\x86\x87\x88\x89\x8f\x90\x91\x92\x93\x94\x97\x98") {
		a[op] = argNone
	}
	for _, op := range []byte("Khq\x80\x82") {
		a[op] = argFixed1
	}
	for _, op := range []byte("M\x83") {
		a[op] = argFixed2
	}
	for _, op := range []byte("Jjr\x84") {
		a[op] = argFixed4
	}
	for _, op := range []byte("G\x95") {
		a[op] = argFixed8
	}
	for _, op := range []byte("ILFSVPgp") {
		a[op] = argLine
	}
	for _, op := range []byte("ic") {
		a[op] = argTwoLines
	}
	for _, op := range []byte("UC\x8c\x8a") {
		a[op] = argLen1
	}
	for _, op := range []byte("TXB\x8b") {
		a[op] = argLen4
	}
	for _, op := range []byte("\x8d\x8e\x96") {
		a[op] = argLen8
	}
	return a
}()

// scanPickle checks that every opcode of b is known and that every
// argument fits in b, up to STOP. The unpickler allocates a buffer of any
// length a corrupt pickle claims before reading it; this check bounds those
// lengths by the input size first.
func scanPickle(b []byte) error {
	i := 0
	for i < len(b) {
		op := b[i]
		i++
		kind := pickleArgs[op]
		n := 0
		switch kind {
		case -1:
			return fmt.Errorf("unknown pickle opcode 0x%02x at byte %d", op, i-1)
		case argNone:
			if op == '.' {
				return nil
			}
		case argFixed1:
			n = 1
		case argFixed2:
			n = 2
		case argFixed4:
			n = 4
		case argFixed8:
			n = 8
			if op == 0x95 { // FRAME: its contents are opcodes, scanned in turn
				if i+8 > len(b) || binary.LittleEndian.Uint64(b[i:]) > uint64(len(b)-i-8) {
					return fmt.Errorf("pickle frame at byte %d exceeds the data", i-1)
				}
			}
		case argLine, argTwoLines:
			lines := 1
			if kind == argTwoLines {
				lines = 2
			}
			for ; lines > 0; lines-- {
				j := bytes.IndexByte(b[i:], '\n')
				if j < 0 {
					return fmt.Errorf("unterminated pickle argument at byte %d", i)
				}
				i += j + 1
			}
			continue
		case argLen1:
			if i+1 > len(b) {
				return errors.New("pickle truncated")
			}
			n = 1 + int(b[i])
		case argLen4:
			if i+4 > len(b) {
				return errors.New("pickle truncated")
			}
			l := binary.LittleEndian.Uint32(b[i:])
			if op == 'T' && int32(l) < 0 {
				return fmt.Errorf("negative pickle length at byte %d", i)
			}
			if uint64(l) > uint64(len(b)-i-4) {
				return fmt.Errorf("pickle argument of %d bytes at byte %d exceeds the data", l, i)
			}
			n = 4 + int(l)
		case argLen8:
			if i+8 > len(b) {
				return errors.New("pickle truncated")
			}
			l := binary.LittleEndian.Uint64(b[i:])
			if l > uint64(len(b)-i-8) {
				return fmt.Errorf("pickle argument of %d bytes at byte %d exceeds the data", l, i)
			}
			n = 8 + int(l)
		}
		if i+n > len(b) {
			return errors.New("pickle truncated")
		}
		i += n
	}
	return errors.New("pickle ends without STOP")
}
