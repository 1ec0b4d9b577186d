package serve

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
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
	"github.com/subtta/subtta/internal/servicetest"
)

// childStateDir, in the environment, makes the test binary a server on
// that state store (a folder, or a Redis URL) instead of running tests
// (serveChild), for tests that need servers in processes of their own.
// childAddr is the address it listens on (startChild picks a free
// loopback port when the test names none),
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

// serveChild serves the built-in model with batches of 2 on dir, on the
// loopback address childAddr names, until SIGTERM
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
	ln, err := net.Listen("tcp", os.Getenv(childAddr))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	hs := &http.Server{Handler: s.Handler()}
	go hs.Serve(ln)
	<-ctx.Done()
	dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go s.Shutdown(dctx)
	if err := hs.Shutdown(dctx); err != nil {
		return err
	}
	return s.Shutdown(dctx)
}

// child is a server in a process of its own (serveChild), started and
// stopped as the tests' other services are (servicetest).
type child struct {
	p   *servicetest.Process
	url string
}

// startChild starts a server process on dir, with env added to its
// environment, on a free loopback port unless env names one (childAddr),
// and waits until it listens.
func startChild(t *testing.T, dir string, env ...string) *child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	addr := ""
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, childAddr+"="); ok {
			addr = v
		}
	}
	if addr == "" {
		addr = servicetest.FreeAddr(t)
		env = append(env, childAddr+"="+addr)
	}
	p := servicetest.Start(t, "server process", exe, []string{"-test.run=^$"}, append([]string{childStateDir + "=" + dir}, env...))
	p.WaitTCP(t, addr, 2*time.Minute)
	return &child{p: p, url: "http://" + addr}
}

// stop sends SIGTERM and waits for the drained process to end.
func (c *child) stop(t *testing.T) {
	t.Helper()
	if err := c.p.Stop(2 * time.Minute); err != nil {
		t.Errorf("server process: %v\n%s", err, c.p.Log())
	}
}
