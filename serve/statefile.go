package serve

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"time"
)

// A saved stream's bytes, the same in every store (a folder's ID.stream, a
// Redis hash's state field), are in this order:
//
//	stateMagic                  "subtta-serve-stream-v3\n"
//	the head's length           4 bytes, big-endian
//	the head                    streamHead, gob-encoded
//	the body                    stateBody, gob-encoded
//
// The head is what GET /v1/streams/{id}, DELETE's owner check and a save's
// compare-and-swap need: it is read alone, without reading or decoding the
// body (the Method's state and the saved answers, megabytes on a large
// model). Bytes that do not start with stateMagic are of the earlier format,
// legacyFormat (one gob-encoded legacyStream): read whole, and written in
// this format at the stream's next save.

// stateFormat names the format; stateMagic starts its bytes.
const stateFormat = "subtta-serve-stream-v3"

const stateMagic = stateFormat + "\n"

// legacyFormat is the earlier format's name, in its Format field.
const legacyFormat = "subtta-serve-stream-v2"

// maxHeadLen bounds the head's length as written at the start of a state,
// so that damaged bytes are refused rather than read as a huge length.
const maxHeadLen = 1 << 26

// prefixLen is the length of stateMagic and the head's length.
const prefixLen = len(stateMagic) + 4

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
	buf.Write(make([]byte, 4)) // the head's length, set below
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
	b = buf.Bytes()
	binary.BigEndian.PutUint32(b[len(stateMagic):prefixLen], uint32(headEnd-prefixLen))
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
// stream of this version, or not of the stream expected.
var errBadState = errors.New("not a saved stream")

// badStateError says why bytes are not a saved stream, and where they are.
type badStateError struct {
	where string
	err   error
}

func (e *badStateError) Error() string {
	return fmt.Sprintf("serve: %s is not a saved stream of this version (%v)", e.where, e.err)
}

func (e *badStateError) Is(target error) bool { return target == errBadState }

func (e *badStateError) Unwrap() error { return e.err }

// bad marks err as saying why bytes are not a saved stream.
func bad(err error) error { return &badStateError{err: err} }

// errTruncated says that a saved stream's bytes end within its head.
var errTruncated = errors.New("the head ends beyond the bytes")

// readStateBytes is decodeFrom: its errors are the reader's, or bad.
func readStateBytes(r io.Reader, id string, body bool) (*savedStream, error) {
	prefix := make([]byte, prefixLen)
	n, err := io.ReadFull(r, prefix)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if n < prefixLen || string(prefix[:len(stateMagic)]) != stateMagic {
		rest, err := io.ReadAll(r)
		if err != nil {
			return nil, err
		}
		sv, err := decodeLegacy(append(prefix[:n], rest...), id)
		if err != nil {
			return nil, bad(err)
		}
		return sv, nil
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
	var sv savedStream
	if err := gob.NewDecoder(bytes.NewReader(head)).Decode(&sv.streamHead); err != nil {
		return nil, bad(fmt.Errorf("head: %w", err))
	}
	if sv.ID != id {
		return nil, bad(fmt.Errorf("stream %q", sv.ID))
	}
	if body {
		var b stateBody
		if err := gob.NewDecoder(r).Decode(&b); err != nil {
			return nil, bad(fmt.Errorf("body: %w", err))
		}
		sv.State, sv.Answers = b.State, b.Answers
	}
	return &sv, nil
}

// decodeLegacy decodes a saved stream of the earlier format.
func decodeLegacy(b []byte, id string) (*savedStream, error) {
	var old legacyStream
	if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&old); err != nil {
		return nil, err
	}
	if old.Format != legacyFormat || old.ID != id {
		return nil, fmt.Errorf("format %q, stream %q", old.Format, old.ID)
	}
	return &savedStream{
		streamHead: streamHead{ID: old.ID, ModelVersion: old.ModelVersion, Dataset: old.Dataset, Method: old.Method,
			Labels: old.Labels, Templates: old.Templates, Stats: old.Stats, Saved: old.Saved, Stamp: old.Stamp, Owner: old.Owner},
		State: old.State, Answers: old.Answers,
	}, nil
}
