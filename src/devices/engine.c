/* engine.c -- an engine's OpenCL context and queue, given to a worker: their devices, the queue checked. */
#include "devices/engine.h"

#include "base/log.h"
#include "devices/device.h"

#include <stdlib.h>

/* The queue's device, after checking it is in order and of *given (which
 * becomes its context when not given). */
static int queue_device(cl_context *given, cl_command_queue queue, cl_device_id *dev) {
  cl_context ctx = NULL;
  cl_command_queue_properties props = 0;
  cl_int rc = clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof ctx, &ctx, NULL);
  if (rc == CL_SUCCESS) rc = clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof *dev, dev, NULL);
  if (rc == CL_SUCCESS) rc = clGetCommandQueueInfo(queue, CL_QUEUE_PROPERTIES, sizeof props, &props, NULL);
  char e[64];
  if (rc != CL_SUCCESS) {
    bml__error(BML_CAT_DEVICE, "bml_worker_options.cl_queue: clGetCommandQueueInfo: %s",
               bml__cl_error_string(rc, e, sizeof e));
    return rc;
  }
  if (props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE) {
    bml__error(BML_CAT_DEVICE, "bml_worker_options.cl_queue: an out-of-order queue (the worker's copies, launches "
               "and reads rely on their order): give an in-order queue, or none");
    return BML_EINVAL;
  }
  if (*given && *given != ctx) {
    bml__error(BML_CAT_DEVICE, "bml_worker_options.cl_queue is not a queue of bml_worker_options.cl_context");
    return BML_EINVAL;
  }
  *given = ctx;
  return 0;
}

int bml__engine_devices(cl_context *ctx, cl_command_queue queue, cl_device_id **devs, size_t *ndevs) {
  *devs = NULL;
  *ndevs = 0;
  if (queue) {
    cl_device_id dev;
    int rc = queue_device(ctx, queue, &dev);
    if (rc != 0) return rc;
    if (!(*devs = malloc(sizeof **devs))) return BML_ENOMEM;
    **devs = dev;
    *ndevs = 1;
    return 0;
  }
  size_t bytes = 0;
  char e[64];
  cl_int rc = clGetContextInfo(*ctx, CL_CONTEXT_DEVICES, 0, NULL, &bytes);
  if (rc == CL_SUCCESS && bytes < sizeof **devs) rc = CL_INVALID_CONTEXT;
  if (rc == CL_SUCCESS && !(*devs = malloc(bytes))) return BML_ENOMEM;
  if (rc == CL_SUCCESS) rc = clGetContextInfo(*ctx, CL_CONTEXT_DEVICES, bytes, *devs, NULL);
  if (rc != CL_SUCCESS) {
    bml__error(BML_CAT_DEVICE, "bml_worker_options.cl_context: clGetContextInfo: %s",
               bml__cl_error_string(rc, e, sizeof e));
    free(*devs);
    *devs = NULL;
    return rc;
  }
  *ndevs = bytes / sizeof **devs;
  return 0;
}
