package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/subtta/subtta/internal/servicetest"
)

// buildSubtta builds this command into a temporary folder and returns the
// binary's path (Missing without a go command).
func buildSubtta(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		servicetest.Missing(t, "no go command in PATH to build subtta with")
	}
	bin := filepath.Join(t.TempDir(), "subtta")
	cmd := exec.Command(gobin, "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// fleetStream is GET /v1/streams/{id}'s answer, as much as the test reads.
type fleetStream struct {
	InMemory bool  `json:"in_memory"`
	Images   int64 `json:"images"`
	Batches  int64 `json:"batches"`
	Restored bool  `json:"restored"`
}

func getStream(t *testing.T, base, id string) (fleetStream, int) {
	t.Helper()
	var st fleetStream
	resp, err := http.Get(base + "/v1/streams/" + id)
	if err != nil {
		return st, 0
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatalf("%s/v1/streams/%s: %v", base, id, err)
		}
	}
	return st, resp.StatusCode
}

// inFlight is a server's subtta_requests_in_flight (0 when unknown).
func inFlight(base string) float64 {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	for _, line := range strings.Split(b.String(), "\n") {
		if v, ok := strings.CutPrefix(line, "subtta_requests_in_flight "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return 0
}

// The fleet: HAProxy (scripts/fleet/haproxy.cfg) in front of two subtta
// serve replicas (the built binary) that share a real redis-server, under
// subtta loadtest with 10 streams. One replica is killed (SIGKILL) half-way
// through and started again: its streams continue on the other replica,
// read back from Redis (restored), then return to it; every request is
// answered exactly once, and every stream's saved image count equals its
// answered requests. redis-server, haproxy and the replicas run on free
// loopback ports and are stopped by their process ids.
func TestFleet(t *testing.T) {
	haproxy := servicetest.Program(t, "haproxy", "haproxy")
	redisURL, _ := servicetest.Redis(t)
	bin := buildSubtta(t)
	const streams, requests = 10, 30
	ids := make([]string, streams)
	for i := range ids {
		ids[i] = fmt.Sprintf("cam%d", i)
	}

	addrs := []string{servicetest.FreeAddr(t), servicetest.FreeAddr(t)}
	replica := func(i int) *servicetest.Process {
		p := servicetest.Start(t, fmt.Sprintf("replica%d", i+1), bin, []string{"serve", "--addr", addrs[i],
			"--state-store", redisURL, "--batch-size", "2", "--max-wait", "50ms"}, nil)
		p.WaitTCP(t, addrs[i], 2*time.Minute)
		return p
	}
	replicas := []*servicetest.Process{replica(0), replica(1)}
	lb := servicetest.FreeAddr(t)
	cfg, err := filepath.Abs("../../scripts/fleet/haproxy.cfg")
	if err != nil {
		t.Fatal(err)
	}
	hp := servicetest.Start(t, "haproxy", haproxy, []string{"-f", cfg},
		[]string{"SUBTTA_LB_ADDR=" + lb, "SUBTTA_REPLICA1=" + addrs[0], "SUBTTA_REPLICA2=" + addrs[1]})
	hp.WaitTCP(t, lb, 30*time.Second)

	var out, errb bytes.Buffer
	load := exec.Command(bin, "loadtest", "--addr", lb, "--streams", fmt.Sprint(streams), "--requests", fmt.Sprint(requests),
		"--concurrency", "2", "--prefix", "cam", "--json")
	load.Stdout, load.Stderr = &out, &errb
	if err := load.Start(); err != nil {
		t.Fatal(err)
	}
	loaded := make(chan error, 1)
	go func() { loaded <- load.Wait() }()
	t.Cleanup(func() {
		load.Process.Kill()
	})

	// Which replica holds which stream, and how far each stream is, once
	// every stream has taken a few steps. (A replica steps one batch at
	// a time, so the replica with fewer streams gets ahead.)
	owner, done := map[string]int{}, map[string]int64{}
	deadline := time.Now().Add(time.Minute)
	for {
		if time.Now().After(deadline) {
			t.Fatalf("the streams did not start within a minute; loadtest: %s%s", out.String(), errb.String())
		}
		time.Sleep(50 * time.Millisecond)
		images := int64(0)
		for i, a := range addrs {
			for _, id := range ids {
				if st, code := getStream(t, "http://"+a, id); code == http.StatusOK && st.InMemory {
					owner[id], done[id] = i, st.Images
					images += st.Images
				}
			}
		}
		if len(owner) == streams && images >= 4*streams {
			break
		}
	}
	// The streams of the replica to kill that have requests left: they
	// must move. (Streams progress unevenly; one may be done already.)
	var first []string
	for _, id := range ids {
		if owner[id] == 0 && done[id] < requests {
			first = append(first, id)
		}
	}
	if len(first) == 0 {
		t.Fatalf("no stream with requests left on replica1 (owners %v, images %v)", owner, done)
	}
	// Kill it while it serves requests, which then fail (HAProxy answers
	// 502) and are sent again by loadtest with their Idempotency-Key.
	for wait := time.Now().Add(10 * time.Second); time.Now().Before(wait) && inFlight("http://"+addrs[0]) < 2; {
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("killing replica1 (pid %d, %v requests in flight), whose streams %v have requests left (images %v)", replicas[0].Pid(), inFlight("http://"+addrs[0]), first, done)
	replicas[0].Kill()
	moved := map[string]bool{}

	// They continue on replica2, read back from Redis.
	deadline = time.Now().Add(time.Minute)
	for _, id := range first {
		for {
			st, code := getStream(t, "http://"+addrs[1], id)
			if code == http.StatusOK && st.InMemory && st.Restored {
				moved[id] = true
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("stream %s did not continue on replica2 (status %d, %+v); loadtest: %s", id, code, st, errb.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Log("replica1's streams continue on replica2 (restored); starting replica1 again")
	replicas[0] = replica(0)

	select {
	case err := <-loaded:
		if err != nil {
			t.Fatalf("loadtest: %v\n%s%s", err, out.String(), errb.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("loadtest did not end within 2 minutes: %s", errb.String())
	}
	var rep struct {
		Sent, OK, Errors, Retried, Replayed int
		ExactlyOnce                         bool           `json:"exactly_once"`
		Problems                            []string       `json:"problems"`
		OKByStream                          map[string]int `json:"ok_by_stream"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("loadtest JSON %q: %v", out.String(), err)
	}
	t.Logf("loadtest: %d sent, %d OK, %d errors, %d sent again, %d answered from a saved answer", rep.Sent, rep.OK, rep.Errors, rep.Retried, rep.Replayed)
	if !rep.ExactlyOnce || rep.Errors > 0 || rep.OK != streams*requests {
		t.Errorf("loadtest: %d of %d answered, %d errors; %v", rep.OK, streams*requests, rep.Errors, rep.Problems)
	}

	// Every stream's state in Redis counts exactly its answers.
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(opt)
	defer rc.Close()
	for _, id := range ids {
		st, code := getStream(t, "http://"+lb, id)
		stamp, err := rc.HGet(context.Background(), "subtta:stream:"+id, "stamp").Result()
		if err != nil {
			t.Errorf("stream %s in Redis: %v", id, err)
			continue
		}
		_, gen, _ := strings.Cut(stamp, ":")
		switch {
		case code != http.StatusOK || st.Images != int64(rep.OKByStream[id]):
			t.Errorf("stream %s: %d images saved (status %d) for %d answers", id, st.Images, code, rep.OKByStream[id])
		case gen != fmt.Sprint(st.Batches):
			t.Errorf("stream %s: generation %s in Redis for %d batches", id, gen, st.Batches)
		case moved[id] != st.Restored:
			t.Errorf("stream %s on replica%d, moved %v: restored %v", id, owner[id]+1, moved[id], st.Restored)
		}
	}
	for i, p := range replicas {
		if err := p.Stop(time.Minute); err != nil {
			t.Errorf("replica%d: %v\n%s", i+1, err, p.Log())
		}
	}
	if !t.Failed() {
		return
	}
	t.Logf("haproxy's log:\n%s", hp.Log())
	for i, p := range replicas {
		t.Logf("replica%d's log:\n%s", i+1, p.Log())
	}
}

// echoServer answers every request with its name.
func echoServer(t *testing.T, name string) string {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, name)
	}))
	t.Cleanup(ts.Close)
	return strings.TrimPrefix(ts.URL, "http://")
}

// checkKeyedOnStream sends POST /v1/classify?stream=ID, GET and DELETE
// /v1/streams/ID through the balancer at lb for 20 stream ids: each id's
// requests must reach one upstream, and the ids must spread over both.
func checkKeyedOnStream(t *testing.T, lb string) {
	t.Helper()
	ask := func(method, path string) string {
		var resp *http.Response
		var err error
		for range 50 { // the balancer may still be starting
			req, _ := http.NewRequest(method, "http://"+lb+path, strings.NewReader("x"))
			if resp, err = http.DefaultClient.Do(req); err == nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
		return string(b)
	}
	used := map[string]int{}
	for i := range 20 {
		id := fmt.Sprintf("cam%d", i)
		got := ask(http.MethodPost, "/v1/classify?stream="+id)
		for _, r := range [][2]string{{http.MethodGet, "/v1/streams/" + id}, {http.MethodDelete, "/v1/streams/" + id}, {http.MethodPost, "/v1/classify?labels=a,b,c&stream=" + id}} {
			if other := ask(r[0], r[1]); other != got {
				t.Errorf("stream %s: POST /v1/classify went to %s, %s %s to %s", id, got, r[0], r[1], other)
			}
		}
		used[got]++
	}
	if len(used) != 2 {
		t.Errorf("20 streams went to %v; want both upstreams", used)
	}
}

// scripts/fleet/haproxy.cfg sends every request naming a stream (in the
// query, or in the path of /v1/streams/ID) to one replica.
func TestHAProxyKeysOnStream(t *testing.T) {
	haproxy := servicetest.Program(t, "haproxy", "haproxy")
	cfg, err := filepath.Abs("../../scripts/fleet/haproxy.cfg")
	if err != nil {
		t.Fatal(err)
	}
	lb := servicetest.FreeAddr(t)
	hp := servicetest.Start(t, "haproxy", haproxy, []string{"-f", cfg},
		[]string{"SUBTTA_LB_ADDR=" + lb, "SUBTTA_REPLICA1=" + echoServer(t, "one"), "SUBTTA_REPLICA2=" + echoServer(t, "two")})
	hp.WaitTCP(t, lb, 30*time.Second)
	checkKeyedOnStream(t, lb)
}

// The same for scripts/fleet/nginx.conf, with its three addresses
// replaced by free ones.
func TestNginxKeysOnStream(t *testing.T) {
	nginx := servicetest.Program(t, "nginx", "nginx-light")
	b, err := os.ReadFile("../../scripts/fleet/nginx.conf")
	if err != nil {
		t.Fatal(err)
	}
	lb := servicetest.FreeAddr(t)
	conf := string(b)
	for old, addr := range map[string]string{"listen 127.0.0.1:8080": "listen " + lb,
		"server 127.0.0.1:8081": "server " + echoServer(t, "one"), "server 127.0.0.1:8082": "server " + echoServer(t, "two")} {
		if !strings.Contains(conf, old) {
			t.Fatalf("nginx.conf has no %q", old)
		}
		conf = strings.ReplaceAll(conf, old, addr)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	p := servicetest.Start(t, "nginx", nginx, []string{"-p", dir, "-c", path}, nil)
	p.WaitTCP(t, lb, 30*time.Second)
	checkKeyedOnStream(t, lb)
}
