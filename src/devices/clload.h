/* clload.h -- the OpenCL ICD loader, opened at run time: every entry point bankml-cl calls, through one table. */
#ifndef BML_CLLOAD_H
#define BML_CLLOAD_H

/* OpenCL 1.2 is the floor (ARM boards, older drivers): newer entry points
 * are never called, and clCreateCommandQueue is used on purpose. */
#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>
#include <CL/cl_ext.h>

#include <stdbool.h>
#include <stddef.h>

/* libbankml-cl and the command link no OpenCL library: they dlopen the ICD
 * loader ("libOpenCL.so.1") once, at the first call that needs it, and
 * resolve every entry point below into one table (bml__cl_api).  Without a
 * loader the library and the command still start, and run on the CPU.
 * The headers are still used, for the types and constants.
 *
 * Each entry point is one line of this list:
 *   I(name, (parameters))                 returns cl_int
 *   O(type, name, (parameters))           returns type, its error in the
 *                                         last parameter, cl_int *errcode_ret
 * and one #define below that sends `name` through the table.  The
 * parameters are the header's (CL/cl.h), with their names: a call to an
 * entry point the loader lacks (an older loader) reaches a stand-in
 * defined from them, which returns BML_ENOTSUP (or sets *errcode_ret to it
 * and returns NULL) instead of crashing; the compiler checks the list
 * against the header's prototypes. */
