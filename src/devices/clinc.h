/* clinc.h -- OpenCL for the library's files: the headers and the loader's table (clload.h), vendor constants, the checking macro. */
#ifndef BML_CLINC_H
#define BML_CLINC_H

/* The OpenCL headers, at the API level bankml-cl targets, and every entry
 * point sent through the table of the loader opened at run time. */
#include "devices/clload.h"

/* NVIDIA's PCI queries (cl_nv_device_attribute_query); Debian's headers
 * stop at 0x4006, so they are defined here. */
#define BML_CL_DEVICE_PCI_BUS_ID_NV 0x4008
#define BML_CL_DEVICE_PCI_SLOT_ID_NV 0x4009
#define BML_CL_DEVICE_PCI_DOMAIN_ID_NV 0x400A
/* and its compute capability (cl_nv_device_attribute_query) */
#define BML_CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV 0x4000

/* Evaluates an OpenCL call that returns cl_int; on failure logs the call,
 * the error by name and file:line (category cat), stores the code in rc
 * and jumps to fail. */
#define BML_CL_TRY(cat, rc, call)                                                      \
  do {                                                                                \
    cl_int bml_cl_err_ = (call);                                                      \
    if (bml_cl_err_ != CL_SUCCESS) {                                                  \
      bml__cl_log_error((cat), #call, bml_cl_err_, __FILE__, __LINE__);               \
      (rc) = bml_cl_err_;                                                             \
      goto fail;                                                                      \
    }                                                                                 \
  } while (0)

/* Logs "<call>: CL_NAME (code) at file:line" as a debug message of cat (the
 * caller decides what the user sees). */
void bml__cl_log_error(unsigned cat, const char *call, cl_int err, const char *file, int line);

#endif
