/* test_fakeicd.c -- the fake OpenCL ICD seen through the real loader: platforms, scripted fields, size rules, failures, dispatch. */
#define _GNU_SOURCE /* dladdr */
#include "fakeicdtest.h"

#include <CL/cl_icd.h>

#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CL_DEVICE_PCI_BUS_ID_NV 0x4008
#define CL_DEVICE_PCI_SLOT_ID_NV 0x4009
#define CL_DEVICE_PCI_DOMAIN_ID_NV 0x400A
#define GiB (1ull << 30)

/* What library holds addr ("libfakeicd_a.so", ...). */
static const char *library_of(const void *addr)
{
  Dl_info info;
  cr_assert_neq(dladdr(addr, &info), 0);
  const char *slash = strrchr(info.dli_fname, '/');
  return slash != NULL ? slash + 1 : info.dli_fname;
}

static const char *library_presenting(cl_platform_id p)
{
  return library_of(((struct _cl_icd_dispatch *const *)p)[0]);
}

#define FP_ALL_FLOAT \
  (CL_FP_DENORM | CL_FP_INF_NAN | CL_FP_ROUND_TO_NEAREST | CL_FP_ROUND_TO_ZERO | CL_FP_ROUND_TO_INF | \
   CL_FP_FMA | CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT)

static bool platform_strings_are(cl_platform_id p, const struct want_str *want, size_t n)
{
  bool all = true;
  for (size_t i = 0; i < n; i++) {
    char got[2048];
    platform_string(p, want[i].param, got, sizeof got);
    if (strcmp(got, want[i].value) != 0) {
      cr_log_error("param 0x%x: \"%s\", want \"%s\"", (unsigned)want[i].param, got, want[i].value);
      all = false;
    }
  }
  return all;
}

static bool pci_is(cl_device_id d, cl_uint domain, cl_uint bus, cl_uint dev, cl_uint fn)
{
  cl_device_pci_bus_info_khr pci;
  memset(&pci, 0xff, sizeof pci);
  device_value(d, CL_DEVICE_PCI_BUS_INFO_KHR, &pci, sizeof pci);
  if (pci.pci_domain == domain && pci.pci_bus == bus && pci.pci_device == dev && pci.pci_function == fn) return true;
  cr_log_error("pci %04x:%02x:%02x.%x", pci.pci_domain, pci.pci_bus, pci.pci_device, pci.pci_function);
  return false;
}

/* Whether this device refuses each param with CL_INVALID_VALUE (and
 * leaves the size alone). */
static bool all_refused(cl_device_id d, const cl_uint *params, size_t n)
{
  bool all = true;
  for (size_t i = 0; i < n; i++) {
    unsigned char buf[64];
    size_t len = 12345;
    cl_int full = clGetDeviceInfo(d, params[i], sizeof buf, buf, &len);
    cl_int size = clGetDeviceInfo(d, params[i], 0, NULL, &len);
    if (full != CL_INVALID_VALUE || size != CL_INVALID_VALUE || len != 12345) {
      cr_log_error("param 0x%x: %d, size query %d, size %zu", (unsigned)params[i], full, size, len);
      all = false;
    }
  }
  return all;
}

static const cl_uint topology_params[] = {
  CL_DEVICE_PCI_BUS_INFO_KHR, CL_DEVICE_UUID_KHR, CL_DEVICE_TOPOLOGY_AMD,
  CL_DEVICE_PCI_BUS_ID_NV, CL_DEVICE_PCI_SLOT_ID_NV, CL_DEVICE_PCI_DOMAIN_ID_NV,
};

/* ------------------------------------------------------------------ */
/* Which platforms appear                                              */
/* ------------------------------------------------------------------ */

static const char *const mixed_names[] = {
  "Fake Discrete", "Fake Integrated", "Fake Mali", "Portable Computing Language",
  "Fake Discrete (second ICD)", "Broken Platform",
};

Test(fakeicd, mixed_lists_its_six_platforms_and_nothing_from_the_system) {
  cl_platform_id all[MAX_PLATFORMS];
  use_scenario("mixed.conf");
  cr_assert_eq(list_platforms(all), COUNT(mixed_names), "a seventh platform is the system's PoCL leaking in");
  for (size_t i = 0; i < COUNT(mixed_names); i++)
    platform_named(mixed_names[i]);
}

