package serve

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"time"
)

// A saved stream's bytes, the same in every store (a folder's ID.stream, a
// Redis hash's state field), are in this order:
//
//	stateMagic                  "subtta-serve-stream-v4\n"
//	the head's length           4 bytes, big-endian
//	the head's checksum         4 bytes, big-endian: CRC-32C of the head
//	the head                    streamHead, gob-encoded
//	the body                    stateBody, gob-encoded
//	the checksum                4 bytes, big-endian: CRC-32C of every byte before it
//
// The head is what DELETE's owner check, a save's compare-and-swap, the
// check of a stream's stamp before a step and GET /v1/streams/{id} of a
// stream in memory need: it is read alone, without reading or decoding the
// body (the Method's state and the saved answers, megabytes on a large
// model), and checked by its own checksum; reading the whole checks the
// last checksum too, so that no byte of a damaged state is adapted on (and
// GET of a stream not in memory reads it whole, to report a damaged state
// as a request would). A state whose checksum fails, or whose numbers are
// not finite, is damaged (errBadState).
//
// Bytes that start with v3Magic are of the format before checksums (no
// checksum fields: magic, length, head, body): read, and written in the
// current format at the stream's next save. Bytes that start with neither
// are of the format before that, legacyFormat (one gob-encoded
// legacyStream): read whole, and written in the current format likewise.

// stateFormat names the format; stateMagic starts its bytes.
const stateFormat = "subtta-serve-stream-v4"

const stateMagic = stateFormat + "\n"

// v3Magic starts the bytes of the format before checksums.
const v3Magic = "subtta-serve-stream-v3\n"

// legacyFormat is the earliest format's name, in its Format field.
const legacyFormat = "subtta-serve-stream-v2"

// maxHeadLen bounds the head's length as written at the start of a state,
// so that damaged bytes are refused rather than read as a huge length.
const maxHeadLen = 1 << 26

// prefixLen is the length of stateMagic, the head's length and its
// checksum; v3PrefixLen that of v3Magic and the head's length.
const (
	prefixLen   = len(stateMagic) + 8
	v3PrefixLen = len(v3Magic) + 4
)

// crcLen is the length of a checksum.
const crcLen = 4

// castagnoli is CRC-32C's table (hardware-accelerated on amd64 and arm64).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// stateBody is what follows a saved stream's head.
type stateBody struct {
	State   []byte
	Answers []savedAnswer
}

// legacyStream is a saved stream in the earlier format, legacyFormat: gob
// matches its fields by name, so it keeps the names that format had.
type legacyStream struct {
	Format       string
	ID           string
	ModelVersion string
	Dataset      string
	Method       string
	Labels       []string
	Templates    []string
	Stats        streamStats
	State        []byte
	Saved        time.Time
	Stamp        stamp
	Owner        string
	Answers      []savedAnswer
}

// encodeState returns a saved stream's bytes, and how many of them its
// prefix and head take.
func encodeState(sv *savedStream) (b []byte, headEnd int, err error) {
	var buf bytes.Buffer
	buf.WriteString(stateMagic)
	buf.Write(make([]byte, 8)) // the head's length and checksum, set below
	if err := gob.NewEncoder(&buf).Encode(&sv.streamHead); err != nil {
		return nil, 0, err
	}
	headEnd = buf.Len()
	if headEnd-prefixLen > maxHeadLen {
		return nil, 0, fmt.Errorf("serve: stream %s: the state's head takes %d bytes, beyond %d", sv.ID, headEnd-prefixLen, maxHeadLen)
	}
	if err := gob.NewEncoder(&buf).Encode(stateBody{State: sv.State, Answers: sv.Answers}); err != nil {
		return nil, 0, err
	}
	buf.Write(make([]byte, crcLen))
	b = buf.Bytes()
	binary.BigEndian.PutUint32(b[len(stateMagic):], uint32(headEnd-prefixLen))
	binary.BigEndian.PutUint32(b[len(stateMagic)+4:], crc32.Checksum(b[prefixLen:headEnd], castagnoli))
	end := len(b) - crcLen
	binary.BigEndian.PutUint32(b[end:], crc32.Checksum(b[:end], castagnoli))
	return b, headEnd, nil
}

// decodeState decodes the whole of a saved stream's bytes b; id is the
// stream's and where names the bytes in errors.
func decodeState(b []byte, id, where string) (*savedStream, error) {
	return decodeFrom(bytes.NewReader(b), id, where, true)
}

// readHead reads a saved stream's head from r, which starts at its first
// byte, reading no further than the head's end (an earlier format's bytes
// are read whole).
func readHead(r io.Reader, id, where string) (*streamHead, error) {
	sv, err := decodeFrom(r, id, where, false)
	if err != nil {
		return nil, err
	}
	return &sv.streamHead, nil
}

// decodeFrom reads a saved stream from r: its head, and its body too when
// body is set (always in the earlier format). Bytes that are not a saved
// stream of id give an error that is errBadState.
func decodeFrom(r io.Reader, id, where string, body bool) (*savedStream, error) {
	sv, err := readStateBytes(r, id, body)
	var be *badStateError
	switch {
	case errors.As(err, &be):
		be.where = where
		return nil, be
	case err != nil:
		return nil, fmt.Errorf("serve: reading %s: %w", where, err)
	}
	return sv, nil
}

// errBadState is (errors.Is) the error of bytes that are not a saved
// stream of id: damaged (a checksum that fails, bytes cut short or
// changed, a number that is not finite), or not of the stream expected.
// Such bytes are proven unusable; an I/O error proves nothing.
var errBadState = errors.New("not a saved stream")

// badStateError says why bytes are not a saved stream, and where they are.
type badStateError struct {
	where string
	aside string // where the bytes were set aside, if they were
	err   error
}

