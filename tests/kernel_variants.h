/* kernel_variants.h -- the kernels' test builds: OpenCL C that a test puts in place of the device's file
 * ahead of cl/q1_0.cl (the oracle's hooks device_source and source_after, base/hooks.h).
 *
 * cl/q1_0*.cl names no test: a test builds what it needs by defining the
 * file's hooks, as cl/nvidia.cl does for NVIDIA's compiler. */
#ifndef BML_TEST_KERNEL_VARIANTS_H
#define BML_TEST_KERNEL_VARIANTS_H

/* cl/nvidia.cl's hooks written in C, on any device: the byte permute of the
 * full tiles' lookups, the resident token's requests to the L2 made as
 * reads of the same bytes, and the TMA's copies of the table's sources made by
 * work-item 0 (which issues them) into the same slots at the same steps,
 * with nothing to wait for: the barriers of cl/q1_0*.cl alone order them
 * before their reads, and after the slot's earlier reads.  With the options below
 * (NVIDIA's others), the tests check NVIDIA's formulation, its slots,
 * their offsets and a partial last tile's copies on PoCL and Oclgrind. */
#define BML_TEST_NVIDIA_IN_C_OPTIONS "-DBML_RING=1 -DBML_D0HALF=1"
static const char bml_test_nvidia_in_c[] =
    "#define BML_BYTE_PERMUTE 1\n"
    "static inline uint bml_byte_into(uint y, uint h, uint m) { return h | ((y >> (8u * m)) & 0xFFu); }\n"
    "#define BML_BULK_COPY 1\n"
    "static inline void bml_bulk_init(__local ulong *bars) {}\n"
    "static inline void bml_bulk_start(__local ulong *bar, uint bytes) {}\n"
    "static inline void bml_bulk_copy(__local void *dst, __global const void *src, uint bytes, __local ulong *bar) {\n"
    "  for (uint i = 0; i < bytes / 4u; i++) ((__local uint *)dst)[i] = ((__global const uint *)src)[i];\n"
    "}\n"
    "static inline void bml_bulk_wait(__local ulong *bar, uint parity) {}\n"
    "#define BML_L2_PREFETCH(p) ((void)*(volatile __global const char *)(p))\n";

/* The outer step as a multiply and an add, which the oracle must refuse. */
static const char bml_test_unfused_outer[] = "#define BML_OUTER(d0, ab, acc) ((d0) * (ab) + (acc))\n";

/* The device's fma as a double fma rounded to float, which rounds twice
 * (needs cl_khr_fp64): the probe must find it, and the kernels then use
 * the emulation. */
static const char bml_test_twice_rounded_fma[] =
    "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
    "static inline float bml_twice_rounded_fma(float a, float b, float c) {\n"
    "  return (float)fma((double)a, (double)b, (double)c);\n"
    "}\n"
    "#define BML_FMA bml_twice_rounded_fma\n";

/* q1_0_mat_vec_lrb renamed out of the way, and (after cl/q1_0*.cl) one of
 * that name that returns without writing, which the oracle must refuse
 * (its results are not the other kernels'). */
static const char bml_test_lrb_renamed[] = "#define q1_0_mat_vec_lrb bml_test_lrb_unused\n";
static const char bml_test_lrb_writes_nothing[] =
    "#undef q1_0_mat_vec_lrb\n"
    "__kernel __attribute__((reqd_work_group_size(8 / BML_LRLPT * BML_LRROWS, 1, 1)))\n"
    "void q1_0_mat_vec_lrb(__global const uint4 *restrict bits, __global const float *restrict d0,\n"
    "                      __global const char *restrict act_base, const uint desc_off, const uint ndesc,\n"
    "                      __global float *restrict out_base) {}\n";

#endif
