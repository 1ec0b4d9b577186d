package serve

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/subtta/subtta/internal/servicetest"
)

// stores are the state stores under test: a folder, and a real
// redis-server started by the test (skipped, or failed under CI, without
// one).
var stores = []struct {
	name string
	open func(t *testing.T) stateStore
}{
	{"dir", func(t *testing.T) stateStore {
		s, err := openDirStore(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
	{"redis", func(t *testing.T) stateStore {
		url, _ := servicetest.Redis(t)
		s, err := openRedisStore(context.Background(), url, slog.Default())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}},
}

func saved(id string, st stamp, images int64) *savedStream {
	return &savedStream{streamHead: streamHead{ID: id, Stamp: st, Stats: streamStats{Images: images}}, State: []byte{1, 2, 3},
		Answers: []savedAnswer{{Key: "k", Logits: []float64{0.5, -1}, Pred: 0}}}
}

// A save succeeds only on the stamp the store holds (none for a new
// stream), and a refused save changes nothing.
func TestStoreCompareAndSwap(t *testing.T) {
	for _, tc := range stores {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := tc.open(t)
			if sv, err := s.Load(ctx, "cam"); sv != nil || err != nil {
				t.Fatalf("a new stream loads %v, %v; want nothing", sv, err)
			}
			g1 := stamp{Birth: 7, Generation: 1}
			g2 := stamp{Birth: 7, Generation: 2}
			other := stamp{Birth: 8, Generation: 1}
			steps := []struct {
				what string
				sv   *savedStream
				prev *stamp
				err  error
			}{
				{"first save of a new stream", saved("cam", g1, 2), nil, nil},
				{"a second first save", saved("cam", other, 9), nil, errStale},
				{"a save on another stamp", saved("cam", g2, 9), &other, errStale},
				{"a save on a generation gone", saved("cam", g2, 9), &stamp{Birth: 7}, errStale},
				{"the next save", saved("cam", g2, 4), &g1, nil},
				{"the same save again", saved("cam", stamp{Birth: 7, Generation: 3}, 9), &g1, errStale},
			}
			for _, st := range steps {
				if err := s.Save(ctx, st.sv, st.prev); !errors.Is(err, st.err) || (err == nil) != (st.err == nil) {
					t.Fatalf("%s: %v; want %v", st.what, err, st.err)
				}
			}
			sv, err := s.Load(ctx, "cam")
			if err != nil || sv == nil || sv.Stamp != g2 || sv.Stats.Images != 4 || len(sv.Answers) != 1 || sv.Answers[0].Logits[1] != -1 {
				t.Fatalf("after the saves: %+v, %v; want generation 2 with 4 images", sv, err)
			}
			notOurs := func(h *streamHead) bool { return h.Owner == "someone else" }
			if deleted, err := s.Delete(ctx, "cam", notOurs); err != nil || deleted {
				t.Fatalf("a Delete of another owner's stream: %v, %v", deleted, err)
			}
			if sv, err := s.Load(ctx, "cam"); sv == nil || err != nil {
				t.Fatalf("after a Delete of another owner's stream: %v, %v; want it kept", sv, err)
			}
			if deleted, err := s.Delete(ctx, "cam", func(*streamHead) bool { return true }); err != nil || !deleted {
				t.Fatalf("Delete: %v, %v", deleted, err)
			}
			if deleted, err := s.Delete(ctx, "cam", notOurs); err != nil || deleted {
				t.Errorf("deleting a deleted stream: %v, %v", deleted, err)
			}
			if err := s.Save(ctx, saved("cam", g2, 1), &g1); !errors.Is(err, errStale) {
				t.Errorf("a save over a deleted stream: %v; want errStale", err)
			}
			// A tombstone, with the stamp of the state it deleted; a new
			// stream may be saved over it.
			if sv, err := s.Load(ctx, "cam"); err != nil || sv == nil || !sv.Deleted || sv.Stamp != g2 {
				t.Errorf("after Delete: %+v, %v; want a tombstone of generation 2", sv, err)
			}
			if err := s.Save(ctx, saved("cam", stamp{Birth: 9, Generation: 1}, 1), nil); err != nil {
				t.Errorf("a new stream's save over a tombstone: %v", err)
			}
		})
	}
}

// Writers that load, add one and save, starting over when refused, lose
// no increment: the store's compare-and-swap is atomic.
func TestStoreConcurrentSaves(t *testing.T) {
	const writers, each = 4, 25
	for _, tc := range stores {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := tc.open(t)
			var wg sync.WaitGroup
			var mu sync.Mutex
			refused := 0
			for range writers {
				wg.Go(func() {
					for done := 0; done < each; {
						sv, err := s.Load(ctx, "n")
						if err != nil {
							t.Error(err)
							return
						}
						var prev *stamp
						next := saved("n", stamp{Birth: 1, Generation: 1}, 1)
						if sv != nil {
							prev = &sv.Stamp
							next = saved("n", stamp{Birth: 1, Generation: sv.Stamp.Generation + 1}, sv.Stats.Images+1)
						}
						switch err := s.Save(ctx, next, prev); {
						case err == nil:
							done++
						case errors.Is(err, errStale):
							mu.Lock()
							refused++
							mu.Unlock()
						default:
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			sv, err := s.Load(ctx, "n")
			if err != nil || sv == nil || sv.Stats.Images != writers*each || sv.Stamp.Generation != writers*each {
				t.Fatalf("after %d increments: %+v, %v", writers*each, sv, err)
			}
			t.Logf("%d increments, %d saves refused and tried again", writers*each, refused)
		})
	}
}

// A store named by a URL that is not a folder or a Redis database, or a
// Redis server that does not answer, is refused by New with a message
// naming it.
func TestStoreConfigErrors(t *testing.T) {
	dead := servicetest.FreeAddr(t)
	for _, tc := range []struct {
		dir, store, want string
	}{
		{"", "s3://bucket/x", `state store "s3://bucket/x": want a folder, or redis://host:port/db`},
		{"", "redis://" + dead + "/0", "state store redis://" + dead + "/0: dial tcp"},
		{"", "redis://127.0.0.1:6379/x", "state store"},
		{"a", "b", `Config.StateDir "a" and Config.StateStore "b": give one`},
	} {
		cfg := testConfig(t)
		cfg.StateDir, cfg.StateStore = tc.dir, tc.store
		_, err := New(cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("StateDir %q, StateStore %q: %v; want %q", tc.dir, tc.store, err, tc.want)
		}
	}
}

// DELETE of a damaged state keeps it for the operator: a state set aside
// (by a Load) stays set aside, and one whose head is damaged, not yet set
// aside, is set aside rather than written over (Delete reads the head
// alone: a body's damage it does not see). The tombstone lets the stream
// start afresh.
func TestStoreDeleteKeepsDamaged(t *testing.T) {
	for _, st := range stores {
		for _, setAside := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/set aside by a load %v", st.name, setAside), func(t *testing.T) {
				ctx := context.Background()
				s := st.open(t)
				g1 := stamp{Birth: 4, Generation: 1}
				if err := s.Save(ctx, saved("cam", g1, 2), nil); err != nil {
					t.Fatal(err)
				}
				damaged, headEnd, err := encodeState(saved("cam", g1, 2))
				if err != nil {
					t.Fatal(err)
				}
				if setAside {
					damaged[len(damaged)-10] ^= 0x01 // in the body: Load finds it
				} else {
					damaged[len(stateMagic)+12] ^= 0x55 // in the head: Delete finds it
				}
				switch s := s.(type) {
				case *dirStore:
					err = os.WriteFile(s.path("cam"), damaged, 0o644)
				case *redisStore:
					err = s.c.HSet(ctx, s.key("cam"), "state", damaged, "head", damaged[:headEnd]).Err()
				}
				if err != nil {
					t.Fatal(err)
				}
				if setAside {
					if _, err := s.Load(ctx, "cam"); !errors.Is(err, errBadState) {
						t.Fatalf("Load: %v; want errBadState", err)
					}
				}
				if deleted, err := s.Delete(ctx, "cam", func(*streamHead) bool { return true }); err != nil || !deleted {
					t.Fatalf("Delete: %v, %v", deleted, err)
				}
				var aside []byte
				switch s := s.(type) {
				case *dirStore:
					aside, err = os.ReadFile(s.asidePath("cam"))
				case *redisStore:
					aside, err = s.c.HGet(ctx, s.asideKey("cam"), "state").Bytes()
				}
				if err != nil || !bytes.Equal(aside, damaged) {
					t.Fatalf("the copy set aside after Delete: %d bytes, %v; want the damaged state's %d", len(aside), err, len(damaged))
				}
				if sv, err := s.Load(ctx, "cam"); err != nil || sv == nil || !sv.Deleted {
					t.Fatalf("Load after Delete: %+v, %v; want the tombstone", sv, err)
				}
				if err := s.Save(ctx, saved("cam", stamp{Birth: 5, Generation: 1}, 1), nil); err != nil {
					t.Fatalf("a new stream's first save after Delete: %v", err)
				}
			})
		}
	}
}
