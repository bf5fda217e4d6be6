/* q1_0.cl -- Q1_0 x Q8_0 mat-vec kernels, bit for bit the CPU kernel's order (doc/ARITHMETIC.md). */

/*
 * One program, in four files, in this order (Makefile.am joins them into
 * the library's embedded source, src/card/clsrc.c):
 *   q1_0.cl        the layout, the arithmetic's helpers, the plain kernels
 *                  q1_0_mat_vec and q1_0_mat_vec8 (readable on their own)
 *   q1_0_table.cl  the table kernels' shapes and types, a tile's table built
 *                  and looked up
 *   q1_0_lanes.cl  the table kernels' stream of tiles (bml_lanes) and the
 *                  kernels q1_0_mat_vec_l and q1_0_mat_vec_lr
 *   q1_0_batch.cl  many products a launch: q1_0_mat_vec_lb, q1_0_mat_vec_lrb
 *                  and the resident q1_0_token
 */
#pragma OPENCL FP_CONTRACT OFF

/*
 * Layout (src/card/kernels.c repacks into a slab of the card's matrix memory; bits and d0 below
 * start at the chunk's offset in the slab, and hold its `rows` rows; blocks come in tiles of
 * eight, the last one padded with zeros that never reach the arithmetic):
 *   bits[(t * 8 + l) * rows + r]  a uint4: lane l's bits of the eight blocks of tile t of row r.
 *                               Half-word j (x low, x high, y low, ... w high) is block 8t + j;
 *                               its bits 4k..4k+3 are the lane's four weight bits of sub-block
 *                               k (elements 4l..4l+3 of the sub-block; 1 = +d)
 *   d0[b * rows + r]            block b's scale as a float (converted exactly on the host)
 *   act_base + act_off          the activation: n quants (int8), then n/32 scales as floats
 *                               (their 8-bit negations, -(-128) = -128, are made here)
 *   out_base + out_off          the results, one float per row
 * Several activations and results share one buffer each, so a batch of
 * products is one copy in, a launch per slab (the batched kernels) or per
 * product, one copy out.
 * A work-item per (row, lane) reads one uint4 per tile; adjacent rows are
 * adjacent in memory.
 *
 * The arithmetic (doc/ARITHMETIC.md): per lane l, per block, ab = d1*s for the first
 * sub-block and fma(d1, s, ab) after it, where s is the exact sum of the
 * lane's four signed quants; then acc = fma(d0, ab, acc); then
 * ((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7)).
 *
 * Builds:
 *   default                  fma() where the contract fuses
 *   -DBML_EMULATE_FMA=1      for a device whose fma() is not correctly rounded: the outer
 *                            fma(d0, ab, acc) is made exact from plain operations (below);
 *                            the inner one becomes d1*s + ab, which is the same thing since
 *                            d1*s is exact (an 11-bit half times |s| <= 512)
 *   -DBML_WG, -DBML_LROWS, -DBML_LRROWS, -DBML_LRRPT, -DBML_LRLPT, -DBML_LAHEAD, -DBML_LHALVES
 *                            the kernels' shapes (the tuning's, src/card/tune.c)
 *   -DBML_RING=1 -DBML_D0HALF=1  the table kernels' weights in a ring, the staged scales of
 *                            two-lane work-items as half2 (below): measured faster on NVIDIA's
 *                            compiler only, which gets them; the same bits
 *
 * Hooks: a file that comes before this one in the program (cl/nvidia.cl for
 * NVIDIA's compiler, src/card/program.c) may define them; each has a plain
 * OpenCL C default here, with the same bits:
 *   BML_FMA(a, b, c)         the device's fma (default fma)
 *   BML_BYTE_PERMUTE         with bml_byte_into(y, h, m), byte m of y into the low byte of h:
 *                            the table kernels' full tiles looked up a word at a time (bml_lword)
 *   BML_BULK_COPY            with bml_bulk_init, bml_bulk_start, bml_bulk_copy and bml_bulk_wait:
 *                            the table's sources copied into local memory by a copy engine
 *                            (bml_src_issue)
 *   BML_SYS_FENCE(), BML_SPIN_START(limit), BML_SPIN_OVER(n, limit)
 *                            q1_0_token's fence of the system's scope and its waits' limit
 *                            (default: the global fence, and `limit` reads)
 *   BML_L2_PREFETCH(p)       the line of global memory at p asked into the L2 cache: q1_0_token's
 *                            next group while it waits (default: nothing asked)
 *   BML_OUTER(d0, ab, acc)   the outer step (default BML_FMA; not with -DBML_EMULATE_FMA=1)
 */