Test(fakeicd, empty_scenario_has_no_platforms_so_system_icds_are_ignored) {
  cl_uint n = 99;
  use_scenario("empty.conf");
  cr_assert_eq(clGetPlatformIDs(0, NULL, &n), CL_PLATFORM_NOT_FOUND_KHR);
  cr_assert_eq(n, 0, "PoCL from /etc/OpenCL/vendors must not be loaded");
}

Test(fakeicd, no_scenario_variable_means_no_platforms) {
  cl_uint n = 99;
  use_scenario(NULL);
  cr_assert_eq(clGetPlatformIDs(0, NULL, &n), CL_PLATFORM_NOT_FOUND_KHR);
  cr_assert_eq(n, 0);
}

Test(fakeicd, platform_count_query_and_short_array) {
  cl_platform_id two[2] = {NULL, NULL};
  cl_uint n = 0;
  use_scenario("mixed.conf");
  cr_assert_eq(clGetPlatformIDs(0, NULL, &n), CL_SUCCESS);
  cr_assert_eq(n, 6);
  cr_assert_eq(clGetPlatformIDs(2, two, NULL), CL_SUCCESS);
  cr_assert(two[0] != NULL && two[1] != NULL && two[0] != two[1]);
}

/* ------------------------------------------------------------------ */
/* Platform fields                                                     */
/* ------------------------------------------------------------------ */

Test(fakeicd, platform_strings_come_back_as_scripted) {
  static const struct want_str discrete[] = {
    {CL_PLATFORM_NAME, "Fake Discrete"},
    {CL_PLATFORM_VENDOR, "Advanced Micro Devices, Inc."},
    {CL_PLATFORM_VERSION, "OpenCL 2.1 AMD-APP (3590.0)"},
    {CL_PLATFORM_PROFILE, "FULL_PROFILE"},
    {CL_PLATFORM_EXTENSIONS, "cl_khr_icd cl_amd_event_callback"},
    {CL_PLATFORM_ICD_SUFFIX_KHR, "AMD"},
  };
  static const struct want_str pocl[] = {
    {CL_PLATFORM_VENDOR, "The pocl project"},
    {CL_PLATFORM_EXTENSIONS, "cl_khr_icd cl_pocl_content_size"},
    {CL_PLATFORM_ICD_SUFFIX_KHR, "POCL"},
  };
  use_scenario("mixed.conf");
  cr_expect(platform_strings_are(platform_named("Fake Discrete"), discrete, COUNT(discrete)), "platform strings");
  cr_expect(platform_strings_are(platform_named("Portable Computing Language"), pocl, COUNT(pocl)), "platform strings");
}

Test(fakeicd, numeric_version_only_from_opencl_3) {
  cl_version v = 0;
  size_t len = 0;
  use_scenario("mixed.conf");
  cr_assert_eq(clGetPlatformInfo(platform_named("Fake Mali"), CL_PLATFORM_NUMERIC_VERSION, sizeof v, &v, &len),
               CL_SUCCESS);
  cr_expect_eq(v, CL_MAKE_VERSION(3, 0, 0));
  cr_expect_eq(len, sizeof v);
  cr_expect_eq(clGetPlatformInfo(platform_named("Fake Discrete"), CL_PLATFORM_NUMERIC_VERSION, sizeof v, &v, NULL),
               CL_INVALID_VALUE, "an OpenCL 2.1 platform has no numeric version");
}

Test(fakeicd, platform_size_rules_and_unknown_params) {
  cl_platform_id p;
  char buf[64];
  size_t len = 0;
  use_scenario("mixed.conf");
  p = platform_named("Fake Mali");
  cr_assert_eq(clGetPlatformInfo(p, CL_PLATFORM_NAME, 0, NULL, &len), CL_SUCCESS);
  cr_expect_eq(len, sizeof "Fake Mali");
  memset(buf, 'x', sizeof buf);
  cr_expect_eq(clGetPlatformInfo(p, CL_PLATFORM_NAME, len - 1, buf, NULL), CL_INVALID_VALUE);
  cr_expect_eq(buf[0], 'x', "a refused query writes nothing");
  cr_expect_eq(clGetPlatformInfo(p, CL_PLATFORM_NAME, len, buf, NULL), CL_SUCCESS);
  cr_expect_str_eq(buf, "Fake Mali");
  cr_expect_eq(clGetPlatformInfo(p, 0x9999, sizeof buf, buf, &len), CL_INVALID_VALUE);
}

