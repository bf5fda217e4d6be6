/* cltrace.c -- a timeline of what a program asks of OpenCL: an
 * LD_PRELOAD library that makes every command queue a profiled one and
 * writes, for each command, when the host enqueued it (CLOCK_MONOTONIC,
 * µs) and when the card queued, submitted, started and ended it (the
 * card's profiling clock, µs).  The two clocks drift apart by hundreds of
 * µs over a run (seen on the H200), so cltrace_batches.py sets them against
 * each other batch by batch: a command is queued during its enqueue call.
 * clFlush, clFinish and clWaitForEvents are written with their host times
 * too.  The card's times are asked for only when a queue is released or
 * the program exits (or once very many events wait), so that the host's
 * timeline is the program's own.  Profiling costs the card and the driver
 * time of their own (doc/WORKER.md): the trace says where a batch's time
 * goes, not what it costs untraced.
 * Not built, installed or distributed (README.md).
 *   CLTRACE=FILE LD_PRELOAD=/tmp/cltrace.so PROGRAM ...
 * Writes FILE when the program exits: a line per command, in the order
 * enqueued ("what queue n bytes|items call_us call_end_us queued_us
 * submit_us start_us end_us"; a command the driver gives no times for
 * has "-": the host's own calls "wait", "flush" and "finish", and the
 * barriers and markers, whose events NVIDIA's driver gives times that are
 * not the card's). */
#define _GNU_SOURCE
#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
  const char *what;
  int queue; /* the order its queue was made in; -1: not a queue's */
  size_t size;
  double call, ret; /* host µs */
  cl_event ev;      /* retained; NULL once resolved or for host waits */
  cl_ulong t[4];    /* queued, submit, start, end (card ns); t[3] 0: no times */
} record;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static record *recs;
static size_t nrecs, caprecs, first_pending; /* before first_pending: every record resolved */
static cl_command_queue queues[64];
static int nqueues;

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void *real(const char *name) {
  void *f = dlsym(RTLD_NEXT, name);
  if (!f) {
    fprintf(stderr, "cltrace: %s not found in the next library\n", name);
    abort();
  }
  return f;
}

static int queue_index(cl_command_queue q) {
  for (int i = 0; i < nqueues; i++)
    if (queues[i] == q) return i;
  return -1;
}

/* Records a command; returns how many records wait to be resolved (read
 * under the lock, as another thread may be adding or resolving). */
static size_t add(const char *what, cl_command_queue q, size_t size, double call, double ret, cl_event ev) {
  pthread_mutex_lock(&lock);
  if (nrecs == caprecs) {
    size_t cap = caprecs ? 2 * caprecs : 4096;
    record *r = realloc(recs, cap * sizeof *r);
    if (r) recs = r, caprecs = cap;
  }
  if (nrecs < caprecs) recs[nrecs++] = (record){what, q ? queue_index(q) : -1, size, call, ret, ev, {0, 0, 0, 0}};
  const size_t pending = nrecs - first_pending;
  pthread_mutex_unlock(&lock);
  return pending;
}

/* The times of every command whose event is complete; the event released. */
static void resolve(void) {
  static cl_int (*info)(cl_event, cl_event_info, size_t, void *, size_t *);
  static cl_int (*prof)(cl_event, cl_profiling_info, size_t, void *, size_t *);
  static cl_int (*rel)(cl_event);
  if (!info) info = real("clGetEventInfo"), prof = real("clGetEventProfilingInfo"), rel = real("clReleaseEvent");
  pthread_mutex_lock(&lock);
  for (size_t i = first_pending; i < nrecs; i++) {
    record *r = &recs[i];
    if (!r->ev) {
      if (i == first_pending) first_pending++;
      continue;
    }
    cl_int state = CL_QUEUED;
    if (info(r->ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof state, &state, NULL) != CL_SUCCESS) state = -1;
    if (state > CL_COMPLETE) continue; /* still to run */
    static const cl_profiling_info which[4] = {CL_PROFILING_COMMAND_QUEUED, CL_PROFILING_COMMAND_SUBMIT,
                                               CL_PROFILING_COMMAND_START, CL_PROFILING_COMMAND_END};
    for (int k = 0; k < 4; k++)
      if (state != CL_COMPLETE || prof(r->ev, which[k], sizeof r->t[k], &r->t[k], NULL) != CL_SUCCESS) {
        memset(r->t, 0, sizeof r->t);
        break;
      }
    rel(r->ev);
    r->ev = NULL;
    if (i == first_pending) first_pending++;
  }
  pthread_mutex_unlock(&lock);
}

