//go:build unix

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/internal/servicetest"
)

// faultClient sends one image at a time to streams, each request with an
// Idempotency-Key of its own, sent again with the same key after a
// connection failure, 502, 503 or 504, and counts each stream's answers
// marked adapted.
type faultClient struct {
	t       *testing.T
	imgs    [][]byte
	next    int
	adapted map[string]int
	frozen  int // answers marked adapted: false
}

func newFaultClient(t *testing.T) *faultClient {
	imgs, err := builtin.JPEGs(32)
	if err != nil {
		t.Fatal(err)
	}
	return &faultClient{t: t, imgs: imgs, adapted: map[string]int{}}
}

// post sends one request once: its status and body (status 0: no answer).
func (c *faultClient) post(base, id, key string) (int, []byte, http.Header) {
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/classify?stream="+id, bytes.NewReader(c.imgs[c.next%len(c.imgs)]))
	req.Header.Set("Content-Type", "image/jpeg")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error()), nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

// count records an answer of status 200.
func (c *faultClient) count(id string, body []byte) {
	c.t.Helper()
	var a struct {
		Stream struct {
			Adapted bool `json:"adapted"`
		} `json:"stream"`
	}
	if err := json.Unmarshal(body, &a); err != nil {
		c.t.Fatalf("stream %s: %v: %s", id, err, body)
	}
	if a.Stream.Adapted {
		c.adapted[id]++
	} else {
		c.frozen++
	}
}