/* ------------------------------------------------------------------ */
/* Device fields                                                       */
/* ------------------------------------------------------------------ */

Test(fakeicd, discrete_card_fields) {
  static const struct want_str strings[] = {
    {CL_DEVICE_NAME, "gfx1030"},
    {CL_DEVICE_VENDOR, "Advanced Micro Devices, Inc."},
    {CL_DEVICE_VERSION, "OpenCL 2.0 AMD-APP (3590.0)"},
    {CL_DEVICE_OPENCL_C_VERSION, "OpenCL C 2.0"},
    {CL_DRIVER_VERSION, "3590.0 (HSA1.1,LC)"},
    {CL_DEVICE_PROFILE, "FULL_PROFILE"},
    {CL_DEVICE_EXTENSIONS, "cl_khr_fp64 cl_khr_global_int32_base_atomics cl_khr_pci_bus_info cl_khr_device_uuid"},
  };
  static const struct want_num numbers[] = {
    {CL_DEVICE_TYPE, 8, CL_DEVICE_TYPE_GPU},
    {CL_DEVICE_VENDOR_ID, 4, 0x1002},
    {CL_DEVICE_MAX_COMPUTE_UNITS, 4, 40},
    {CL_DEVICE_MAX_CLOCK_FREQUENCY, 4, 2581},
    {CL_DEVICE_GLOBAL_MEM_SIZE, 8, 16 * GiB},
    {CL_DEVICE_MAX_MEM_ALLOC_SIZE, 8, 14 * GiB},
    {CL_DEVICE_LOCAL_MEM_SIZE, 8, 64 * 1024},
    {CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof(size_t), 256},
    {CL_DEVICE_HOST_UNIFIED_MEMORY, 4, CL_FALSE},
    {CL_DEVICE_AVAILABLE, 4, CL_TRUE},
    {CL_DEVICE_COMPILER_AVAILABLE, 4, CL_TRUE},
    {CL_DEVICE_SINGLE_FP_CONFIG, 8, FP_ALL_FLOAT},
    {CL_DEVICE_ADDRESS_BITS, 4, 64},
    {CL_DEVICE_ENDIAN_LITTLE, 4, CL_TRUE},
    {CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS, 4, 3},
  };
  static const cl_uchar uuid[16] = {0x3a, 0x0c, 0x1e, 0x55, 0x7f, 0x2b, 0x4d, 0x0a,
                                    0x9e, 0x61, 0x0b, 0x5c, 0x2d, 0x8f, 0x4a, 0x17};
  static const cl_uint refused[] = {CL_DEVICE_TOPOLOGY_AMD, CL_DEVICE_PCI_BUS_ID_NV, CL_DEVICE_NUMERIC_VERSION};
  cl_platform_id p;
  cl_device_id d;
  cl_platform_id owner = NULL;
  cl_uchar got_uuid[16];
  use_scenario("mixed.conf");
  p = platform_named("Fake Discrete");
  d = only_device(p);
  cr_expect(device_strings_are(d, strings, COUNT(strings)), "device strings");
  cr_expect(device_numbers_are(d, numbers, COUNT(numbers)), "device numbers");
  cr_expect(pci_is(d, 0, 3, 0, 0), "PCI address");
  device_value(d, CL_DEVICE_UUID_KHR, got_uuid, sizeof got_uuid);
  cr_expect_arr_eq(got_uuid, uuid, sizeof uuid);
  device_value(d, CL_DEVICE_PLATFORM, &owner, sizeof owner);
  cr_expect_eq(owner, p);
  cr_expect(all_refused(d, refused, COUNT(refused)), "refused queries");
}