#define BML_CL_ENTRY_POINTS(I, O)                                                                             \
  I(clGetPlatformIDs, (cl_uint num_entries, cl_platform_id *platforms, cl_uint *num_platforms))               \
  I(clGetPlatformInfo, (cl_platform_id platform, cl_platform_info param_name, size_t param_value_size,         \
                        void *param_value, size_t *param_value_size_ret))                                      \
  I(clGetDeviceIDs, (cl_platform_id platform, cl_device_type device_type, cl_uint num_entries,                 \
                     cl_device_id *devices, cl_uint *num_devices))                                             \
  I(clGetDeviceInfo, (cl_device_id device, cl_device_info param_name, size_t param_value_size,                 \
                      void *param_value, size_t *param_value_size_ret))                                        \
  O(cl_context, clCreateContext, (const cl_context_properties *properties, cl_uint num_devices,               \
                                  const cl_device_id *devices,                                                 \
                                  void(CL_CALLBACK *pfn_notify)(const char *, const void *, size_t, void *),   \
                                  void *user_data, cl_int *errcode_ret))                                       \
  I(clRetainContext, (cl_context context))                                                                     \
  I(clReleaseContext, (cl_context context))                                                                    \
  I(clGetContextInfo, (cl_context context, cl_context_info param_name, size_t param_value_size,                \
                       void *param_value, size_t *param_value_size_ret))                                       \
  O(cl_command_queue, clCreateCommandQueue, (cl_context context, cl_device_id device,                         \
                                             cl_command_queue_properties properties, cl_int *errcode_ret))    \
  I(clRetainCommandQueue, (cl_command_queue command_queue))                                                    \
  I(clReleaseCommandQueue, (cl_command_queue command_queue))                                                   \
  I(clGetCommandQueueInfo, (cl_command_queue command_queue, cl_command_queue_info param_name,                  \
                            size_t param_value_size, void *param_value, size_t *param_value_size_ret))        \
  O(cl_mem, clCreateBuffer, (cl_context context, cl_mem_flags flags, size_t size, void *host_ptr,             \
                             cl_int *errcode_ret))                                                             \
  I(clRetainMemObject, (cl_mem memobj))                                                                        \
  I(clReleaseMemObject, (cl_mem memobj))                                                                       \
  O(cl_program, clCreateProgramWithSource, (cl_context context, cl_uint count, const char **strings,          \
                                            const size_t *lengths, cl_int *errcode_ret))                      \
  O(cl_program, clCreateProgramWithBinary, (cl_context context, cl_uint num_devices,                          \
                                            const cl_device_id *device_list, const size_t *lengths,           \
                                            const unsigned char **binaries, cl_int *binary_status,            \
                                            cl_int *errcode_ret))                                              \
  I(clBuildProgram, (cl_program program, cl_uint num_devices, const cl_device_id *device_list,                 \
                     const char *options, void(CL_CALLBACK *pfn_notify)(cl_program, void *), void *user_data)) \
  I(clGetProgramInfo, (cl_program program, cl_program_info param_name, size_t param_value_size,                \
                       void *param_value, size_t *param_value_size_ret))                                       \
  I(clGetProgramBuildInfo, (cl_program program, cl_device_id device, cl_program_build_info param_name,         \
                            size_t param_value_size, void *param_value, size_t *param_value_size_ret))        \
  I(clRetainProgram, (cl_program program))                                                                     \
  I(clReleaseProgram, (cl_program program))                                                                    \
  O(cl_kernel, clCreateKernel, (cl_program program, const char *kernel_name, cl_int *errcode_ret))            \
  I(clRetainKernel, (cl_kernel kernel))                                                                        \
  I(clReleaseKernel, (cl_kernel kernel))                                                                       \
  I(clSetKernelArg, (cl_kernel kernel, cl_uint arg_index, size_t arg_size, const void *arg_value))            \
  I(clGetKernelInfo, (cl_kernel kernel, cl_kernel_info param_name, size_t param_value_size, void *param_value, \
                      size_t *param_value_size_ret))                                                           \
  I(clGetKernelWorkGroupInfo, (cl_kernel kernel, cl_device_id device, cl_kernel_work_group_info param_name,    \
                               size_t param_value_size, void *param_value, size_t *param_value_size_ret))     \
  I(clEnqueueNDRangeKernel, (cl_command_queue command_queue, cl_kernel kernel, cl_uint work_dim,               \
                             const size_t *global_work_offset, const size_t *global_work_size,                \
                             const size_t *local_work_size, cl_uint num_events_in_wait_list,                   \
                             const cl_event *event_wait_list, cl_event *event))                                \
  I(clEnqueueWriteBuffer, (cl_command_queue command_queue, cl_mem buffer, cl_bool blocking_write,              \
                           size_t offset, size_t size, const void *ptr, cl_uint num_events_in_wait_list,      \
                           const cl_event *event_wait_list, cl_event *event))                                  \
  I(clEnqueueReadBuffer, (cl_command_queue command_queue, cl_mem buffer, cl_bool blocking_read, size_t offset, \
                          size_t size, void *ptr, cl_uint num_events_in_wait_list,                             \
                          const cl_event *event_wait_list, cl_event *event))                                   \
  I(clEnqueueCopyBuffer, (cl_command_queue command_queue, cl_mem src_buffer, cl_mem dst_buffer,                \
                          size_t src_offset, size_t dst_offset, size_t size, cl_uint num_events_in_wait_list, \
                          const cl_event *event_wait_list, cl_event *event))                                   \
  I(clEnqueueFillBuffer, (cl_command_queue command_queue, cl_mem buffer, const void *pattern,                  \
                          size_t pattern_size, size_t offset, size_t size, cl_uint num_events_in_wait_list,   \
                          const cl_event *event_wait_list, cl_event *event))                                   \
  O(void *, clEnqueueMapBuffer, (cl_command_queue command_queue, cl_mem buffer, cl_bool blocking_map,         \
                                 cl_map_flags map_flags, size_t offset, size_t size,                          \
                                 cl_uint num_events_in_wait_list, const cl_event *event_wait_list,             \
                                 cl_event *event, cl_int *errcode_ret))                                        \
  I(clEnqueueUnmapMemObject, (cl_command_queue command_queue, cl_mem memobj, void *mapped_ptr,                 \
                              cl_uint num_events_in_wait_list, const cl_event *event_wait_list,               \
                              cl_event *event))                                                                \
  I(clEnqueueMarkerWithWaitList, (cl_command_queue command_queue, cl_uint num_events_in_wait_list,             \
                                  const cl_event *event_wait_list, cl_event *event))                           \
  I(clEnqueueBarrierWithWaitList, (cl_command_queue command_queue, cl_uint num_events_in_wait_list,            \
                                   const cl_event *event_wait_list, cl_event *event))                          \
  I(clFlush, (cl_command_queue command_queue))                                                                 \
  I(clFinish, (cl_command_queue command_queue))                                                                \
  I(clWaitForEvents, (cl_uint num_events, const cl_event *event_list))                                         \
  I(clGetEventInfo, (cl_event event, cl_event_info param_name, size_t param_value_size, void *param_value,    \
                     size_t *param_value_size_ret))                                                            \
  I(clGetEventProfilingInfo, (cl_event event, cl_profiling_info param_name, size_t param_value_size,           \
                              void *param_value, size_t *param_value_size_ret))                               \
  O(cl_event, clCreateUserEvent, (cl_context context, cl_int *errcode_ret))                                    \
  I(clSetUserEventStatus, (cl_event event, cl_int execution_status))                                           \
  I(clRetainEvent, (cl_event event))                                                                           \
  I(clReleaseEvent, (cl_event event))                                                                          \
  I(clSetEventCallback, (cl_event event, cl_int command_exec_callback_type,                                    \
                         void(CL_CALLBACK *pfn_notify)(cl_event, cl_int, void *), void *user_data))

