/* fork.c -- what a child of fork() inherits and cannot use: the pool's threads and the OpenCL driver. */
#include "base/fork.h"
#include "base/bml.h"
#include "base/log.h"

#include <pthread.h>
#include <stdatomic.h>

/*
 * A child of fork() has the parent's memory and only the thread that
 * forked: a pool's threads, the OpenCL driver's threads and any call
 * another thread was inside are not there.  The pthread_atfork handlers
 * below count the forks and, in the child, before anything else runs
 * there, let each open pool and worker make its copy usable on its own
 * (bml__fork_watch_add): a pool becomes one of a single thread, a worker
 * leaves its card to the parent.  OpenCL used before a fork is not used
 * again in the child (bml__opencl_forked): PoCL's wait for a kernel there
 * never ends, and other drivers promise nothing either.
 */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static bml__fork_watch *watches;
static atomic_uint forks;
static atomic_uint opencl_at; /* forks + 1 at the first OpenCL call; 0: none yet */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void prepare(void) { pthread_mutex_lock(&lock); }
static void in_parent(void) { pthread_mutex_unlock(&lock); }
static void in_child(void) {
  atomic_fetch_add_explicit(&forks, 1, memory_order_relaxed);
  bml__log_in_child();
  for (bml__fork_watch *w = watches; w; w = w->next) w->in_child(w->ctx);
  pthread_mutex_unlock(&lock); /* locked in prepare by the thread that is the child's */
}
static void register_handlers(void) { pthread_atfork(prepare, in_parent, in_child); }

unsigned bml__forks(void) { return atomic_load_explicit(&forks, memory_order_relaxed); }

void bml__fork_watch_add(bml__fork_watch *w, void (*fn)(void *ctx), void *ctx) {
  pthread_once(&once, register_handlers);
  w->in_child = fn;
  w->ctx = ctx;
  pthread_mutex_lock(&lock);
  w->prev = NULL;
  w->next = watches;
  if (watches) watches->prev = w;
  watches = w;
  pthread_mutex_unlock(&lock);
}

void bml__fork_watch_remove(bml__fork_watch *w) {
  if (!w->in_child) return; /* never added */
  pthread_mutex_lock(&lock);
  if (w->prev) w->prev->next = w->next;
  else watches = w->next;
  if (w->next) w->next->prev = w->prev;
  pthread_mutex_unlock(&lock);
  w->in_child = NULL;
}

void bml__opencl_used(void) {
  pthread_once(&once, register_handlers);
  unsigned none = 0;
  atomic_compare_exchange_strong(&opencl_at, &none, bml__forks() + 1);
}

bool bml__opencl_forked(void) {
  const unsigned at = atomic_load(&opencl_at);
  return at != 0 && at != bml__forks() + 1;
}