Test(fakeicd, integrated_gpu_fields) {
  static const struct want_num numbers[] = {
    {CL_DEVICE_TYPE, 8, CL_DEVICE_TYPE_GPU},
    {CL_DEVICE_VENDOR_ID, 4, 0x8086},
    {CL_DEVICE_HOST_UNIFIED_MEMORY, 4, CL_TRUE},
    {CL_DEVICE_MAX_MEM_ALLOC_SIZE, 8, 4 * GiB},
    {CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof(size_t), 512},
    {CL_DEVICE_NUMERIC_VERSION, 4, CL_MAKE_VERSION(3, 0, 0)},
  };
  cl_device_id d;
  size_t sizes[3];
  use_scenario("mixed.conf");
  d = device_of("Fake Integrated");
  cr_expect(device_numbers_are(d, numbers, COUNT(numbers)), "device numbers");
  cr_expect(pci_is(d, 0, 0, 2, 0), "PCI address");
  device_value(d, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizes, sizeof sizes);
  cr_expect(sizes[0] == 512 && sizes[1] == 512 && sizes[2] == 512);
}

Test(fakeicd, mali_has_no_pci_information_at_all) {
  static const struct want_str strings[] = {{CL_DEVICE_NAME, "Mali-G610 r0p0"}, {CL_DEVICE_VENDOR, "ARM"}};
  static const struct want_num numbers[] = {
    {CL_DEVICE_TYPE, 8, CL_DEVICE_TYPE_GPU},
    {CL_DEVICE_VENDOR_ID, 4, 0x13b5},
    {CL_DEVICE_HOST_UNIFIED_MEMORY, 4, CL_TRUE},
    {CL_DEVICE_MAX_MEM_ALLOC_SIZE, 8, 1 * GiB},
  };
  cl_device_id d;
  use_scenario("mixed.conf");
  d = device_of("Fake Mali");
  cr_expect(device_strings_are(d, strings, COUNT(strings)), "device strings");
  cr_expect(device_numbers_are(d, numbers, COUNT(numbers)), "device numbers");
  cr_expect(all_refused(d, topology_params, COUNT(topology_params)), "refused queries");
}

Test(fakeicd, pocl_device_is_a_cpu) {
  static const struct want_str strings[] = {
    {CL_DEVICE_NAME, "pthread-skylake-avx512"},
    {CL_DEVICE_VENDOR, "GenuineIntel"},
  };
  static const struct want_num numbers[] = {
    {CL_DEVICE_TYPE, 8, CL_DEVICE_TYPE_CPU},
    {CL_DEVICE_HOST_UNIFIED_MEMORY, 4, CL_TRUE},
  };
  cl_device_id d;
  use_scenario("mixed.conf");
  d = device_of("Portable Computing Language");
  cr_expect(device_strings_are(d, strings, COUNT(strings)), "device strings");
  cr_expect(device_numbers_are(d, numbers, COUNT(numbers)), "device numbers");
  cr_expect(all_refused(d, topology_params, COUNT(topology_params)), "refused queries");
}

Test(fakeicd, device_size_rules_and_unknown_params) {
  cl_device_id d;
  size_t len = 0;
  cl_uint u = 7;
  char name[64];
  use_scenario("mixed.conf");
  d = device_of("Fake Discrete");
  cr_assert_eq(clGetDeviceInfo(d, CL_DEVICE_NAME, 0, NULL, &len), CL_SUCCESS);
  cr_expect_eq(len, sizeof "gfx1030");
  cr_expect_eq(clGetDeviceInfo(d, CL_DEVICE_NAME, len - 1, name, NULL), CL_INVALID_VALUE);
  cr_expect_eq(clGetDeviceInfo(d, CL_DEVICE_NAME, sizeof name, name, NULL), CL_SUCCESS, "a larger buffer is fine");
  cr_expect_eq(clGetDeviceInfo(d, CL_DEVICE_PCI_BUS_INFO_KHR, 0, NULL, &len), CL_SUCCESS);
  cr_expect_eq(len, sizeof(cl_device_pci_bus_info_khr));
  cr_expect_eq(clGetDeviceInfo(d, CL_DEVICE_UUID_KHR, 0, NULL, &len), CL_SUCCESS);
  cr_expect_eq(len, CL_UUID_SIZE_KHR);
  cr_expect_eq(clGetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof u, &u, NULL), CL_INVALID_VALUE,
               "a cl_ulong does not fit in 4 bytes");
  cr_expect_eq(u, 7, "a refused query writes nothing");
  cr_expect_eq(clGetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_SIZE, 0, NULL, NULL), CL_SUCCESS);
  cr_expect_eq(clGetDeviceInfo(d, 0x9999, sizeof name, name, &len), CL_INVALID_VALUE);
  cr_expect_eq(clGetDeviceInfo(d, CL_DEVICE_BOARD_NAME_AMD, sizeof name, name, &len), CL_INVALID_VALUE);
}

