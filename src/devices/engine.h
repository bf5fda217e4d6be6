/* engine.h -- an engine's OpenCL context and queue, given to a worker (engine.c). */
#ifndef BML_ENGINE_H
#define BML_ENGINE_H

#include "base/bml.h"
#include "devices/clinc.h"

/* The devices the engine's context and queue allow (*ctx's, or the
 * queue's device alone; *ctx becomes the queue's context where only the
 * queue was given), after checking that the queue is in order and of
 * *ctx.  Returns 0 with *devs (malloc'd; free it) and *ndevs, or
 * BML_EINVAL (named in the message), BML_ENOMEM or the OpenCL error of a
 * query. */
int bml__engine_devices(cl_context *ctx, cl_command_queue queue, cl_device_id **devs, size_t *ndevs);

#endif
