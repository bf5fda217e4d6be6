/* clshim.h -- the fault-injecting OpenCL loader: what its generated forwarders (clshim-gen.c) and shim.c share. */
#ifndef CLSHIM_H
#define CLSHIM_H

#include <stdatomic.h>
#include <stdbool.h>

#include "../fakeicd/clapi.h"

/* One entry point: its name, the real loader's function, and what shim.c
 * made of the name at its first call (which faults it may get, which
 * objects it makes or releases). */
typedef struct {
  const char *name;
  void *real;       /* NULL when the real loader lacks it */
  atomic_int ready; /* 0, then 1 while being set up, then 2 */
  int fault_class;  /* index into shim.c's classes, or -1: never fails */
  int object;       /* the kind of object it makes, retains or releases, or -1 */
  int delta;        /* +1 made or retained, -1 released */
  bool after;       /* a fault comes after the real call ran (finish, wait) */
} shim_site;

/* Sets the site up on its first call, then decides whether this call
 * fails: CL_SUCCESS, or the error code it fails with. */
cl_int shim_enter(shim_site *s);
/* The same for a call that cannot report an error: never fails. */
cl_int shim_enter_never(shim_site *s);

/* After the real call returned rc: counts the objects it made (*event
 * when event is not NULL) or released.  Returns fault when one was
 * decided for after the call (site->after), else rc. */
cl_int shim_leave(shim_site *s, cl_int rc, cl_int fault, cl_event *event);
/* After a call that returns an object: made is whether it did. */
void shim_made(shim_site *s, bool made, cl_event *event);

/* The controls a test reaches with dlsym (exported with the entry points). */
/* "class=rate,..." (classes: create build enqueue map flush finish wait
 * status failed info setarg, or all); rates 0 to 1.  Returns 0, or -1
 * (nothing changed) for a spec that does not parse. */
int clshim_set_rates(const char *spec);
/* A line of counts into buf; *live the OpenCL objects alive (made or
 * retained and not released), *injected the faults so far. */
void clshim_stats(char *buf, size_t len, long *live, long *injected);

#endif
