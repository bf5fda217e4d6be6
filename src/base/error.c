/* error.c -- names and messages for bankml-cl's error codes and OpenCL's cl_int codes. */
#include "base/bml.h"

#include <stddef.h>

typedef struct {
  int code;
  const char *name;
  const char *msg;
} err_entry;

/* OpenCL's codes are numbered by the Khronos headers; they are written out
 * here so that the table does not depend on which header version is
 * installed (older ones lack the newer codes). */
static const err_entry cl_errors[] = {
    {0, "CL_SUCCESS", "success"},
    {-1, "CL_DEVICE_NOT_FOUND", "no OpenCL device of the requested type"},
    {-2, "CL_DEVICE_NOT_AVAILABLE", "OpenCL device not available"},
    {-3, "CL_COMPILER_NOT_AVAILABLE", "OpenCL compiler not available"},
    {-4, "CL_MEM_OBJECT_ALLOCATION_FAILURE", "device memory allocation failed"},
    {-5, "CL_OUT_OF_RESOURCES", "device out of resources"},
    {-6, "CL_OUT_OF_HOST_MEMORY", "OpenCL out of host memory"},
    {-7, "CL_PROFILING_INFO_NOT_AVAILABLE", "profiling information not available"},
    {-8, "CL_MEM_COPY_OVERLAP", "overlapping copy"},
    {-9, "CL_IMAGE_FORMAT_MISMATCH", "image format mismatch"},
    {-10, "CL_IMAGE_FORMAT_NOT_SUPPORTED", "image format not supported"},
    {-11, "CL_BUILD_PROGRAM_FAILURE", "OpenCL program build failed"},
    {-12, "CL_MAP_FAILURE", "map failed"},
    {-13, "CL_MISALIGNED_SUB_BUFFER_OFFSET", "misaligned sub-buffer offset"},
    {-14, "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST", "an event in the wait list failed"},
    {-15, "CL_COMPILE_PROGRAM_FAILURE", "OpenCL program compilation failed"},
    {-16, "CL_LINKER_NOT_AVAILABLE", "OpenCL linker not available"},
    {-17, "CL_LINK_PROGRAM_FAILURE", "OpenCL program link failed"},
    {-18, "CL_DEVICE_PARTITION_FAILED", "device partition failed"},
    {-19, "CL_KERNEL_ARG_INFO_NOT_AVAILABLE", "kernel argument info not available"},
    {-30, "CL_INVALID_VALUE", "invalid value"},
    {-31, "CL_INVALID_DEVICE_TYPE", "invalid device type"},
    {-32, "CL_INVALID_PLATFORM", "invalid platform"},
    {-33, "CL_INVALID_DEVICE", "invalid device"},
    {-34, "CL_INVALID_CONTEXT", "invalid context"},
    {-35, "CL_INVALID_QUEUE_PROPERTIES", "invalid queue properties"},
    {-36, "CL_INVALID_COMMAND_QUEUE", "invalid command queue"},
    {-37, "CL_INVALID_HOST_PTR", "invalid host pointer"},
    {-38, "CL_INVALID_MEM_OBJECT", "invalid memory object"},
    {-39, "CL_INVALID_IMAGE_FORMAT_DESCRIPTOR", "invalid image format descriptor"},
    {-40, "CL_INVALID_IMAGE_SIZE", "invalid image size"},
    {-41, "CL_INVALID_SAMPLER", "invalid sampler"},
    {-42, "CL_INVALID_BINARY", "invalid binary"},
    {-43, "CL_INVALID_BUILD_OPTIONS", "invalid build options"},
    {-44, "CL_INVALID_PROGRAM", "invalid program"},
    {-45, "CL_INVALID_PROGRAM_EXECUTABLE", "invalid program executable"},
    {-46, "CL_INVALID_KERNEL_NAME", "invalid kernel name"},
    {-47, "CL_INVALID_KERNEL_DEFINITION", "invalid kernel definition"},
    {-48, "CL_INVALID_KERNEL", "invalid kernel"},
    {-49, "CL_INVALID_ARG_INDEX", "invalid argument index"},
    {-50, "CL_INVALID_ARG_VALUE", "invalid argument value"},
    {-51, "CL_INVALID_ARG_SIZE", "invalid argument size"},
    {-52, "CL_INVALID_KERNEL_ARGS", "invalid kernel arguments"},
    {-53, "CL_INVALID_WORK_DIMENSION", "invalid work dimension"},
    {-54, "CL_INVALID_WORK_GROUP_SIZE", "invalid work-group size"},
    {-55, "CL_INVALID_WORK_ITEM_SIZE", "invalid work-item size"},
    {-56, "CL_INVALID_GLOBAL_OFFSET", "invalid global offset"},
    {-57, "CL_INVALID_EVENT_WAIT_LIST", "invalid event wait list"},
    {-58, "CL_INVALID_EVENT", "invalid event"},
    {-59, "CL_INVALID_OPERATION", "invalid operation"},
    {-60, "CL_INVALID_GL_OBJECT", "invalid GL object"},
    {-61, "CL_INVALID_BUFFER_SIZE", "invalid buffer size"},
    {-62, "CL_INVALID_MIP_LEVEL", "invalid mip level"},
    {-63, "CL_INVALID_GLOBAL_WORK_SIZE", "invalid global work size"},
    {-64, "CL_INVALID_PROPERTY", "invalid property"},
    {-65, "CL_INVALID_IMAGE_DESCRIPTOR", "invalid image descriptor"},
    {-66, "CL_INVALID_COMPILER_OPTIONS", "invalid compiler options"},
    {-67, "CL_INVALID_LINKER_OPTIONS", "invalid linker options"},
    {-68, "CL_INVALID_DEVICE_PARTITION_COUNT", "invalid device partition count"},
    {-69, "CL_INVALID_PIPE_SIZE", "invalid pipe size"},
    {-70, "CL_INVALID_DEVICE_QUEUE", "invalid device queue"},
    {-71, "CL_INVALID_SPEC_ID", "invalid specialization constant id"},
    {-72, "CL_MAX_SIZE_RESTRICTION_EXCEEDED", "maximum size restriction exceeded"},
    {-1000, "CL_INVALID_GL_SHAREGROUP_REFERENCE_KHR", "invalid GL share group reference"},
    {-1001, "CL_PLATFORM_NOT_FOUND_KHR", "no OpenCL platform found (ICD loader)"},
    {-1057, "CL_DEVICE_PARTITION_FAILED_EXT", "device partition failed"},
    {-1058, "CL_INVALID_PARTITION_COUNT_EXT", "invalid partition count"},
    {-1059, "CL_INVALID_PARTITION_NAME_EXT", "invalid partition name"},
    {-1092, "CL_EGL_RESOURCE_NOT_ACQUIRED_KHR", "EGL resource not acquired"},
    {-1093, "CL_INVALID_EGL_OBJECT_KHR", "invalid EGL object"},
    {-1094, "CL_INVALID_ACCELERATOR_INTEL", "invalid accelerator"},
    {-1095, "CL_INVALID_ACCELERATOR_TYPE_INTEL", "invalid accelerator type"},
    {-1096, "CL_INVALID_ACCELERATOR_DESCRIPTOR_INTEL", "invalid accelerator descriptor"},
    {-1097, "CL_ACCELERATOR_TYPE_NOT_SUPPORTED_INTEL", "accelerator type not supported"},
    {-1098, "CL_INVALID_VA_API_MEDIA_ADAPTER_INTEL", "invalid VA-API media adapter"},
    {-1099, "CL_INVALID_VA_API_MEDIA_SURFACE_INTEL", "invalid VA-API media surface"},
    {-1100, "CL_VA_API_MEDIA_SURFACE_ALREADY_ACQUIRED_INTEL", "VA-API media surface already acquired"},
    {-1101, "CL_VA_API_MEDIA_SURFACE_NOT_ACQUIRED_INTEL", "VA-API media surface not acquired"},
    {-1108, "CL_COMMAND_TERMINATED_ITSELF_WITH_FAILURE_ARM", "a command terminated itself with a failure"},
    {-1121, "CL_CONTEXT_TERMINATED_KHR", "the context was terminated (the device was lost or reset)"},
    {-1138, "CL_INVALID_COMMAND_BUFFER_KHR", "invalid command buffer"},
    {-1139, "CL_INVALID_SYNC_POINT_WAIT_LIST_KHR", "invalid sync point wait list"},
    {-1140, "CL_INCOMPATIBLE_COMMAND_QUEUE_KHR", "incompatible command queue"},
    {-1141, "CL_INVALID_MUTABLE_COMMAND_KHR", "invalid mutable command"},
    {-1142, "CL_INVALID_SEMAPHORE_KHR", "invalid semaphore"},
};

static const err_entry bml_errors[] = {
#define BML_XX_(name, code, msg) {(code), "BML_" #name, (msg)},
    BML_ERRNO_MAP(BML_XX_)
#undef BML_XX_
};

static const err_entry *find(int err) {
  const err_entry *table = err <= BML_ERR_FIRST_ ? bml_errors : cl_errors;
  size_t len = err <= BML_ERR_FIRST_ ? BML_ARRAY_SIZE(bml_errors) : BML_ARRAY_SIZE(cl_errors);
  for (size_t i = 0; i < len; i++)
    if (table[i].code == err) return &table[i];
  return NULL;
}

const char *bml_strerror(int err) {
  const err_entry *e = find(err);
  return e ? e->msg : "unknown error";
}

const char *bml_err_name(int err) {
  const err_entry *e = find(err);
  return e ? e->name : "unknown error";
}

const char *bml_version_string(void) { return PACKAGE_VERSION; }
