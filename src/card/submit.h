/* submit.h -- the worker's OpenCL calls on a card's queues and events: flushes, markers, barriers, waits. */
#ifndef BML_SUBMIT_H
#define BML_SUBMIT_H

#include "base/bml.h"
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

#endif
