/* submit.c -- the worker's OpenCL calls on a card's queues and events, each checked in one place. */
#include "card/submit.h"
#include "base/log.h"
#include "base/util.h"

/* Every call's status goes through here: an error is logged with the call
 * and its place (BANKML_DEBUG=worker), and returned. */
static cl_int checked(cl_int rc, const char *call, const char *file, int line) {
  if (rc != CL_SUCCESS) bml__cl_log_error(BML_CAT_WORKER, call, rc, file, line);
  return rc;
}
#define CHECKED(call) checked((call), #call, __FILE__, __LINE__)

int bml__submit_flush(cl_command_queue q) { return CHECKED(clFlush(q)); }

int bml__submit_marker(cl_command_queue q, cl_event *ev) {
  return CHECKED(clEnqueueMarkerWithWaitList(q, 0, NULL, ev));
}

int bml__submit_barrier(cl_command_queue q, size_t n, const cl_event *wait) {
  return CHECKED(clEnqueueBarrierWithWaitList(q, (cl_uint)n, wait, NULL));
}

void bml__submit_release(cl_event ev) { CHECKED(clReleaseEvent(ev)); }

bool bml__submit_complete(cl_event ev) {
  cl_int state = CL_QUEUED;
  return CHECKED(clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof state, &state, NULL)) == CL_SUCCESS &&
         state == CL_COMPLETE;
}

cl_int bml__submit_wait(cl_event ev, double spin, bool *was_done) {
  const double until = spin > 0 ? bml__now() + spin : 0;
  for (unsigned i = 0;; i++) {
    cl_int state = CL_QUEUED;
    const cl_int rc = CHECKED(clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof state, &state, NULL));
    if (rc != CL_SUCCESS) return rc;
    if (state < 0) return state; /* the command failed */
    if (i == 0) *was_done = state == CL_COMPLETE;
    if (state == CL_COMPLETE) return CL_SUCCESS;
    if (spin <= 0 || bml__now() > until) break;
    bml__cpu_relax();
  }
  return CHECKED(clWaitForEvents(1, &ev));
}
