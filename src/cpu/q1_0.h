/* q1_0.h -- the CPU's Q1_0 x Q8_0 kernels: the reference (q1_0.c), the SIMD paths, and the one in use (cpu.c). */
#ifndef BML_Q1_0_H
#define BML_Q1_0_H

#include "base/bml.h"

/* One implementation of the Q1_0 x Q8_0 mat-vec.  prep() turns the
 * activation into whatever the path wants (once per product, shared by every
 * thread); rows() computes a run of rows from it.  Both get n already
 * checked (a positive multiple of 128). */
typedef struct bml__q1_0_kernel {
  const char *name;                      /* "ref", "avx2", "avx512", "neon", "neon-dot" */
  bool (*supported)(void);               /* does this CPU run it? */
  size_t (*prep_size)(size_t n);         /* scratch bytes for prep (64-byte aligned) */
  void (*prep)(const bml_block_q8_0 *a, size_t n, void *scratch);
  void (*rows)(const bml_block_q1_0 *w, size_t rows, size_t n, const bml_block_q8_0 *a,
               const void *scratch, float *out);
} bml__q1_0_kernel;

/* The kernels compiled into this build, best last; NULL-terminated. */
const bml__q1_0_kernel *const *bml__q1_0_kernels(void);
/* The kernel in use: the one forced by bml__q1_0_kernel_force() or
 * BANKML_CPU_PATH, else the best this CPU supports.  Never NULL. */
const bml__q1_0_kernel *bml__q1_0_kernel_active(void);

extern const bml__q1_0_kernel bml__q1_0_ref;
#ifdef BML_HAVE_AVX2
extern const bml__q1_0_kernel bml__q1_0_avx2;
#endif
#ifdef BML_HAVE_AVX512
extern const bml__q1_0_kernel bml__q1_0_avx512;
#endif
#ifdef BML_HAVE_NEON
extern const bml__q1_0_kernel bml__q1_0_neon;     /* AArch64 Advanced SIMD */
extern const bml__q1_0_kernel bml__q1_0_neon_dot; /* with ARMv8.2's dot product (SDOT) */
#endif

/* The activation as the SIMD paths read it: n quants, their
 * 8-bit negations (-(-128) = -128), then the n/32 scales as floats
 * (bml__q1_0_act_split_size(n) bytes).  Cannot fail. */
size_t bml__q1_0_act_split_size(size_t n);
void bml__q1_0_act_split(const bml_block_q8_0 *a, size_t n, void *dst);

/* The portable reference dot product of one row (nb = n/128 blocks). */
float bml__q1_0_dot_ref(const bml_block_q1_0 *w, const bml_block_q8_0 *a, size_t nb);

/* Checks the arguments every mat-vec entry point shares: BML_EINVAL for a
 * NULL pointer or results that overlap the weights or the activation,
 * BML_ESHAPE for n not a positive multiple of 128 or rows whose weights or
 * results could not be in memory. */
int bml__q1_0_check(const void *w, size_t rows, size_t n, const void *a, const void *out);
/* The same without the results (NULL pointers and shape only). */
int bml__q1_0_check_shape(const void *w, size_t rows, size_t n, const void *a);

/* Runs kernel k over rows [0, rows) on the calling thread, with its own scratch. */
int bml__q1_0_run(const bml__q1_0_kernel *k, const bml_block_q1_0 *w, size_t rows, size_t n,
                  const bml_block_q8_0 *a, float *out);

#endif
