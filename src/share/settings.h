/* settings.h -- a worker's settings: the caller's options, else the environment, else the defaults. */
#ifndef BML_SETTINGS_H
#define BML_SETTINGS_H

#include "base/bml.h"
#include "devices/clinc.h"

/* What a worker's open uses, each from its option or else the environment. */
typedef struct {
  const char *device;     /* bml_discover_options.gpu's syntax; NULL: BANKML_GPU (discovery reads it) */
  int software;           /* -1: BANKML_GPU_SOFTWARE (discovery reads it) */
  double share;           /* < 0: calibrated */
  const char *share_from; /* who fixed it: "bml_worker_options.share" or "BANKML_GPU_SHARE" */
  double limit;
  int queues;             /* 0: the card's default */
  bool verify_always;
  cl_context ctx;         /* the engine's, or NULL */
  cl_command_queue queue; /* the engine's, or NULL */
} bml__worker_settings;

/* Reads o (NULL: the defaults) and the environment into s.  Returns 0,
 * BML_EINVAL, BML_ENOTSUP, BML_ERANGE (a bad option, named in the
 * message) or BML_EENV (a bad variable, named). */
int bml__worker_settings_read(const bml_worker_options *o, bml__worker_settings *s);

#endif
