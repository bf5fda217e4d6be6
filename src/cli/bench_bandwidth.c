/* bench_bandwidth.c -- the card's own read bandwidth, measured by a streaming kernel, for the "% of the card" column. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <string.h>

#include "bankml-cl.h"
#include "bench.h"
#include "devices/clload.h" /* OpenCL through the loader opened at run time */

/* Every work-item streams uint4s with a grid stride; the xor keeps the
 * loads alive and is written only when it hits an impossible value. */
static const char *const source =
    "__kernel void bml_read(__global const uint4 *p, const uint n4, __global uint *sink) {\n"
    "  uint4 acc = (uint4)(0);\n"
    "  for (uint i = get_global_id(0); i < n4; i += get_global_size(0)) acc ^= p[i];\n"
    "  if (acc.x == 0x9e3779b9u && acc.y == 0x7f4a7c15u) sink[0] = acc.z;\n"
    "}\n";

#define RUNS 7

/* The first selected device, as the worker picks it. */
static const bml_device *first_selected(bml_devices *list) {
  for (size_t i = 0; i < bml_devices_count(list); i++)
    if (bml_devices_get(list, i)->selected) return bml_devices_get(list, i);
  return NULL;
}

/* Runs the kernel once untimed (the buffer's fill, the first touch of its
 * pages), then RUNS times over bytes of buffer; the median GB/s. */
static double measure(cl_command_queue q, cl_kernel k, size_t bytes, size_t global) {
  double ms[RUNS];
  if (clEnqueueNDRangeKernel(q, k, 1, NULL, &global, NULL, 0, NULL, NULL) != CL_SUCCESS || clFinish(q) != CL_SUCCESS)
    return 0;
  for (int i = 0; i < RUNS; i++) {
    double t0 = bench_now_ms();
    if (clEnqueueNDRangeKernel(q, k, 1, NULL, &global, NULL, 0, NULL, NULL) != CL_SUCCESS || clFinish(q) != CL_SUCCESS)
      return 0;
    ms[i] = bench_now_ms() - t0;
  }
  struct bench_row row = {.weight_bytes = bytes};
  bench_summarize(ms, RUNS, &row);
  return row.gbps;
}

static double run_on(cl_platform_id plat, cl_device_id dev, size_t bytes, cl_uint units) {
  cl_int rc;
  double gbps = 0;
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)plat, 0};
  cl_context ctx = clCreateContext(props, 1, &dev, NULL, NULL, &rc);
  cl_command_queue q = rc == CL_SUCCESS ? clCreateCommandQueue(ctx, dev, 0, &rc) : NULL;
  cl_program p = rc == CL_SUCCESS ? clCreateProgramWithSource(ctx, 1, (const char **)&source, NULL, &rc) : NULL;
  if (rc == CL_SUCCESS) rc = clBuildProgram(p, 1, &dev, "", NULL, NULL);
  cl_kernel k = rc == CL_SUCCESS ? clCreateKernel(p, "bml_read", &rc) : NULL;
  cl_mem buf = rc == CL_SUCCESS ? clCreateBuffer(ctx, CL_MEM_READ_ONLY, bytes, NULL, &rc) : NULL;
  cl_mem sink = rc == CL_SUCCESS ? clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, 16, NULL, &rc) : NULL;
  cl_uint n4 = (cl_uint)(bytes / 16), zero = 0;
  if (rc == CL_SUCCESS) rc = clEnqueueFillBuffer(q, buf, &zero, sizeof zero, 0, bytes, 0, NULL, NULL);
  if (rc == CL_SUCCESS) rc = clSetKernelArg(k, 0, sizeof buf, &buf);
  if (rc == CL_SUCCESS) rc = clSetKernelArg(k, 1, sizeof n4, &n4);
  if (rc == CL_SUCCESS) rc = clSetKernelArg(k, 2, sizeof sink, &sink);
  if (rc == CL_SUCCESS) gbps = measure(q, k, bytes, (size_t)units * 2048);
  if (rc != CL_SUCCESS) fprintf(stderr, "bankml-cl bench: the read-bandwidth kernel failed (OpenCL %d)\n", rc);
  if (sink) clReleaseMemObject(sink);
  if (buf) clReleaseMemObject(buf);
  if (k) clReleaseKernel(k);
  if (p) clReleaseProgram(p);
  if (q) clReleaseCommandQueue(q);
  if (ctx) clReleaseContext(ctx);
  return gbps;
}

double bench_card_read_gbps(void) {
  bml_devices *list = NULL;
  if (bml_devices_discover(NULL, &list) != 0) return 0;
  const bml_device *d = first_selected(list);
  double gbps = 0;
  if (d) {
    size_t bytes = d->max_alloc_bytes / 2;
    if (bytes > ((size_t)1 << 30)) bytes = (size_t)1 << 30; /* 1 GiB: far beyond any cache */
    if (bench_test_quick() && bytes > ((size_t)16 << 20)) bytes = (size_t)16 << 20;
    cl_uint units = 0;
    clGetDeviceInfo((cl_device_id)d->cl_device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL);
    gbps = run_on((cl_platform_id)d->cl_platform, (cl_device_id)d->cl_device, bytes / 16 * 16, units ? units : 1);
  }
  bml_devices_free(list);
  return gbps;
}
