/* submit.h -- the worker's OpenCL calls on a card's queues, events and a token's buffers, each checked. */
#ifndef BML_SUBMIT_H
#define BML_SUBMIT_H

#include "base/bml.h"
#include "card/card.h"
#include "devices/clinc.h"

/* Each returns CL_SUCCESS or the call's error, which is logged (as a debug
 * message of BANKML_DEBUG=worker: the caller decides what the user sees). */

/* clFlush of q. */
int bml__submit_flush(cl_command_queue q);
/* A marker on q, after everything enqueued there before it: its event in *ev. */
int bml__submit_marker(cl_command_queue q, cl_event *ev);
/* A barrier on q that waits for the n events of wait (nothing after it on
 * q starts before they complete). */
int bml__submit_barrier(cl_command_queue q, size_t n, const cl_event *wait);
/* Releases ev (an error is logged, nothing more). */
void bml__submit_release(cl_event ev);
/* Whether ev's command is complete (false while it runs, or when the
 * driver cannot say). */
bool bml__submit_complete(cl_event ev);
/* Waits for ev, polling its status for up to `spin` seconds before it
 * sleeps in clWaitForEvents: a decode's group comes back within tens of
 * microseconds, less than a sleep's wake-up takes, and the calling thread
 * has nothing else to do (it costs that thread's CPU for at most `spin`).
 * *was_done: the event was complete at the first look.  Returns
 * CL_SUCCESS, or the error the command ended with or the wait gave. */
cl_int bml__submit_wait(cl_event ev, double spin, bool *was_done);

/* ---- a decode's token resident on the card (share/token.c, token_load.c,
 * resident.c) ---- */

/* The state of ev's command in *state: CL_QUEUED, CL_SUBMITTED, CL_RUNNING,
 * CL_COMPLETE, or the error it ended with (negative); *state is left as it
 * was when the driver cannot say. */
int bml__submit_state(cl_event ev, cl_int *state);
/* Waits for ev in clWaitForEvents (no spin first). */
int bml__submit_await(cl_event ev);
/* clFinish of q. */
int bml__submit_finish(cl_command_queue q);
/* A buffer of `bytes` in c's context, with flags; NULL, the error in *rc,
 * when it cannot be had. */
cl_mem bml__submit_buffer(const bml__card *c, cl_mem_flags flags, size_t bytes, cl_int *rc);
/* A buffer of `bytes` in host memory that c's kernels read and write over
 * the bus and the host maps: cl_nv_create_buffer's (placed and pinned in
 * host memory) where c has it, else CL_MEM_ALLOC_HOST_PTR's.  NULL, the
 * error in *rc, when it cannot be had. */
cl_mem bml__submit_host_buffer(const bml__card *c, size_t bytes, cl_int *rc);
/* m's first `bytes` mapped for reading and writing, the map waited for on
 * q; NULL, the error in *rc, when it fails. */
void *bml__submit_map(cl_command_queue q, cl_mem m, size_t bytes, cl_int *rc);
/* m's mapping h unmapped on q (enqueued: a finish waits for it). */
int bml__submit_unmap(cl_command_queue q, cl_mem m, void *h);
/* `bytes` of host memory at src into m at byte `offset`, waited for on q. */
int bml__submit_write(cl_command_queue q, cl_mem m, size_t offset, size_t bytes, const void *src);
/* Releases m (an error is logged, nothing more). */
void bml__submit_release_mem(cl_mem m);
/* k, a build's q1_0_token (cl/q1_0_batch.cl), launched on q and flushed: the
 * first `head` bytes of dev zeroed first, then its arguments bits, d0,
 * host, dev, host (its results' base), ticket0 and spins, in work-groups of
 * `local` work-items, `global` in all.  *ev: the launch's event, set once
 * it is enqueued, even where the flush after it fails (the caller parks
 * the kernel and releases it then). */
int bml__submit_token(cl_command_queue q, cl_kernel k, cl_mem bits, cl_mem d0, cl_mem host, cl_mem dev, size_t head,
                      cl_uint ticket0, cl_uint spins, size_t global, size_t local, cl_event *ev);

#endif