/* ------------------------------------------------------------------ */
/* One card, two ICDs; a failing platform                              */
/* ------------------------------------------------------------------ */

Test(fakeicd, duplicate_card_is_presented_by_both_libraries) {
  cl_platform_id pa, pb;
  cl_device_id da, db;
  cl_device_pci_bus_info_khr pci_a, pci_b;
  cl_uchar uuid_a[16], uuid_b[16];
  use_scenario("mixed.conf");
  pa = platform_named("Fake Discrete");
  pb = platform_named("Fake Discrete (second ICD)");
  cr_assert_str_eq(library_presenting(pa), "libfakeicd_a.so");
  cr_assert_str_eq(library_presenting(pb), "libfakeicd_b.so");
  cr_assert_str_eq(library_presenting(platform_named("Fake Mali")), "libfakeicd_a.so");
  cr_assert_str_eq(library_presenting(platform_named("Broken Platform")), "libfakeicd_b.so");
  da = only_device(pa);
  db = only_device(pb);
  cr_assert_neq(da, db, "two registrations are two cl_device_id");
  device_value(da, CL_DEVICE_PCI_BUS_INFO_KHR, &pci_a, sizeof pci_a);
  device_value(db, CL_DEVICE_PCI_BUS_INFO_KHR, &pci_b, sizeof pci_b);
  cr_expect_arr_eq(&pci_a, &pci_b, sizeof pci_a);
  device_value(da, CL_DEVICE_UUID_KHR, uuid_a, sizeof uuid_a);
  device_value(db, CL_DEVICE_UUID_KHR, uuid_b, sizeof uuid_b);
  cr_expect_arr_eq(uuid_a, uuid_b, sizeof uuid_a);
}

Test(fakeicd, broken_platform_fails_get_device_ids_with_out_of_host_memory) {
  cl_platform_id p;
  cl_device_id d = NULL;
  cl_uint n = 77;
  use_scenario("mixed.conf");
  p = platform_named("Broken Platform");
  cr_expect_eq(clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, NULL, &n), CL_OUT_OF_HOST_MEMORY);
  cr_expect_eq(clGetDeviceIDs(p, CL_DEVICE_TYPE_GPU, 1, &d, &n), CL_OUT_OF_HOST_MEMORY);
  cr_expect_eq(n, 77, "a failed call leaves the count alone");
  cr_expect_null(d);
}

/* ------------------------------------------------------------------ */
/* clGetDeviceIDs                                                      */
/* ------------------------------------------------------------------ */

struct type_case {
  cl_device_type type;
  cl_int err;
  cl_uint count;
};

static bool type_counts_are(cl_platform_id p, const struct type_case *cases, size_t n)
{
  bool all = true;
  for (size_t i = 0; i < n; i++) {
    cl_uint got = 99;
    cl_int err = clGetDeviceIDs(p, cases[i].type, 0, NULL, &got);
    const bool counted = cases[i].err == CL_SUCCESS || cases[i].err == CL_DEVICE_NOT_FOUND;
    if (err != cases[i].err || (counted && got != cases[i].count)) {
      cr_log_error("type 0x%llx: %d and %u devices, want %d and %u", (unsigned long long)cases[i].type, err, got,
                   cases[i].err, cases[i].count);
      all = false;
    }
  }
  return all;
}

Test(fakeicd, device_type_filter_on_a_cpu_platform) {
  static const struct type_case cases[] = {
    {CL_DEVICE_TYPE_ALL, CL_SUCCESS, 1},
    {CL_DEVICE_TYPE_DEFAULT, CL_SUCCESS, 1},
    {CL_DEVICE_TYPE_CPU, CL_SUCCESS, 1},
    {CL_DEVICE_TYPE_CPU | CL_DEVICE_TYPE_GPU, CL_SUCCESS, 1},
    {CL_DEVICE_TYPE_GPU, CL_DEVICE_NOT_FOUND, 0},
    {CL_DEVICE_TYPE_ACCELERATOR, CL_DEVICE_NOT_FOUND, 0},
    {CL_DEVICE_TYPE_CUSTOM, CL_DEVICE_NOT_FOUND, 0},
  };
  use_scenario("mixed.conf");
  cr_expect(type_counts_are(platform_named("Portable Computing Language"), cases, COUNT(cases)), "device counts by type");
}

