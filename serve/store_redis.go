package serve

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisStore keeps each stream's state in a Redis hash at the key
// subtta:stream:ID, with three fields: stamp ("birth:generation", what a
// save compares), state (the saved stream, as dirStore writes it to a
// file) and head (the start of state up to its head's end, what Head
// reads, so that GET and DELETE need not fetch the whole state). A save is
// a compare-and-swap by Redis's optimistic transaction: WATCH the key,
// read its stamp, and write the three fields in MULTI/EXEC only if the
// stamp is the one expected; EXEC fails if any client changed the key
// since the WATCH.
type redisStore struct {
	c   *redis.Client
	url string // without a password, for messages
}

// redisKeyPrefix begins every key the store writes.
const redisKeyPrefix = "subtta:stream:"

// redisTimeout bounds one operation on the Redis server.
const redisTimeout = 10 * time.Second

// openRedisStore connects to redis://[user:password@]host:port/db (or
// rediss:// for TLS) and checks that the server answers.
func openRedisStore(ctx context.Context, rawURL string, logger *slog.Logger) (*redisStore, error) {
	shown := rawURL
	if u, err := url.Parse(rawURL); err == nil {
		shown = u.Redacted()
	}
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("serve: state store %s: %w", quote(shown, maxEcho), err)
	}
	opt.DisableIdentity = true // CLIENT SETINFO, unknown before Redis 7.2
	// go-redis's logger is one for the process: the last server opened
	// gets its lines.
	redis.SetLogger(redisLogger{log: logger})
	c := redis.NewClient(opt)
	pctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("serve: state store %s: %w", shown, err)
	}
	return &redisStore{c: c, url: shown}, nil
}

func (r *redisStore) key(id string) string { return redisKeyPrefix + id }

func (r *redisStore) Where(id string) string { return r.url + " key " + r.key(id) }

func (r *redisStore) Close() error { return r.c.Close() }

// asideKey is where a damaged state is set aside.
func (r *redisStore) asideKey(id string) string { return redisAsidePrefix + id }

// redisAsidePrefix begins the keys of damaged states set aside.
const redisAsidePrefix = "subtta:damaged:"

// tombstoneStamp is the stamp field of a tombstone: no save's stamp, so
// that a server of the earlier version refuses to read it as one.
const tombstoneStamp = "deleted"

func (r *redisStore) Load(ctx context.Context, id string) (*savedStream, error) {
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	b, sv, err := r.read(ctx, id)
	if errors.Is(err, errBadState) && b != nil {
		return nil, r.setAside(ctx, id, b, err)
	}
	return sv, err
}

func (r *redisStore) Peek(ctx context.Context, id string) (*savedStream, error) {
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	_, sv, err := r.read(ctx, id)
	return sv, err
}

// read reads the stream's state field whole and decodes it, returning its
// bytes too (nil where there is no key).
func (r *redisStore) read(ctx context.Context, id string) ([]byte, *savedStream, error) {
	b, err := r.c.HGet(ctx, r.key(id), "state").Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil, r.asideErr(ctx, r.c, id)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("serve: loading %s: %w", r.Where(id), err)
	}
	sv, err := decodeState(b, id, r.Where(id))
	return b, sv, err
}

// setAside renames the stream's key, whose state was found damaged as b
// (err says why), to asideKey, if it still holds b.
func (r *redisStore) setAside(ctx context.Context, id string, b []byte, err error) error {
	var be *badStateError
	errors.As(err, &be)
	key := r.key(id)
	werr := r.c.Watch(ctx, func(tx *redis.Tx) error {
		now, err := tx.HGet(ctx, key, "state").Bytes()
		if err != nil || !bytes.Equal(now, b) {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Rename(ctx, key, r.asideKey(id))
			return nil
		})
		return err
	}, key)
	if werr != nil && !errors.Is(werr, redis.Nil) {
		return errors.Join(err, fmt.Errorf("serve: setting %s aside: %w", r.Where(id), werr))
	}
	be.aside = r.url + " key " + r.asideKey(id)
	return be
}

// asideErr is Load's and Head's error for a stream without a key:
// errBadState when a damaged state was set aside, else nil.
func (r *redisStore) asideErr(ctx context.Context, c redis.Cmdable, id string) error {
	n, err := c.Exists(ctx, r.asideKey(id)).Result()
	switch {
	case err != nil:
		return fmt.Errorf("serve: loading %s: %w", r.Where(id), err)
	case n == 0:
		return nil
	}
	return &badStateError{where: r.Where(id), aside: r.url + " key " + r.asideKey(id), err: errSetAside}
}

// Head reads the stamp and head fields, and decodes the head. Where the
// head is missing or carries another stamp than the stamp field (the key
// was saved in the earlier format, or by an earlier version since), it
// reads the whole state instead.
func (r *redisStore) Head(ctx context.Context, id string) (*streamHead, error) {
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	return r.head(ctx, r.c, id)
}

