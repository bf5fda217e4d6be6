/* fork.h -- a child of fork(): the hooks that make an open object's copy safe there (fork.c). */
#ifndef BML_FORK_H
#define BML_FORK_H

#include "base/bml.h"

/* An open object's hook for a child of fork(): fn(ctx) runs in the child
 * before anything else there (single-threaded, in a pthread_atfork
 * handler: no locks, no logging). */
typedef struct bml__fork_watch {
  struct bml__fork_watch *prev, *next;
  void (*in_child)(void *ctx);
  void *ctx;
} bml__fork_watch;
void bml__fork_watch_add(bml__fork_watch *w, void (*fn)(void *ctx), void *ctx);
void bml__fork_watch_remove(bml__fork_watch *w); /* a watch never added: nothing */
/* How many times this process forked since the handlers were set up (by a
 * first watch or OpenCL call; a child sees its parent's count plus one). */
unsigned bml__forks(void);
/* Records the process's first OpenCL call; bml__opencl_forked: OpenCL was
 * used before the last fork, so this process (a child) must not use it. */
void bml__opencl_used(void);
bool bml__opencl_forked(void);

#endif