func (e *badStateError) Error() string {
	if e.aside != "" {
		return fmt.Sprintf("serve: %s is not a saved stream of this version (%v); set aside as %s", e.where, e.err, e.aside)
	}
	return fmt.Sprintf("serve: %s is not a saved stream of this version (%v)", e.where, e.err)
}

// errSetAside is why a stream whose damaged state was set aside has none.
var errSetAside = errors.New("its state was found damaged and set aside; DELETE the stream to start it afresh")

// reason is why, without where: what a client may be told.
func (e *badStateError) reason() string { return e.err.Error() }

func (e *badStateError) Is(target error) bool { return target == errBadState }

func (e *badStateError) Unwrap() error { return e.err }

// bad marks err as saying why bytes are not a saved stream.
func bad(err error) error { return &badStateError{err: err} }

// wrongStream is why the state in the place of stream want is not its own:
// it is the saved state of stream got (a file copied or renamed by hand, a
// key renamed). Adapting it as want's would mix two streams.
func wrongStream(got, want string) error {
	return fmt.Errorf("it is the state of stream %q, not of %q: copied or renamed from the other stream's", got, want)
}

// errTruncated says that a saved stream's bytes end within its head.
var errTruncated = errors.New("the head ends beyond the bytes")

// readStateBytes is decodeFrom: its errors are the reader's, or bad.
func readStateBytes(r io.Reader, id string, body bool) (*savedStream, error) {
	prefix := make([]byte, prefixLen)
	n, err := io.ReadFull(r, prefix[:v3PrefixLen])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, err
	}
	magic := string(prefix[:min(n, len(stateMagic))])
	v4 := magic == stateMagic
	if n < v3PrefixLen || !v4 && magic != v3Magic {
		rest, err := io.ReadAll(r)
		if err != nil {
			return nil, err
		}
		sv, err := decodeLegacy(append(prefix[:n], rest...), id)
		if err != nil {
			return nil, bad(err)
		}
		return sv, checkFinite(sv)
	}
	var headSum uint32
	if v4 {
		if _, err := io.ReadFull(r, prefix[v3PrefixLen:]); errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, bad(errTruncated)
		} else if err != nil {
			return nil, err
		}
		headSum = binary.BigEndian.Uint32(prefix[v3PrefixLen:])
	} else {
		prefix = prefix[:v3PrefixLen]
	}
	size := binary.BigEndian.Uint32(prefix[len(stateMagic):])
	if size > maxHeadLen {
		return nil, bad(fmt.Errorf("a head of %d bytes, beyond %d", size, maxHeadLen))
	}
	head := make([]byte, size)
	if _, err := io.ReadFull(r, head); errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return nil, bad(errTruncated)
	} else if err != nil {
		return nil, err
	}
	if v4 && crc32.Checksum(head, castagnoli) != headSum {
		return nil, bad(errors.New("the head's checksum does not match: the head is damaged"))
	}
	var sv savedStream
	if err := gob.NewDecoder(bytes.NewReader(head)).Decode(&sv.streamHead); err != nil {
		return nil, bad(fmt.Errorf("head: %w", err))
	}
	if sv.ID != id {
		return nil, bad(wrongStream(sv.ID, id))
	}
	if body {
		rest, err := io.ReadAll(r)
		if err != nil {
			return nil, err
		}
		if v4 {
			if len(rest) < crcLen {
				return nil, bad(errors.New("the bytes end before the checksum"))
			}
			sum := crc32.Update(crc32.Update(0, castagnoli, prefix), castagnoli, head)
			end := len(rest) - crcLen
			if crc32.Update(sum, castagnoli, rest[:end]) != binary.BigEndian.Uint32(rest[end:]) {
				return nil, bad(errors.New("the checksum does not match: the state is damaged"))
			}
			rest = rest[:end]
		}
		var b stateBody
		if err := gob.NewDecoder(bytes.NewReader(rest)).Decode(&b); err != nil {
			return nil, bad(fmt.Errorf("body: %w", err))
		}
		sv.State, sv.Answers = b.State, b.Answers
	}
	return &sv, checkFinite(&sv)
}

// checkFinite refuses a saved stream holding a number that is not finite
// in its counters or saved answers (the Method's own numbers are checked
// once restored: see install).
func checkFinite(sv *savedStream) error {
	for name, v := range sv.Stats.LastLoss {
		if !isFinite(v) {
			return bad(fmt.Errorf("the last loss %s is %v", name, v))
		}
	}
	for i, v := range sv.Stats.Cosines {
		if !isFinite(v) {
			return bad(fmt.Errorf("principal-angle cosine %d is %v", i, v))
		}
	}
	for i, a := range sv.Answers {
		for k, v := range a.Logits {
			if !isFinite(v) {
				return bad(fmt.Errorf("saved answer %d: logit %d is %v", i, k, v))
			}
		}
	}
	return nil
}

func isFinite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// decodeLegacy decodes a saved stream of the earlier format.
func decodeLegacy(b []byte, id string) (*savedStream, error) {
	var old legacyStream
	if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&old); err != nil {
		return nil, err
	}
	switch {
	case old.Format != legacyFormat:
		return nil, fmt.Errorf("format %q, not %q", old.Format, legacyFormat)
	case old.ID != id:
		return nil, wrongStream(old.ID, id)
	}
	return &savedStream{
		streamHead: streamHead{ID: old.ID, ModelVersion: old.ModelVersion, Dataset: old.Dataset, Method: old.Method,
			Labels: old.Labels, Templates: old.Templates, Stats: old.Stats, Saved: old.Saved, Stamp: old.Stamp, Owner: old.Owner},
		State: old.State, Answers: old.Answers,
	}, nil
}