/* The table kernels' helpers take their shapes (rows, slices, lanes) as
 * arguments that are constants where they are inlined; a copy left out of
 * line would loop over them at run time (and clang says it cannot unroll
 * it), so clang is told to inline them. */
#if defined(__clang__)
#define BML_INLINE inline __attribute__((always_inline))
#else
#define BML_INLINE inline
#endif

#ifndef BML_WG
#define BML_WG 64 /* work-group size of q1_0_mat_vec8: a multiple of 8 */
#endif

/* s + e = a + b exactly (Knuth's TwoSum; needs contraction off). */
static inline float2 bml_two_sum(float a, float b) {
  float s = a + b;
  float bp = s - a;
  float ap = s - bp;
  return (float2)(s, (a - ap) + (b - bp));
}

/* a + b rounded to odd: the neighbour of the exact sum whose last bit is 1,
 * or the sum itself when it is exact (Boldo & Melquiond 2008). */
static inline float bml_add_round_odd(float a, float b) {
  float2 t = bml_two_sum(a, b);
  uint u = as_uint(t.x);
  if (t.y != 0.0f && (u & 1u) == 0u) u = (t.y > 0.0f) == (t.x > 0.0f) ? u + 1u : u - 1u;
  return as_float(u);
}

/* fma(d0, ab, acc) correctly rounded from plain operations, for d0 with at
 * most 12 significant bits (a half's 11): ab = ah + al with 12 bits each,
 * so d0*ah and d0*al are exact; TwoSum gives the product as RN + error, then
 * Boldo & Melquiond's emulation: (th, tl) = TwoSum(acc, uh),
 * v = RO(tl + ul), result RN(th + v).  Exact for the reference's domain
 * (finite values, no overflow or underflow of the partial products: there
 * |ab| is 0 or within [2^-24, 2^28]).  Non-finite inputs take IEEE's
 * unfused path, which gives fma's answer for them. */
static inline float bml_exact_fma(float d0, float ab, float acc) {
  if (!isfinite(d0) || !isfinite(ab)) return d0 * ab + acc;
  if (!isfinite(acc)) return acc;
  float ah = as_float(as_uint(ab) & 0xfffff000u);
  float al = ab - ah;
  float2 u = bml_two_sum(d0 * ah, d0 * al);
  float2 t = bml_two_sum(acc, u.x);
  return t.x + bml_add_round_odd(t.y, u.y);
}

/* The device's fma, as the kernels and the probe's native column use it. */
#ifndef BML_FMA
#define BML_FMA fma
#endif

#if defined(BML_EMULATE_FMA)
#undef BML_OUTER
#define BML_INNER(d1, s, ab) ((d1) * (s) + (ab))
#define BML_OUTER(d0, ab, acc) bml_exact_fma((d0), (ab), (acc))
#else
#define BML_INNER(d1, s, ab) BML_FMA((d1), (s), (ab))
#ifndef BML_OUTER
#define BML_OUTER(d0, ab, acc) BML_FMA((d0), (ab), (acc))
#endif
#endif

/* The activation at act_off of act_base, as the host lays it out
 * (bml__card_act_repack): q, the n quants as char4s (lane l of sub-block sk
 * is q[8*sk + l]); d1, the n/32 scales as floats. */
#define BML_ACTIVATION(base, off, n)                                                   \
  __global const char4 *q = (__global const char4 *)((base) + (off));                \
  __global const float *d1 = (__global const float *)((base) + (off) + (n))

/* The 8-bit negations of four quants: -(-128) is -128, as the reference
 * has it (unsigned arithmetic wraps; signed overflow would be undefined). */
static inline char4 bml_neg8(char4 q) { return as_char4((uchar4)(0) - as_uchar4(q)); }