/* The table: each member has the type of the header's declaration. */
#define BML_CL_MEMBER_I(name, params) __typeof__(name) *name;
#define BML_CL_MEMBER_O(type, name, params) __typeof__(name) *name;
typedef struct {
  BML_CL_ENTRY_POINTS(BML_CL_MEMBER_I, BML_CL_MEMBER_O)
} bml__cl_api;
#undef BML_CL_MEMBER_I
#undef BML_CL_MEMBER_O

#define BML_CL_COUNT_I(name, params) +1
#define BML_CL_COUNT_O(type, name, params) +1
enum { BML_CL_ENTRY_COUNT = 0 BML_CL_ENTRY_POINTS(BML_CL_COUNT_I, BML_CL_COUNT_O) };
#undef BML_CL_COUNT_I
#undef BML_CL_COUNT_O

/* The table, the loader opened (once a process, thread-safe) at the first
 * call.  Never NULL: without a loader, or for an entry point it lacks,
 * the member is the stand-in that returns BML_ENOTSUP.  Cannot fail. */
const bml__cl_api *bml__cl(void);

/* What opening the loader found. */
typedef struct {
  const char *library; /* the file name opened: "libOpenCL.so.1" (or BANKML_TEST_OPENCL_LOADER's) */
  bool loaded;         /* false: no loader; every entry point is a stand-in */
  char error[512];     /* dlerror()'s words when not loaded, else "" */
  const char *missing[BML_CL_ENTRY_COUNT]; /* the entry points the loader lacks (static names) */
  size_t nmissing;
} bml__cl_loader;

/* An extension's entry point for platform p (clGetExtensionFunctionAddressForPlatform,
 * which the list above cannot hold: it returns a pointer and no error),
 * or NULL where the loader or the platform has none.  Cannot fail. */
void *bml__cl_extension(cl_platform_id p, const char *name);

/* The loader's state (opening it first, as bml__cl does).  Cannot fail. */
const bml__cl_loader *bml__cl_loader_state(void);

/* The loader's own description, through its cl_icdl extension
 * (clGetICDLoaderInfoOCLICD: ocl-icd and the Khronos loader answer it):
 * each string into its buffer (len bytes each), "" where not answered.
 * Returns false when there is no loader or it does not answer at all.
 * Asking may make the loader read its .icd files and load the drivers,
 * as the first clGetPlatformIDs does. */
bool bml__cl_loader_info(char *name, char *vendor, char *version, char *opencl_version, size_t len);

/* The names each call site uses, sent through the table.  A file that
 * defines entry points of its own (a test that wraps the loader's) defines
 * BML_CL_DIRECT before including this, and calls them directly.  A name
 * in the list above without its line here (or the reverse) does not
 * compile (clload.c checks). */