// send sends a new image to the stream at base() until it is answered
// (within a minute), and returns the answer's status and body: 200, or an
// error other than those sent again.
func (c *faultClient) send(base func() string, id string) (int, []byte) {
	c.t.Helper()
	c.next++
	key := fmt.Sprintf("%s-%d", id, c.next)
	deadline := time.Now().Add(time.Minute)
	for {
		code, body, _ := c.post(base(), id, key)
		switch code {
		case http.StatusOK:
			c.count(id, body)
			return code, body
		case 0, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			if time.Now().After(deadline) {
				c.t.Fatalf("stream %s: not answered within a minute: %d %s", id, code, body)
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		return code, body
	}
}

// round sends n images to each stream, each at its replica, and wants
// them answered.
func (c *faultClient) round(n int, ids []string, at func(id string) string) {
	c.t.Helper()
	for range n {
		for _, id := range ids {
			if code, body := c.send(func() string { return at(id) }, id); code != http.StatusOK {
				c.t.Fatalf("stream %s at %s: %d %s", id, at(id), code, body)
			}
		}
	}
}

// check wants every stream's saved image count, read through base, to be
// its answers marked adapted.
func (c *faultClient) check(what string, base func(id string) string, ids []string) {
	c.t.Helper()
	for _, id := range ids {
		st, code := getStream(c.t, base(id), id)
		if code != http.StatusOK || st.Images != int64(c.adapted[id]) {
			c.t.Errorf("%s: stream %s: %d images (status %d); answered %d as adapted", what, id, st.Images, code, c.adapted[id])
		}
	}
}

// metric is a server's value of one metric without labels ("" if none).
func metric(base, name string) string {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

// TestServeFaults runs subtta serve processes through the faults of
// docs/serving.md's Faults section, and wants every stream's saved image
// count to equal its answers marked adapted after each.
//
// Redis: two replicas on one redis-server (append-only, fsync always),
// one refusing (503) and one answering frozen while Redis is down; one
// stream sent to both in turn. Redis is killed (SIGKILL) and started
// again on its data; a replica is killed (SIGKILL) and started again;
// Redis is started again without its data, and the streams are refused
// (500) until deleted.
//
// Folder: a replica on a 1 MiB tmpfs (mounted here; it needs root)
// filled up, then freed: the unsaved streams are saved in the background
// and are not evicted meanwhile; SIGTERM while full saves them once space
// is freed, and exits non-zero naming the stream it could not save when
// space never comes back.
func TestServeFaults(t *testing.T) {
	bin := buildSubtta(t)
	t.Run("redis", func(t *testing.T) { redisFaults(t, bin) })
	t.Run("tmpfs", func(t *testing.T) { folderFaults(t, bin) })
}

func redisFaults(t *testing.T, bin string) {
	dataDir, emptyDir := t.TempDir(), t.TempDir()
	raddr := servicetest.FreeAddr(t)
	redis := servicetest.RedisAt(t, raddr, dataDir, "always")
	addrs := []string{servicetest.FreeAddr(t), servicetest.FreeAddr(t)}
	replica := func(i int) *servicetest.Process {
		args := []string{"serve", "--addr", addrs[i], "--batch-size", "1", "--max-wait", "10ms", "--timeout", "20s"}
		if i == 1 {
			args = append(args, "--degraded", "frozen")
		}
		// The store from the environment, as for a URL with a password.
		p := servicetest.Start(t, fmt.Sprintf("replica%d", i+1), bin, args, []string{"SUBTTA_STATE_STORE=redis://" + raddr + "/0"})
		p.WaitTCP(t, addrs[i], 2*time.Minute)
		return p
	}
	replicas := []*servicetest.Process{replica(0), replica(1)}
	c := newFaultClient(t)
	ids := []string{"r0", "r1", "r2", "r3", "hop"}
	turn := 0
	at := func(id string) string {
		switch id {
		case "r0", "r1":
			return "http://" + addrs[0]
		case "hop": // sent to both replicas in turn
			turn++
			return "http://" + addrs[turn%2]
		}
		return "http://" + addrs[1]
	}
	fixed := func(id string) string { return "http://" + addrs[0] }
	c.round(3, ids, at)
	c.check("at the start", fixed, ids)

	// Redis killed: replica1 refuses (503, Retry-After), replica2 answers
	// frozen; neither adapts.
	redis.Kill()
	for _, id := range []string{"r0", "r2"} {
		code, body, h := c.post(at(id), id, "down-"+id)
		switch {
		case id == "r0" && (code != http.StatusServiceUnavailable || h.Get("Retry-After") == ""):
			t.Fatalf("replica1 with Redis down: %d %s; want 503 with Retry-After", code, body)
		case id == "r2" && (code != http.StatusOK || !bytes.Contains(body, []byte(`"adapted":false`))):
			t.Fatalf("replica2 (--degraded frozen) with Redis down: %d %s; want 200, adapted false", code, body)
		case code == http.StatusOK:
			c.count(id, body)
		}
	}
	// Requests sent during the outage are answered once it ends (the
	// stream sent to both replicas in turn may get replica2's frozen
	// answer first, which does not count as adapted).
	back := make(chan struct{})
	go func() {
		time.Sleep(500 * time.Millisecond)
		redis = servicetest.RedisAt(t, raddr, dataDir, "always")
		close(back)
	}()
	c.round(1, []string{"r0", "r1", "hop"}, at)
	<-back
	c.round(2, ids, at)
	c.check("after Redis was killed and started again with its data", fixed, ids)

	// A replica killed and started again: its streams are read back.
	replicas[0].Kill()
	replicas[0] = replica(0)
	c.round(2, ids, at)
	c.check("after replica1 was killed and started again", fixed, ids)

	// Redis started again without its data: every stream saved before is
	// refused (500 naming it), not started afresh, until it is deleted.
	redis.Kill()
	redis = servicetest.RedisAt(t, raddr, emptyDir, "always")
	for _, id := range ids {
		u := at(id) // the replica that answers, and is told to delete
		code, body := c.send(func() string { return u }, id)
		if code != http.StatusInternalServerError || !bytes.Contains(body, []byte("stream "+id)) || !bytes.Contains(body, []byte("missing")) {
			t.Fatalf("stream %s after Redis lost its data: %d %s; want 500 naming it", id, code, body)
		}
		req, _ := http.NewRequest(http.MethodDelete, u+"/v1/streams/"+id, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("DELETE %s: %v %v", id, resp, err)
		}
		resp.Body.Close()
		c.adapted[id] = 0
	}
	c.round(2, ids, at)
	c.check("after Redis lost its data and the streams were deleted", fixed, ids)
	t.Logf("answers marked adapted %v, frozen %d", c.adapted, c.frozen)
	for _, p := range replicas {
		if err := p.Stop(30 * time.Second); err != nil {
			t.Errorf("%s: %v\n%s", p.Name, err, p.Log())
		}
	}
}

func folderFaults(t *testing.T, bin string) {
	mnt := filepath.Join(t.TempDir(), "store")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		servicetest.Missing(t, "mounting a 1 MiB tmpfs: %v (needs root)", err)
	}
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	storeFile := filepath.Join(t.TempDir(), "store")
	if err := os.WriteFile(storeFile, []byte(mnt+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := servicetest.FreeAddr(t)
	base := "http://" + addr
	start := func(shutdown string) *servicetest.Process {
		p := servicetest.Start(t, "replica", bin, []string{"serve", "--addr", addr, "--state-store-file", storeFile,
			"--batch-size", "1", "--max-wait", "10ms", "--max-streams", "2", "--shutdown-timeout", shutdown}, nil)
		p.WaitTCP(t, addr, 2*time.Minute)
		return p
	}
	filler := filepath.Join(mnt, "filler")
	fill := func() {
		f, err := os.Create(filler)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		chunk := make([]byte, 4096)
		for {
			if _, err := f.Write(chunk); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatal(err)
				}
				return
			}
		}
	}
	free := func() {
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
	}
	c := newFaultClient(t)
	ids := []string{"d0", "d1"}
	at := func(string) string { return base }
	p := start("20s")
	c.round(1, ids, at)

	// Full: answered, unsaved, counted, and not evicted for a new stream.
	fill()
	c.round(1, ids, at)
	if v := metric(base, "subtta_streams_unsaved"); v != "2" {
		t.Errorf("subtta_streams_unsaved %q on a full disk; want 2", v)
	}
	if code, body, _ := c.post(base, "d2", "d2-early"); code != http.StatusServiceUnavailable {
		t.Fatalf("a new stream with both streams unsaved: %d %s; want 503", code, body)
	}
	// Freed: saved in the background, without a request of theirs.
	free()
	for deadline := time.Now().Add(30 * time.Second); metric(base, "subtta_streams_unsaved") != "0"; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("unsaved streams still %s 30 s after space was freed", metric(base, "subtta_streams_unsaved"))
		}
	}
	c.round(1, []string{"d2"}, at) // evicts one of them
	ids = append(ids, "d2")

	// SIGTERM while full: the server retries until space is freed, then
	// exits 0 with every stream saved.
	fill()
	c.round(1, []string{"d2"}, at)
	go func() {
		time.Sleep(time.Second)
		free()
	}()
	if err := p.Stop(time.Minute); err != nil {
		t.Fatalf("SIGTERM with an unsaved stream, space freed 1 s later: %v\n%s", err, p.Log())
	}
	p = start("1s")
	c.check("after SIGTERM on a full disk freed meanwhile", at, ids)

	// SIGTERM while full and never freed: exits non-zero naming it.
	c.round(1, []string{"d1"}, at)
	fill()
	c.round(1, []string{"d1"}, at)
	err := p.Stop(time.Minute)
	if err == nil || !strings.Contains(p.Log(), "d1") || !strings.Contains(p.Log(), "unsaved") {
		t.Fatalf("SIGTERM on a full disk never freed: %v; want a non-zero exit naming d1:\n%s", err, p.Log())
	}
	free()
	c.adapted["d1"]-- // the one the server said it could not save
	p = start("20s")
	c.check("after SIGTERM on a full disk, the lost step named", at, ids)
	if err := p.Stop(time.Minute); err != nil {
		t.Errorf("%v\n%s", err, p.Log())
	}
}