__attribute__((destructor)) static void write_trace(void) {
  const char *path = getenv("CLTRACE");
  if (!path || !nrecs) return;
  resolve();
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "cltrace: cannot write %s\n", path);
    return;
  }
  fputs("# what queue size call_us return_us queued_us submit_us start_us "
        "end_us (the last four on the card's clock)\n",
        f);
  pthread_mutex_lock(&lock); /* a thread of the program's may still enqueue */
  for (size_t i = 0; i < nrecs; i++) {
    const record *r = &recs[i];
    fprintf(f, "%s %d %zu %.1f %.1f", r->what, r->queue, r->size, r->call, r->ret);
    if (r->t[3])
      for (int k = 0; k < 4; k++)
        fprintf(f, " %.1f", (double)r->t[k] / 1e3);
    else
      fputs(" - - - -", f);
    fputc('\n', f);
  }
  pthread_mutex_unlock(&lock);
  fclose(f);
}

/* A command enqueued at t0 (rc, its enqueue's status): recorded with the
 * caller's event (retained: the caller may release it) or with mine, the
 * one made for the trace where the caller asked for none. */
static cl_int traced(const char *what, cl_command_queue q, size_t size, double t0, cl_int rc, const cl_event *event,
                     const cl_event *mine) {
  static cl_int (*retain)(cl_event);
  if (!retain) retain = real("clRetainEvent");
  const double t1 = now_us();
  cl_event ev = event ? *event : *mine;
  if (rc == CL_SUCCESS && ev) {
    if (event) retain(ev);
    add(what, q, size, t0, t1, ev);
  }
  return rc;
}

cl_command_queue clCreateCommandQueue(cl_context ctx, cl_device_id dev, cl_command_queue_properties props,
                                      cl_int *err) {
  static cl_command_queue (*f)(cl_context, cl_device_id, cl_command_queue_properties, cl_int *);
  if (!f) f = real("clCreateCommandQueue");
  cl_command_queue q = f(ctx, dev, props | CL_QUEUE_PROFILING_ENABLE, err);
  pthread_mutex_lock(&lock);
  if (q && nqueues < 64) queues[nqueues++] = q;
  pthread_mutex_unlock(&lock);
  return q;
}

cl_int clEnqueueNDRangeKernel(cl_command_queue q, cl_kernel k, cl_uint dim, const size_t *off, const size_t *global,
                              const size_t *local, cl_uint nw, const cl_event *wl, cl_event *event) {
  static cl_int (*f)(cl_command_queue, cl_kernel, cl_uint, const size_t *, const size_t *, const size_t *, cl_uint,
                     const cl_event *, cl_event *);
  if (!f) f = real("clEnqueueNDRangeKernel");
  size_t items = 1;
  for (cl_uint i = 0; i < dim; i++)
    items *= global[i];
  cl_event mine = NULL;
  const double t0 = now_us();
  const cl_int rc = f(q, k, dim, off, global, local, nw, wl, event ? event : &mine);
  return traced("kernel", q, items, t0, rc, event, &mine);
}

cl_int clEnqueueWriteBuffer(cl_command_queue q, cl_mem b, cl_bool blocking, size_t off, size_t size, const void *p,
                            cl_uint nw, const cl_event *wl, cl_event *event) {
  static cl_int (*f)(cl_command_queue, cl_mem, cl_bool, size_t, size_t, const void *, cl_uint, const cl_event *,
                     cl_event *);
  if (!f) f = real("clEnqueueWriteBuffer");
  cl_event mine = NULL;
  const double t0 = now_us();
  const cl_int rc = f(q, b, blocking, off, size, p, nw, wl, event ? event : &mine);
  return traced("write", q, size, t0, rc, event, &mine);
}