// head is Head on c: the client, or a transaction.
func (r *redisStore) head(ctx context.Context, c redis.Cmdable, id string) (*streamHead, error) {
	key := r.key(id)
	v, err := c.HMGet(ctx, key, "stamp", "head").Result()
	if err != nil {
		return nil, fmt.Errorf("serve: loading %s: %w", r.Where(id), err)
	}
	st, _ := v[0].(string)
	if b, ok := v[1].(string); ok {
		h, err := readHead(strings.NewReader(b), id, r.Where(id))
		if err != nil {
			return nil, err
		}
		if formatStamp(h.Stamp) == st || h.Deleted && st == tombstoneStamp {
			return h, nil
		}
	}
	b, err := c.HGet(ctx, key, "state").Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, r.asideErr(ctx, c, id)
	}
	if err != nil {
		return nil, fmt.Errorf("serve: loading %s: %w", r.Where(id), err)
	}
	sv, err := decodeState(b, id, r.Where(id))
	if err != nil {
		return nil, err
	}
	return &sv.streamHead, nil
}

func (r *redisStore) Save(ctx context.Context, sv *savedStream, prev *stamp) error {
	b, headEnd, err := encodeState(sv)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	key := r.key(sv.ID)
	err = r.c.Watch(ctx, func(tx *redis.Tx) error {
		var cur *stamp
		s, err := tx.HGet(ctx, key, "stamp").Result()
		switch {
		case errors.Is(err, redis.Nil), err == nil && s == tombstoneStamp:
		case err != nil:
			return err
		default:
			st, err := parseStamp(s)
			if err != nil {
				return fmt.Errorf("%s: stamp %q: %w", r.Where(sv.ID), s, err)
			}
			cur = &st
		}
		if !sameStamp(cur, prev) {
			return errStale
		}
		st := formatStamp(sv.Stamp)
		if sv.Deleted {
			st = tombstoneStamp
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HSet(ctx, key, "stamp", st, "head", b[:headEnd], "state", b)
			return nil
		})
		return err
	}, key)
	if errors.Is(err, redis.TxFailedErr) {
		return errStale // the key changed between WATCH and EXEC
	}
	if err != nil && !errors.Is(err, errStale) {
		return fmt.Errorf("serve: saving %s: %w", r.Where(sv.ID), err)
	}
	return err
}

// Delete writes the stream's tombstone over its key in an optimistic
// transaction on the head read and checked (tried again while other
// clients change the key in between). A damaged state stays for the
// operator, as dirStore.Delete keeps it: one set aside (subtta:damaged:ID)
// is kept, and one whose head is damaged, not yet set aside, is renamed
// there in the same transaction, before the tombstone is written.
func (r *redisStore) Delete(ctx context.Context, id string, allow func(*streamHead) bool) (deleted bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	key, aside := r.key(id), r.asideKey(id)
	for {
		deleted = false
		err := r.c.Watch(ctx, func(tx *redis.Tx) error {
			h, err := r.head(ctx, tx, id)
			if err != nil && !errors.Is(err, errBadState) {
				return err
			}
			var be *badStateError
			var write func(p redis.Pipeliner)
			// tomb writes the tombstone of the state whose head is h (nil:
			// unknown, damaged), setting the state aside first if
			// setAside.
			tomb := func(h *streamHead, setAside bool) error {
				var was stamp
				owner := ""
				if h != nil {
					was, owner = h.Stamp, h.Owner
				}
				b, headEnd, err := encodeState(tombstone(id, was, owner))
				if err != nil {
					return err
				}
				write = func(p redis.Pipeliner) {
					if setAside {
						p.Rename(ctx, key, aside)
					}
					p.HSet(ctx, key, "stamp", tombstoneStamp, "head", b[:headEnd], "state", b)
				}
				return nil
			}
			switch {
			case errors.As(err, &be) && be.aside != "":
				// Only a damaged state set aside remains: its head may
				// still say whose it is.
				h = nil
				if b, err := tx.HGet(ctx, aside, "head").Bytes(); err == nil {
					h, _ = readHead(bytes.NewReader(b), id, aside)
				}
				if !allow(h) {
					return nil
				}
				if err := tomb(h, false); err != nil {
					return err
				}
			case err != nil: // the state is damaged
				if !allow(nil) {
					return nil
				}
				if err := tomb(nil, true); err != nil {
					return err
				}
			case h == nil || h.Deleted || !allow(h):
				return nil
			default:
				if err := tomb(h, false); err != nil {
					return err
				}
			}
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				write(p)
				return nil
			})
			deleted = err == nil
			return err
		}, key, aside)
		if errors.Is(err, redis.TxFailedErr) && ctx.Err() == nil {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("serve: deleting %s: %w", r.Where(id), err)
		}
		return deleted, nil
	}
}

func formatStamp(s stamp) string {
	return strconv.FormatUint(s.Birth, 10) + ":" + strconv.FormatUint(s.Generation, 10)
}

func parseStamp(s string) (stamp, error) {
	b, g, ok := strings.Cut(s, ":")
	if !ok {
		return stamp{}, errors.New("want birth:generation")
	}
	birth, err := strconv.ParseUint(b, 10, 64)
	if err != nil {
		return stamp{}, err
	}
	gen, err := strconv.ParseUint(g, 10, 64)
	if err != nil {
		return stamp{}, err
	}
	return stamp{Birth: birth, Generation: gen}, nil
}