#ifndef BML_CL_DIRECT
#define clGetPlatformIDs (bml__cl()->clGetPlatformIDs)
#define clGetPlatformInfo (bml__cl()->clGetPlatformInfo)
#define clGetDeviceIDs (bml__cl()->clGetDeviceIDs)
#define clGetDeviceInfo (bml__cl()->clGetDeviceInfo)
#define clCreateContext (bml__cl()->clCreateContext)
#define clRetainContext (bml__cl()->clRetainContext)
#define clReleaseContext (bml__cl()->clReleaseContext)
#define clGetContextInfo (bml__cl()->clGetContextInfo)
#define clCreateCommandQueue (bml__cl()->clCreateCommandQueue)
#define clRetainCommandQueue (bml__cl()->clRetainCommandQueue)
#define clReleaseCommandQueue (bml__cl()->clReleaseCommandQueue)
#define clGetCommandQueueInfo (bml__cl()->clGetCommandQueueInfo)
#define clCreateBuffer (bml__cl()->clCreateBuffer)
#define clRetainMemObject (bml__cl()->clRetainMemObject)
#define clReleaseMemObject (bml__cl()->clReleaseMemObject)
#define clCreateProgramWithSource (bml__cl()->clCreateProgramWithSource)
#define clCreateProgramWithBinary (bml__cl()->clCreateProgramWithBinary)
#define clBuildProgram (bml__cl()->clBuildProgram)
#define clGetProgramInfo (bml__cl()->clGetProgramInfo)
#define clGetProgramBuildInfo (bml__cl()->clGetProgramBuildInfo)
#define clRetainProgram (bml__cl()->clRetainProgram)
#define clReleaseProgram (bml__cl()->clReleaseProgram)
#define clCreateKernel (bml__cl()->clCreateKernel)
#define clRetainKernel (bml__cl()->clRetainKernel)
#define clReleaseKernel (bml__cl()->clReleaseKernel)
#define clSetKernelArg (bml__cl()->clSetKernelArg)
#define clGetKernelInfo (bml__cl()->clGetKernelInfo)
#define clGetKernelWorkGroupInfo (bml__cl()->clGetKernelWorkGroupInfo)
#define clEnqueueNDRangeKernel (bml__cl()->clEnqueueNDRangeKernel)
#define clEnqueueWriteBuffer (bml__cl()->clEnqueueWriteBuffer)
#define clEnqueueReadBuffer (bml__cl()->clEnqueueReadBuffer)
#define clEnqueueCopyBuffer (bml__cl()->clEnqueueCopyBuffer)
#define clEnqueueFillBuffer (bml__cl()->clEnqueueFillBuffer)
#define clEnqueueMapBuffer (bml__cl()->clEnqueueMapBuffer)
#define clEnqueueUnmapMemObject (bml__cl()->clEnqueueUnmapMemObject)
#define clEnqueueMarkerWithWaitList (bml__cl()->clEnqueueMarkerWithWaitList)
#define clEnqueueBarrierWithWaitList (bml__cl()->clEnqueueBarrierWithWaitList)
#define clFlush (bml__cl()->clFlush)
#define clFinish (bml__cl()->clFinish)
#define clWaitForEvents (bml__cl()->clWaitForEvents)
#define clGetEventInfo (bml__cl()->clGetEventInfo)
#define clGetEventProfilingInfo (bml__cl()->clGetEventProfilingInfo)
#define clCreateUserEvent (bml__cl()->clCreateUserEvent)
#define clSetUserEventStatus (bml__cl()->clSetUserEventStatus)
#define clRetainEvent (bml__cl()->clRetainEvent)
#define clReleaseEvent (bml__cl()->clReleaseEvent)
#define clSetEventCallback (bml__cl()->clSetEventCallback)

/* Each name of the list has its line above: spelt out, it is longer. */
#define BML_CL_SPELL_(x) #x
#define BML_CL_SPELL(x) BML_CL_SPELL_(x)
#define BML_CL_SENT_I(name, params) \
  _Static_assert(sizeof BML_CL_SPELL(name) > sizeof #name, #name " needs its #define in clload.h");
#define BML_CL_SENT_O(type, name, params) \
  _Static_assert(sizeof BML_CL_SPELL(name) > sizeof #name, #name " needs its #define in clload.h");
BML_CL_ENTRY_POINTS(BML_CL_SENT_I, BML_CL_SENT_O)
#undef BML_CL_SENT_I
#undef BML_CL_SENT_O
#endif

#endif