cl_int clEnqueueReadBuffer(cl_command_queue q, cl_mem b, cl_bool blocking, size_t off, size_t size, void *p, cl_uint nw,
                           const cl_event *wl, cl_event *event) {
  static cl_int (*f)(cl_command_queue, cl_mem, cl_bool, size_t, size_t, void *, cl_uint, const cl_event *, cl_event *);
  if (!f) f = real("clEnqueueReadBuffer");
  cl_event mine = NULL;
  const double t0 = now_us();
  const cl_int rc = f(q, b, blocking, off, size, p, nw, wl, event ? event : &mine);
  return traced("read", q, size, t0, rc, event, &mine);
}

/* Barriers and markers: their host times only (NVIDIA's driver gives
 * their events times that are not the card's). */
typedef cl_int (*wait_list_fn)(cl_command_queue, cl_uint, const cl_event *, cl_event *);

static cl_int wait_list(const char *what, wait_list_fn *f, const char *name, cl_command_queue q, cl_uint nw,
                        const cl_event *wl, cl_event *event) {
  if (!*f) *f = (wait_list_fn)real(name);
  double t0 = now_us();
  cl_int rc = (*f)(q, nw, wl, event);
  add(what, q, nw, t0, now_us(), NULL);
  return rc;
}

cl_int clEnqueueBarrierWithWaitList(cl_command_queue q, cl_uint nw, const cl_event *wl, cl_event *event) {
  static wait_list_fn f;
  return wait_list("barrier", &f, "clEnqueueBarrierWithWaitList", q, nw, wl, event);
}

cl_int clEnqueueMarkerWithWaitList(cl_command_queue q, cl_uint nw, const cl_event *wl, cl_event *event) {
  static wait_list_fn f;
  return wait_list("marker", &f, "clEnqueueMarkerWithWaitList", q, nw, wl, event);
}

/* The host's own calls: their times only.  Nothing is resolved here (a
 * query of the card's times costs the host microseconds an event, which
 * would show as the host's time in the trace): only when a queue is
 * released, at exit, or after a wait once PENDING_MOST events wait. */
#define PENDING_MOST 65536

static cl_int host_call(const char *what, cl_command_queue q, size_t size, double t0, cl_int rc, int may_resolve) {
  if (add(what, q, size, t0, now_us(), NULL) > PENDING_MOST && may_resolve) resolve();
  return rc;
}

typedef cl_int (*queue_fn)(cl_command_queue);

static cl_int queue_call(const char *what, queue_fn *f, const char *name, cl_command_queue q, int may_resolve) {
  if (!*f) *f = (queue_fn)real(name);
  const double t0 = now_us();
  const cl_int rc = (*f)(q);
  return host_call(what, q, 0, t0, rc, may_resolve);
}

cl_int clFlush(cl_command_queue q) {
  static queue_fn f;
  return queue_call("flush", &f, "clFlush", q, 0);
}

cl_int clFinish(cl_command_queue q) {
  static queue_fn f;
  return queue_call("finish", &f, "clFinish", q, 1);
}

cl_int clWaitForEvents(cl_uint n, const cl_event *evs) {
  static cl_int (*f)(cl_uint, const cl_event *);
  if (!f) f = real("clWaitForEvents");
  const double t0 = now_us();
  const cl_int rc = f(n, evs);
  return host_call("wait", NULL, n, t0, rc, 1);
}

cl_int clReleaseCommandQueue(cl_command_queue q) {
  static cl_int (*f)(cl_command_queue);
  if (!f) f = real("clReleaseCommandQueue");
  resolve();
  pthread_mutex_lock(&lock);
  int i = queue_index(q);
  if (i >= 0) queues[i] = NULL; /* its records keep their index */
  pthread_mutex_unlock(&lock);
  return f(q);
}