Test(fakeicd, custom_devices_stay_out_of_type_all) {
  static const struct type_case cases[] = {
    {CL_DEVICE_TYPE_ALL, CL_SUCCESS, 1},
    {CL_DEVICE_TYPE_ACCELERATOR, CL_SUCCESS, 1},
    {CL_DEVICE_TYPE_CUSTOM, CL_SUCCESS, 1},
    {CL_DEVICE_TYPE_DEFAULT, CL_SUCCESS, 1},
    {CL_DEVICE_TYPE_GPU, CL_DEVICE_NOT_FOUND, 0},
  };
  cl_platform_id p;
  cl_device_id d = NULL;
  char name[128];
  use_scenario("kinds.conf");
  p = platform_named("Intel(R) FPGA Emulation Platform for OpenCL(TM)");
  cr_expect(type_counts_are(p, cases, COUNT(cases)), "device counts by type");
  cr_assert_eq(clGetDeviceIDs(p, CL_DEVICE_TYPE_DEFAULT, 1, &d, NULL), CL_SUCCESS);
  cr_assert_eq(clGetDeviceInfo(d, CL_DEVICE_NAME, sizeof name, name, NULL), CL_SUCCESS);
  cr_expect_str_eq(name, "Intel(R) FPGA Emulation Device", "the default device is the first that is not custom");
}

Test(fakeicd, get_device_ids_argument_errors) {
  cl_platform_id p;
  cl_device_id d[2] = {NULL, NULL};
  cl_uint n = 0;
  use_scenario("kinds.conf");
  p = platform_named("Fake Leftovers");
  cr_expect_eq(clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, d, &n), CL_INVALID_VALUE);
  cr_expect_eq(clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 1, NULL, NULL), CL_INVALID_VALUE);
  cr_expect_eq(clGetDeviceIDs(p, (cl_device_type)1 << 20, 1, d, &n), CL_INVALID_DEVICE_TYPE);
  cr_expect_eq(clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 1, d, &n), CL_SUCCESS);
  cr_expect_eq(n, 2, "the count is the total even when the array is short");
  cr_expect_not_null(d[0]);
  cr_expect_null(d[1]);
}

/* ------------------------------------------------------------------ */
/* Vendor topology scenarios                                           */
/* ------------------------------------------------------------------ */

Test(fakeicd, nvidia_card_answers_only_the_nv_pci_ids) {
  static const struct want_num numbers[] = {
    {CL_DEVICE_VENDOR_ID, 4, 0x10de},
    {CL_DEVICE_PCI_BUS_ID_NV, 4, 0},
    {CL_DEVICE_PCI_SLOT_ID_NV, 4, 0x30},
    {CL_DEVICE_PCI_DOMAIN_ID_NV, 4, 0},
  };
  static const cl_uint refused[] = {CL_DEVICE_PCI_BUS_INFO_KHR, CL_DEVICE_UUID_KHR, CL_DEVICE_TOPOLOGY_AMD};
  cl_device_id d;
  cl_uint slot = 0;
  use_scenario("nvidia.conf");
  d = device_of("NVIDIA CUDA");
  cr_expect(device_numbers_are(d, numbers, COUNT(numbers)), "device numbers");
  device_value(d, CL_DEVICE_PCI_SLOT_ID_NV, &slot, sizeof slot);
  cr_expect_eq(slot >> 3, 6, "device");
  cr_expect_eq(slot & 7, 0, "function");
  cr_expect(all_refused(d, refused, COUNT(refused)), "refused queries");
}

