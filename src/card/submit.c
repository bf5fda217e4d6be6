/* submit.c -- the worker's OpenCL calls on a card's queues, events and a token's buffers, each checked in one place. */
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

/* ---- a decode's token resident on the card ---------------------------------- */

int bml__submit_state(cl_event ev, cl_int *state) {
  return CHECKED(clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof *state, state, NULL));
}

int bml__submit_await(cl_event ev) { return CHECKED(clWaitForEvents(1, &ev)); }

int bml__submit_finish(cl_command_queue q) { return CHECKED(clFinish(q)); }

cl_mem bml__submit_buffer(const bml__card *c, cl_mem_flags flags, size_t bytes, cl_int *rc) {
  cl_mem m = NULL;
  CHECKED((m = clCreateBuffer(c->ctx, flags, bytes, NULL, rc), *rc));
  return m;
}

cl_mem bml__submit_host_buffer(const bml__card *c, size_t bytes, cl_int *rc) {
  cl_mem m = NULL;
  if (c->create_buffer_nv)
    CHECKED((m = c->create_buffer_nv(c->ctx, CL_MEM_READ_WRITE, BML_MEM_LOCATION_HOST_NV | BML_MEM_PINNED_NV, bytes,
                                     NULL, rc),
             *rc));
  else
    CHECKED((m = clCreateBuffer(c->ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, bytes, NULL, rc), *rc));
  return m;
}

void *bml__submit_map(cl_command_queue q, cl_mem m, size_t bytes, cl_int *rc) {
  void *h = NULL;
  CHECKED((h = clEnqueueMapBuffer(q, m, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes, 0, NULL, NULL, rc), *rc));
  return h;
}

int bml__submit_unmap(cl_command_queue q, cl_mem m, void *h) {
  return CHECKED(clEnqueueUnmapMemObject(q, m, h, 0, NULL, NULL));
}

int bml__submit_write(cl_command_queue q, cl_mem m, size_t offset, size_t bytes, const void *src) {
  return CHECKED(clEnqueueWriteBuffer(q, m, CL_TRUE, offset, bytes, src, 0, NULL, NULL));
}

void bml__submit_release_mem(cl_mem m) { CHECKED(clReleaseMemObject(m)); }

int bml__submit_token(cl_command_queue q, cl_kernel k, cl_mem bits, cl_mem d0, cl_mem host, cl_mem dev, size_t head,
                      cl_uint ticket0, cl_uint spins, size_t global, size_t local, cl_event *ev) {
  const cl_uint zero = 0;
  int rc = CHECKED(clEnqueueFillBuffer(q, dev, &zero, sizeof zero, 0, head, 0, NULL, NULL));
  if (rc == CL_SUCCESS) rc = CHECKED(clSetKernelArg(k, 0, sizeof bits, &bits));
  if (rc == CL_SUCCESS) rc = CHECKED(clSetKernelArg(k, 1, sizeof d0, &d0));
  if (rc == CL_SUCCESS) rc = CHECKED(clSetKernelArg(k, 2, sizeof host, &host));
  if (rc == CL_SUCCESS) rc = CHECKED(clSetKernelArg(k, 3, sizeof dev, &dev));
  if (rc == CL_SUCCESS) rc = CHECKED(clSetKernelArg(k, 4, sizeof host, &host));
  if (rc == CL_SUCCESS) rc = CHECKED(clSetKernelArg(k, 5, sizeof ticket0, &ticket0));
  if (rc == CL_SUCCESS) rc = CHECKED(clSetKernelArg(k, 6, sizeof spins, &spins));
  if (rc == CL_SUCCESS) rc = CHECKED(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, ev));
  if (rc == CL_SUCCESS) rc = CHECKED(clFlush(q));
  return rc;
}
