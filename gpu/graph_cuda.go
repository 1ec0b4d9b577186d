//go:build cuda && cgo

package gpu

/*
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

// CUDA Graphs (the runtime's stream capture, CUDA 11.4 and later),
// declared here as the rest of CUDA is (cuda.go).
typedef int graph_status;

static struct {
	graph_status (*begin)(void *stream, int mode);
	graph_status (*end)(void *stream, void **graph);
	graph_status (*instantiate)(void **exec, void *graph, unsigned long long flags);
	graph_status (*launch)(void *exec, void *stream);
	graph_status (*execDestroy)(void *exec);
	graph_status (*destroy)(void *graph);
	const char *(*errorName)(graph_status s);
} graphs;

#define GRAPH_BIND(f, name) if ((*(void **)&graphs.f = dlsym(lib, name)) == NULL) return name;

static const char *graph_bind(void *lib) {
	GRAPH_BIND(begin, "cudaStreamBeginCapture")
	GRAPH_BIND(end, "cudaStreamEndCapture")
	GRAPH_BIND(instantiate, "cudaGraphInstantiateWithFlags")
	GRAPH_BIND(launch, "cudaGraphLaunch")
	GRAPH_BIND(execDestroy, "cudaGraphExecDestroy")
	GRAPH_BIND(destroy, "cudaGraphDestroy")
	GRAPH_BIND(errorName, "cudaGetErrorName")
	return NULL;
}

// Relaxed capture (cudaStreamCaptureModeRelaxed): the pool may call
// cudaMalloc while a pass is recorded, which the other modes refuse.
static graph_status w_beginCapture(void *s) { return graphs.begin(s, 2); }
static graph_status w_endCapture(void *s, void **g) { return graphs.end(s, g); }
static graph_status w_instantiate(void **e, void *g) { return graphs.instantiate(e, g, 0); }
static graph_status w_graphLaunch(void *e, void *s) { return graphs.launch(e, s); }
static graph_status w_graphExecDestroy(void *e) { return graphs.execDestroy(e); }
static graph_status w_graphDestroy(void *g) { return graphs.destroy(g); }
static const char *w_graphErrorName(graph_status s) { return graphs.errorName(s); }

// w_self identifies the calling thread: the capturing goroutine is locked
// to its thread while it records.
static uintptr_t w_self(void) { return (uintptr_t)pthread_self(); }
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/subtta/subtta/autograd/kernel"
)

var (
	graphOnce sync.Once
	graphErr  error
)

// loadGraphs binds the runtime's graph functions, once: a runtime without
// them (older than CUDA 11.4) runs every pass op by op and says why.
func loadGraphs() error {
	graphOnce.Do(func() {
		h := dlopenFirst(cudartNames)
		if h == nil {
			graphErr = fmt.Errorf("%s not found: %w", soNames(cudartNames), kernel.ErrUnsupported)
			return
		}
		if missing := C.graph_bind(h); missing != nil {
			graphErr = fmt.Errorf("the CUDA runtime lacks %s: %w", C.GoString(missing), kernel.ErrUnsupported)
		}
	})
	return graphErr
}

func graphCallErr(call string, s C.graph_status) error {
	return &Error{call, int(s), C.GoString(C.w_graphErrorName(s))}
}

// capture is the state of a recording (Capture): the thread recording,
// the memory freed meanwhile (the graph's from then on, and what the
// recording's own allocations take first), and every address the
// recording allocated.
type capture struct {
	thread    C.uintptr_t
	free      map[int][]uintptr
	allocated map[uintptr]bool
}

// errCapturing is the error of an operation the recording cannot hold.
func errCapturing(what string) error {
	return fmt.Errorf("gpu: %s while a graph is recorded: it waits on the host or copies through host memory", what)
}

// capturingHere reports whether the calling thread records a graph. Called
// with mu held.
func (d *device) capturingHere() bool {
	return d.capt != nil && d.capt.thread == C.w_self()
}

// waitCapture waits, with mu held, until no other thread records a graph:
// their work must not be recorded into it.
func (d *device) waitCapture() {
	if d.capt == nil {
		return
	}
	self := C.w_self()
	for d.capt != nil && d.capt.thread != self {
		d.captEnd.Wait()
	}
}

// graph is a recorded and instantiated CUDA Graph and the memory it owns.
type graph struct {
	d     *device
	g     unsafe.Pointer // cudaGraph_t
	exec  unsafe.Pointer // cudaGraphExec_t; nil once released
	owned map[int][]uintptr
}

// Capture implements kernel.Grapher with CUDA's stream capture: the work f
// queues on the device's stream becomes a graph, instantiated once, that
// Launch queues with one call. While f runs, the device's other callers
// (another goroutine's pass, UploadAhead, a cleanup's Free) wait, so that
// their work is not recorded; an upload or download of f, a wait for
// UploadAhead's copy or for the device, fails (they go through host memory
// or wait on the host, which a replay would not repeat), and Capture with
// them. Memory that f frees goes to the graph and is reused by f's later
// allocations; a buffer that f allocates and does not free fails the
// capture (the graph would write memory that someone else holds).
func (d *device) Capture(f func() error) (kernel.Graph, error) {
	if d.noGraphs {
		return nil, fmt.Errorf("gpu: %s: %w", d.name, kernel.ErrGraphsOff)
	}
	if err := loadGraphs(); err != nil {
		return nil, fmt.Errorf("gpu: %w", err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self := C.w_self()
	if err := d.exec(func() error {
		if d.capt != nil {
			return errors.New("gpu: Capture while a graph is recorded")
		}
		if s := C.w_beginCapture(d.stream); s != 0 {
			return graphCallErr("cudaStreamBeginCapture", s)
		}
		d.capt = &capture{thread: self, free: map[int][]uintptr{}, allocated: map[uintptr]bool{}}
		return nil
	}); err != nil {
		return nil, err
	}
	ended := false
	defer func() {
		if !ended { // f panicked: end the recording, keep nothing
			_, _ = d.endCapture(errors.New("panic"))
		}
	}()
	err := f()
	ended = true
	g, err := d.endCapture(err)
	if err != nil {
		return nil, err
	}
	return g, nil
}

// endCapture ends the recording and instantiates it unless ferr (f's
// error) is not nil or the recording failed; without a graph, the memory
// it would own goes back to the pool.
func (d *device) endCapture(ferr error) (*graph, error) {
	var g *graph
	err := d.exec(func() error {
		c := d.capt
		d.capt = nil
		d.captEnd.Broadcast()
		var cg, ex unsafe.Pointer
		err := ferr
		if s := C.w_endCapture(d.stream, &cg); s != 0 && err == nil {
			err = graphCallErr("cudaStreamEndCapture", s)
		}
		if err == nil {
			freed := map[uintptr]bool{}
			for _, ps := range c.free {
				for _, p := range ps {
					freed[p] = true
				}
			}
			held := 0
			for p := range c.allocated {
				if !freed[p] {
					held++
				}
			}
			if held > 0 {
				err = fmt.Errorf("gpu: %d buffers allocated while a graph was recorded are still held after it", held)
			}
		}
		if err == nil {
			if s := C.w_instantiate(&ex, cg); s != 0 {
				err = graphCallErr("cudaGraphInstantiateWithFlags", s)
			}
		}
		if err != nil {
			if cg != nil {
				C.w_graphDestroy(cg)
			}
			// Nothing recorded will run: the memory is free again.
			for n, ps := range c.free {
				d.free[n] = append(d.free[n], ps...)
			}
			return err
		}
		g = &graph{d: d, g: cg, exec: ex, owned: c.free}
		return nil
	})
	return g, err
}

// Launch implements kernel.Graph.
func (g *graph) Launch() error {
	return g.d.exec(func() error {
		if g.exec == nil {
			return errors.New("gpu: Launch of a released graph")
		}
		if s := C.w_graphLaunch(g.exec, g.d.stream); s != 0 {
			return graphCallErr("cudaGraphLaunch", s)
		}
		return nil
	})
}

// Release implements kernel.Graph. The memory goes back to the pool at
// once: work that reuses it is queued on the same stream, after the
// graph's launches (CUDA frees an executable graph still running once it
// is done).
func (g *graph) Release() {
	_ = g.d.exec(func() error {
		if g.exec == nil {
			return nil
		}
		C.w_graphExecDestroy(g.exec)
		C.w_graphDestroy(g.g)
		g.exec, g.g = nil, nil
		for n, ps := range g.owned {
			g.d.free[n] = append(g.d.free[n], ps...)
		}
		g.owned = nil
		return nil
	})
}