Test(fakeicd, amd_card_answers_only_the_amd_topology) {
  static const cl_uint refused[] = {
    CL_DEVICE_PCI_BUS_INFO_KHR, CL_DEVICE_UUID_KHR,
    CL_DEVICE_PCI_BUS_ID_NV, CL_DEVICE_PCI_SLOT_ID_NV, CL_DEVICE_PCI_DOMAIN_ID_NV,
  };
  cl_device_id d;
  cl_device_topology_amd t;
  use_scenario("amd-topology.conf");
  d = device_of("AMD Accelerated Parallel Processing");
  device_value(d, CL_DEVICE_TOPOLOGY_AMD, &t, sizeof t);
  cr_expect_eq(t.raw.type, CL_DEVICE_TOPOLOGY_TYPE_PCIE_AMD);
  cr_expect_eq((unsigned char)t.pcie.bus, 0x03);
  cr_expect_eq(t.pcie.device, 0);
  cr_expect_eq(t.pcie.function, 0);
  cr_expect(all_refused(d, refused, COUNT(refused)), "refused queries");
}

/* The IL version and the sub-group sizes, each answered only when given. */
Test(fakeicd, il_version_and_sub_group_sizes_as_scripted) {
  static const char text[] =
    "[platform]\nname = Subgroups\n"
    "[device]\nname = Intel-like\nil_version = SPIR-V_1.0 SPIR-V_1.2\nsub_group_sizes = 8,16,32\n"
    "[device]\nname = NV-like\nnv_warp_size = 32\n"
    "[device]\nname = AMD-like\namd_wavefront_width = 64\n";
  static const struct want_str il[] = {{CL_DEVICE_IL_VERSION_KHR, "SPIR-V_1.0 SPIR-V_1.2"}};
  static const struct want_num warp[] = {{CL_DEVICE_WARP_SIZE_NV, 4, 32}};
  static const struct want_num wave[] = {{CL_DEVICE_WAVEFRONT_WIDTH_AMD, 4, 64}};
  static const cl_uint unsaid[] = {CL_DEVICE_IL_VERSION_KHR, CL_DEVICE_SUB_GROUP_SIZES_INTEL,
                                   CL_DEVICE_WAVEFRONT_WIDTH_AMD};
  char path[4096];
  cl_device_id d[3];
  cl_uint n = 0;
  size_t size = 0, sizes[4] = {0};
  use_text_scenario(text, path, sizeof path);
  cl_int err = clGetDeviceIDs(platform_named("Subgroups"), CL_DEVICE_TYPE_ALL, 3, d, &n);
  unlink(path);
  cr_assert_eq(err, CL_SUCCESS);
  cr_assert_eq(n, 3);
  cr_expect(device_strings_are(d[0], il, COUNT(il)), "IL version");
  cr_expect_eq(clGetDeviceInfo(d[0], CL_DEVICE_SUB_GROUP_SIZES_INTEL, 0, NULL, &size), CL_SUCCESS);
  cr_expect_eq(size, 3 * sizeof(size_t));
  cr_expect_eq(clGetDeviceInfo(d[0], CL_DEVICE_SUB_GROUP_SIZES_INTEL, sizeof sizes, sizes, NULL), CL_SUCCESS);
  cr_expect(sizes[0] == 8 && sizes[1] == 16 && sizes[2] == 32 && sizes[3] == 0);
  cr_expect(device_numbers_are(d[1], warp, COUNT(warp)), "warp size");
  cr_expect(device_numbers_are(d[2], wave, COUNT(wave)), "wavefront width");
  cr_expect(all_refused(d[1], unsaid, COUNT(unsaid)), "queries not given");
}

Test(fakeicd, llvmpipe_is_a_gpu_without_pci) {
  static const struct want_str strings[] = {{CL_DEVICE_NAME, "llvmpipe (LLVM 15.0.7, 256 bits)"}};
  static const struct want_num numbers[] = {
    {CL_DEVICE_TYPE, 8, CL_DEVICE_TYPE_GPU},
    {CL_DEVICE_HOST_UNIFIED_MEMORY, 4, CL_TRUE},
    {CL_DEVICE_VENDOR_ID, 4, 0x10005},
  };
  cl_device_id d;
  use_scenario("llvmpipe.conf");
  d = device_of("rusticl");
  cr_expect(device_strings_are(d, strings, COUNT(strings)), "device strings");
  cr_expect(device_numbers_are(d, numbers, COUNT(numbers)), "device numbers");
  cr_expect(all_refused(d, topology_params, COUNT(topology_params)), "refused queries");
}