/* The exact sum of lane l's four quants under the four bits of nib: each
 * quant where its bit is set, its 8-bit negation where it is clear. */
static inline int bml_lane_sum(uint nib, char4 q) {
  const char4 nq = bml_neg8(q);
  return ((nib & 1u) ? q.x : nq.x) + ((nib & 2u) ? q.y : nq.y) + ((nib & 4u) ? q.z : nq.z) +
         ((nib & 8u) ? q.w : nq.w);
}

static inline float bml_reduce8(const float *a) {
  return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

/* Lane l's 16 bits of block b of row r: four nibbles, sub-block k at bit 4k. */
static inline uint bml_lane_bits(__global const uint4 *bits, uint rows, uint r, uint b, uint l) {
  const uint4 w = bits[((b / 8u) * 8u + l) * rows + r];
  const uint j = b % 8u, x = j < 2u ? w.x : j < 4u ? w.y : j < 6u ? w.z : w.w;
  return (x >> (16u * (j % 2u))) & 0xFFFFu;
}

/* One work-item per row: the reference order written out plainly. */
__kernel void q1_0_mat_vec(__global const uint4 *restrict bits, __global const float *restrict d0,
                           __global const char *restrict act_base, const uint act_off, const uint rows,
                           const uint nb, __global float *restrict out_base, const uint out_off,
                           const uint bits_off, const uint d0_off) {
  bits += bits_off, d0 += d0_off;
  const uint r = get_global_id(0);
  if (r >= rows) return;
  const uint n = nb * 128u;
  BML_ACTIVATION(act_base, act_off, n);
  __global float *out = out_base + out_off;
  float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  for (uint b = 0; b < nb; b++) {
    float ab[8];
    for (uint l = 0; l < 8u; l++) {
      const uint f = bml_lane_bits(bits, rows, r, b, l);
      for (uint k = 0; k < 4u; k++) {
        const uint sk = 4u * b + k;
        const float d = d1[sk];
        const float s = (float)bml_lane_sum((f >> (4u * k)) & 15u, q[8u * sk + l]);
        ab[l] = k == 0 ? d * s : BML_INNER(d, s, ab[l]);
      }
    }
    const float dz = d0[b * rows + r];
    for (uint l = 0; l < 8u; l++) acc[l] = BML_OUTER(dz, ab[l], acc[l]);
  }
  out[r] = bml_reduce8(acc);
}

/* Eight work-items per row, one per accumulation lane, no table; the lanes
 * meet in local memory and are joined in the reference order.  The
 * work-group is BML_WG work-items (BML_WG / 8 rows). */
__kernel __attribute__((reqd_work_group_size(BML_WG, 1, 1)))
void q1_0_mat_vec8(__global const uint4 *restrict bits, __global const float *restrict d0,
                   __global const char *restrict act_base, const uint act_off, const uint rows,
                   const uint nb, __global float *restrict out_base, const uint out_off, const uint bits_off,
                   const uint d0_off) {
  __local float lanes[BML_WG];
  bits += bits_off, d0 += d0_off;
  const uint lid = get_local_id(0);
  const uint r = get_global_id(0) / 8u, l = lid % 8u;
  const uint n = nb * 128u;
  BML_ACTIVATION(act_base, act_off, n);
  __global float *out = out_base + out_off;
  float acc = 0.0f;
  if (r < rows) {
    for (uint b = 0; b < nb; b++) {
      const uint f = bml_lane_bits(bits, rows, r, b, l);
      float ab = 0.0f;
      for (uint k = 0; k < 4u; k++) {
        const uint sk = 4u * b + k;
        const float s = (float)bml_lane_sum((f >> (4u * k)) & 15u, q[8u * sk + l]);
        const float d = d1[sk];
        ab = k == 0 ? d * s : BML_INNER(d, s, ab);
      }
      acc = BML_OUTER(d0[b * rows + r], ab, acc);
    }
  }
  lanes[lid] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (l == 0 && r < rows) {
    float a[8];
    for (uint i = 0; i < 8u; i++) a[i] = lanes[lid + i];
    out[r] = bml_reduce8(a);
  }
}
