package serve

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/subtta/subtta/builtin"
	"github.com/subtta/subtta/clip"
	"github.com/subtta/subtta/data"
)

// childStateDir, in the environment, makes the test binary a server on
// that state store (a folder, or a Redis URL) instead of running tests
// (serveChild), for tests that need servers in processes of their own.
// childAddr is the address it listens on (default: a free loopback port),
// and childCrashAfter a number of saves after which it kills itself
// (SIGKILL) at once, before answering the batch just saved.
const (
	childStateDir   = "SUBTTA_SERVE_TEST_STATE_DIR"
	childAddr       = "SUBTTA_SERVE_TEST_ADDR"
	childCrashAfter = "SUBTTA_SERVE_TEST_CRASH_AFTER_SAVES"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(childStateDir); dir != "" {
		if err := serveChild(dir); err != nil {
			fmt.Fprintln(os.Stderr, "serve child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serveChild serves the built-in model with batches of 2 on dir, on a
// loopback port it prints ("listening on URL") to stdout, until SIGTERM
// (which drains it) or SIGKILL (sent by the test, or by itself after
// childCrashAfter saves).
func serveChild(dir string) error {
	m, err := builtin.Model(clip.Options{})
	if err != nil {
		return err
	}
	s, err := New(Config{Model: m, Tokenizer: builtin.Tokenizer(), ModelVersion: "builtin-test",
		Labels: data.CIFAR10Classes, BatchSize: 2, MaxWait: 50 * time.Millisecond, StateStore: dir,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return err
	}
	if n, err := strconv.Atoi(os.Getenv(childCrashAfter)); err == nil {
		var saves atomic.Int64
		s.afterSave = func() {
			if saves.Add(1) == int64(n) {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // the signal ends the process before it answers
			}
		}
	}
	addr := os.Getenv(childAddr)
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	hs := &http.Server{Handler: s.Handler()}
	go hs.Serve(ln)
	fmt.Printf("listening on http://%s\n", ln.Addr())
	<-ctx.Done()
	dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go s.Shutdown(dctx)
	if err := hs.Shutdown(dctx); err != nil {
		return err
	}
	return s.Shutdown(dctx)
}

// child is a server in a process of its own (serveChild).
type child struct {
	cmd  *exec.Cmd
	url  string
	done chan struct{} // closed when the process has ended
	err  error         // its exit, once done
}

// startChild starts a server process on dir, with env added to its
// environment, and waits until it listens.
func startChild(t *testing.T, dir string, env ...string) *child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childStateDir+"="+dir), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- l
		io.Copy(io.Discard, out)
		c.err = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(c.kill)
	select {
	case l := <-line:
		url, ok := strings.CutPrefix(strings.TrimSpace(l), "listening on ")
		if !ok {
			t.Fatalf("server process said %q", l)
		}
		c.url = url
		return c
	case <-time.After(2 * time.Minute):
		t.Fatal("the server process did not start listening within 2 minutes")
	}
	return nil
}

// stop sends SIGTERM and waits for the drained process to end.
func (c *child) stop(t *testing.T) {
	t.Helper()
	c.cmd.Process.Signal(syscall.SIGTERM)
	<-c.done
	if c.err != nil {
		t.Errorf("server process: %v", c.err)
	}
}

// kill ends the process at once (SIGKILL), as a crash would.
func (c *child) kill() {
	c.cmd.Process.Kill()
	<-c.done
}