Test(fakeicd, unusable_devices_say_so) {
  static const struct want_num unavailable[] = {
    {CL_DEVICE_AVAILABLE, 4, CL_FALSE}, {CL_DEVICE_COMPILER_AVAILABLE, 4, CL_TRUE},
  };
  static const struct want_num no_compiler[] = {
    {CL_DEVICE_AVAILABLE, 4, CL_TRUE}, {CL_DEVICE_COMPILER_AVAILABLE, 4, CL_FALSE},
    {CL_DEVICE_MAX_MEM_ALLOC_SIZE, 8, GiB / 4},  /* a quarter of the default 1 GiB */
  };
  cl_device_id d[2];
  cl_uint n = 0;
  use_scenario("kinds.conf");
  cr_assert_eq(clGetDeviceIDs(platform_named("Fake Leftovers"), CL_DEVICE_TYPE_GPU, 2, d, &n), CL_SUCCESS);
  cr_assert_eq(n, 2);
  cr_expect(device_numbers_are(d[0], unavailable, COUNT(unavailable)), "device numbers");
  cr_expect(device_numbers_are(d[1], no_compiler, COUNT(no_compiler)), "device numbers");
}

/* ------------------------------------------------------------------ */
/* Contexts and the rest of the table                                  */
/* ------------------------------------------------------------------ */

Test(fakeicd, contexts_are_never_created) {
  cl_platform_id p;
  cl_device_id d;
  cl_int err = 0;
  use_scenario("mixed.conf");
  p = platform_named("Fake Discrete");
  d = only_device(p);
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)p, 0};
  cr_expect_null(clCreateContext(NULL, 1, &d, NULL, NULL, &err));
  cr_expect_eq(err, CL_DEVICE_NOT_AVAILABLE);
  cr_expect_null(clCreateContext(props, 1, &d, NULL, NULL, NULL), "errcode_ret may be NULL");
  err = 0;
  cr_expect_null(clCreateContextFromType(props, CL_DEVICE_TYPE_GPU, NULL, NULL, &err));
  cr_expect_eq(err, CL_DEVICE_NOT_AVAILABLE);
  cr_expect_null(clCreateContextFromType(props, CL_DEVICE_TYPE_CPU, NULL, NULL, &err));
  cr_expect_eq(err, CL_DEVICE_NOT_FOUND);
  cr_expect_eq(clRetainDevice(d), CL_SUCCESS);
  cr_expect_eq(clReleaseDevice(d), CL_SUCCESS);
}

Test(fakeicd, context_error_is_scriptable) {
  cl_device_id d[2];
  cl_int err = 0;
  use_scenario("kinds.conf");
  cr_assert_eq(clGetDeviceIDs(platform_named("Fake Leftovers"), CL_DEVICE_TYPE_GPU, 2, d, NULL), CL_SUCCESS);
  cr_expect_null(clCreateContext(NULL, 1, &d[1], NULL, NULL, &err));
  cr_expect_eq(err, CL_OUT_OF_RESOURCES);
}

Test(fakeicd, every_dispatch_entry_is_set_and_unimplemented_ones_fail_cleanly) {
  cl_platform_id p;
  cl_device_id d;
  const struct _cl_icd_dispatch *table;
  void *slots[sizeof(struct _cl_icd_dispatch) / sizeof(void *)];
  cl_uint n = 5;
  cl_ulong t = 0;
  use_scenario("mixed.conf");
  p = platform_named("Fake Integrated");
  d = only_device(p);
  table = ((struct _cl_icd_dispatch *const *)p)[0];
  memcpy(slots, table, sizeof slots);
  for (size_t i = 0; i < COUNT(slots); i++)
    cr_expect_not_null(slots[i], "dispatch entry %zu is NULL", i);
  cr_expect_eq(clCreateSubDevices(d, NULL, 0, NULL, &n), CL_INVALID_OPERATION);
  cr_expect_eq(clGetHostTimer(d, &t), CL_INVALID_OPERATION);
  cr_expect_eq(clUnloadPlatformCompiler(p), CL_INVALID_OPERATION);
  cr_expect_null(clGetExtensionFunctionAddressForPlatform(p, "clNoSuchFunctionFAKE"));
}
