/* q1_0.cl -- Q1_0 x Q8_0 mat-vec kernels, bit for bit the CPU kernel's order (doc/ARITHMETIC.md). */
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
 *                            the table kernels' full tiles looked up a word at a time (BML_LWORD)
 *   BML_BULK_COPY            with bml_bulk_init, bml_bulk_start, bml_bulk_copy and bml_bulk_wait:
 *                            the table's sources copied into local memory by a copy engine
 *                            (bml_src_issue)
 *   BML_SYS_FENCE(), BML_SPIN_START(limit), BML_SPIN_OVER(n, limit)
 *                            q1_0_token's fence of the system's scope and its waits' limit
 *                            (default: the global fence, and `limit` reads)
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

/*
 * q1_0_mat_vec_l and q1_0_mat_vec_lr: the fast ones.  The inner part of the
 * reference needs no fused operation: d1*s is exact, so ab = d1*s0, then
 * fma(d1, s1, ab) = RN(d1*s1 + ab), ... is ((P0 + P1) + P2) + P3 with
 * P = d1*s.  For every sub-block, lane and 4-bit pattern of weight bits
 * there are 16 possible P: the work-group tabulates them in local memory a
 * tile of eight blocks at a time (exact: d1 times an exact integer sum), and
 * a lane of a block then costs four table reads, three adds and the
 * reference's outer fma(d0, ab, acc).
 *
 * A work-item computes one lane of `rpt` rows (q1_0_mat_vec_l: one row,
 * for products of few rows; q1_0_mat_vec_lr: BML_LRRPT rows, so a table
 * serves more rows on big products).  A work-group of 8 * lr work-items
 * takes lr * rpt rows: work-item lid computes lane l = lid / lr of rows
 * lid % lr + i * lr, so a SIMD group of 32 reads one lane's 16 table words
 * (two lanes' 32 when lr is 16) and no two of them share a bank.  With
 * -DBML_LRLPT=2, q1_0_mat_vec_lr's work-items compute two lanes each (2m
 * and 2m + 1, one lookup instruction each, as before), 4 * lr of them a
 * work-group, and read each scale d0 once for both.  The lanes meet in local
 * memory at the end and are joined in the reference order.
 *
 * Per tile the work-group builds the next tile's table (from activation
 * values loaded a tile earlier) into the other half of a double buffer and
 * stages the next tile's scales d0 in local memory, while each work-item's
 * weights load BML_LAHEAD tiles ahead into a queue in registers (with
 * -DBML_RING=1, NVIDIA's build: a ring of BML_LAHEAD tiles, the one in use
 * and those ahead, a slot refilled once its tile's lookups are issued):
 * a tile costs one barrier.  A card with less local memory than two
 * tables (32 KiB) and 96 bytes a row of a work-group (the scales and the
 * lanes' sums: 45 KiB in all for 128 rows) builds with BML_LHALVES=1: one
 * table, built after the tile's lookups, behind a second barrier.
 *
 * A launch may run fewer work-groups than groups of rows (the host caps it
 * at the card's max_groups): work-group w of W takes groups w, w + W, ...
 * as one stream of steps, a step a tile, so the next group's weights and
 * table come in while it ends one, and its lanes meet in jtab at each
 * group's last tile (bml_lanes).
 */
#ifndef BML_LROWS
#define BML_LROWS 32 /* q1_0_mat_vec_l: rows per work-group (8 to 64) */
#endif
#ifndef BML_LRROWS
#define BML_LRROWS 32 /* q1_0_mat_vec_lr: rows per row-slice of a work-group (8 to 128) */
#endif
#ifndef BML_LRRPT
#define BML_LRRPT 4 /* q1_0_mat_vec_lr: rows per work-item (1 to 4) */
#endif
#ifndef BML_LRLPT
#define BML_LRLPT 1 /* q1_0_mat_vec_lr: lanes per work-item (1 or 2; times BML_LRRPT at most 4) */
#endif
#ifndef BML_LAHEAD
#define BML_LAHEAD 2 /* tiles of weights a work-item holds besides the one in use (a ring: with it): 2 to 4 */
#endif
#ifndef BML_RING
#define BML_RING 0 /* 1: the weights' queue a ring, the tile loop unrolled by BML_LAHEAD (NVIDIA) */
#endif
#ifndef BML_D0HALF
#define BML_D0HALF 0 /* 1: the staged scales d0 of two-lane work-items as half2 (NVIDIA) */
#endif
#ifndef BML_LHALVES
#define BML_LHALVES 2 /* 2: the table double-buffered (32 KiB); 1: one buffer, two barriers a tile */
#endif
#if BML_LAHEAD < 2 || BML_LRRPT < 1 || BML_LRRPT > 4 || (BML_LHALVES != 1 && BML_LHALVES != 2)
#error "BML_LAHEAD must be 2 or more, BML_LRRPT 1 to 4, BML_LHALVES 1 or 2"
#endif
#if (BML_LRLPT != 1 && BML_LRLPT != 2) || BML_LRLPT * BML_LRRPT > 4 || 8 / BML_LRLPT * BML_LRROWS < 64
#error "BML_LRLPT must be 1 or 2, BML_LRLPT * BML_LRRPT at most 4, and q1_0_mat_vec_lr's work-group 64 or more"
#endif
#if 8 * BML_LROWS > 1024 || 8 / BML_LRLPT * BML_LRROWS > 1024
#error "a table kernel's work-group is at most 1024 work-items (each builds at least 4 table entries a tile)"
#endif
#define BML_LTAB 4096u /* words of one tile's table: 8 blocks * 4 sub-blocks * 8 lanes * 16 patterns */

/* Pair (block j, sub-block k, lane l) = 32 j + 8 k + l of a tile holds its
 * 16 products at words 16 pair + (p ^ 4 bml_swz(pair)): the swizzle (on the
 * pattern's bits 2 and 3) puts the four-word pieces that 8 consecutive pairs
 * write at one step (a quarter of a SIMD group's 128-bit stores) in 8
 * distinct groups of banks, while one pair's 16 entries stay 16 distinct
 * words in 16 distinct banks (a SIMD group's lookups). */
#define bml_swz(pair) (((pair) >> 1) & 3u)

/* A product as the table kernels read it: its rows of nb blocks from
 * bits_off of bits and d0_off of d0 (uint4s and floats), its activation
 * (quants q, scales d1) and its results at out. */
typedef struct {
  __global const uint4 *bits;
  __global const float *d0;
  __global const char4 *q;
  __global const float *d1;
  __global float *out;
  uint bits_off, d0_off, rows, nb;
} bml_prod;

/* A table kernel's local memory: tab, BML_LHALVES tables of BML_LTAB
 * floats; dtab, the staged scales d0 (2 * 8 floats a row of a group); jtab,
 * the lanes' sums of a group (8 a row); ssh, BML_SSH_WORDS (BML_BULK_COPY's). */
typedef struct {
  __local float *tab, *dtab, *jtab;
  __local ulong *ssh;
} bml_lmem;

/* A work-item's place in a table kernel's work-group: lanes l0 + u (u <
 * lpt) of rows rr + i * lr (i < rpt) of a group of gr = lr * rpt rows; all
 * but l0 and rr are constants where the helpers are inlined. */
typedef struct {
  uint lr, rpt, lpt, gr, l0, rr;
} bml_place;

/* The activation values a unit of the table is built from. */
typedef struct {
  uint q; /* the lane's four quants, one a byte */
  float d;
} bml_lsrc;

/* Unit u of a tile is pair u % 256 (block j = pair / 32, sub-block k and
 * lane l: pair % 32 = 8k + l), patterns (u / 256) * unit onwards; a
 * work-group of wg work-items builds the 4096 entries in units of
 * unit = min(16, 4096 / wg). */
static inline void bml_lsrc_load(bml_lsrc *x, const bml_prod *p, uint u, uint tile) {
  const uint pair = u % 256u, b = tile * 8u + pair / 32u, sk = b * 4u + (pair % 32u) / 8u;
  if (b < p->nb) {
    x->q = as_uint(p->q[8u * sk + pair % 8u]);
    x->d = p->d1[sk];
  }
}

#if defined(BML_BULK_COPY)
/* BML_BULK_COPY (cl/nvidia.cl on compute capability 9.0 on: the TMA): a step's table sources (its
 * tile's quants and scales d1, 1152 bytes for a full tile) come into local memory by a copy engine,
 * not by each work-item's loads.  Those loads had waited behind the weights' loads: the counters
 * in doc/PERFORMANCE.md ("NVIDIA's build").  ssh: two barriers of the copies (bml_bulk_init's),
 * then two slots of quants (1024 bytes each), then two of scales (128 each); step k's sources are
 * in slot k % 2.  Work-item 0 issues step k's copies after step k - 3's barrier (slot k % 2 held
 * step k - 2's sources, which step k - 3's build read before it), and the work-group waits for them
 * (phase (k / 2) % 2 of the slot's barrier) in step k - 1, just before the build that reads them.
 * A partial last tile copies its kb blocks only (kb * 144 bytes). */
#define BML_SRC_STAGED 1
#define BML_SSH_WORDS (2 + (2 * 1024 + 2 * 128) / 8)
/* Slot sl's quants (256 words) and scales d1 (32 floats), after the two barriers. */
static inline __local uint *bml_src_q(__local ulong *ssh, uint sl) { return (__local uint *)(ssh + 2) + sl * 256u; }
static inline __local float *bml_src_d(__local ulong *ssh, uint sl) {
  return (__local float *)(ssh + 2) + 512u + sl * 32u;
}
/* Step k's sources (tile k % nt) into slot k % 2. */
static inline void bml_src_issue(__local ulong *ssh, const bml_prod *p, uint k, uint nt) {
  const uint t = k % nt, kb = min(8u, p->nb - t * 8u), sl = k & 1u;
  bml_bulk_start(ssh + sl, kb * 144u);
  bml_bulk_copy(bml_src_q(ssh, sl), p->q + t * 256u, kb * 128u, ssh + sl);
  bml_bulk_copy(bml_src_d(ssh, sl), p->d1 + t * 32u, kb * 16u, ssh + sl);
}
#define BML_SRC_WAIT(k) bml_bulk_wait(ssh + ((k) & 1u), ((k) >> 1) & 1u)
/* Step k's sources from slot k % 2. */
static inline void bml_src_take(bml_lsrc *x, __local ulong *ssh, uint u, uint k) {
  const uint sl = k & 1u, pair = u % 256u;
  x->q = bml_src_q(ssh, sl)[pair];
  x->d = bml_src_d(ssh, sl)[pair / 8u];
}
#else
#define BML_SRC_STAGED 0
#define BML_SSH_WORDS 1 /* (unused) */
#endif

/* The quant (0 to 3) of the lowest bit set in pattern i (1 to 15): what
 * pattern i adds to pattern i & (i - 1). */
static BML_INLINE uint bml_low_quant(uint i) {
  const uint low = i & (0u - i);
  return low == 1u ? 0u : low == 2u ? 1u : low == 4u ? 2u : 3u;
}

/* The unit's entries d * s(p), unit (4, 8 or 16) of them from pattern p0,
 * stored four at a time.  For a finite d every entry and every sum on the
 * way is d times an integer of at most 512 in magnitude (11 by 10
 * significant bits): exact, so an entry is its parent's (one bit fewer) plus
 * d * (q - nq) of the bit, one addition each.  A scale that is not finite
 * takes d * s(p) itself, as the reference: with an infinite d the sums would
 * add infinities of opposite signs, NaN where the reference has an infinity. */
static inline void bml_lbuild(__local float *tab, uint u, const bml_lsrc *x, const uint unit) {
  const uint pair = u % 256u, p0 = (u / 256u) * unit;
  /* Quant t's 8-bit negation nq is -q, or -128 for -128; q - nq is 2q', q'
   * the quant with -128 made 0, and the sum of the nq is -(sum of q') - 128
   * per -128.  The bytes of the word that hold -128 are found without a
   * carry between bytes. */
  const uint w = x->q, wx = w ^ 0x80808080u;
  const uint nz = (((wx & 0x7F7F7F7Fu) + 0x7F7F7F7Fu) | wx) & 0x80808080u; /* bit 7 of a byte: not -128 */
  const uint qp = w & ((nz >> 7) * 0xFFu);
  /* the bytes sign-extended (OpenCL C fills a negative value's right shift with ones) */
  const int qs[4] = {as_int(qp << 24) >> 24, as_int(qp << 16) >> 24, as_int(qp << 8) >> 24, as_int(qp) >> 24};
  const int n128 = 4 - (int)popcount(nz);
  int dq[4];
#pragma unroll
  for (uint t = 0; t < 4u; t++) dq[t] = 2 * qs[t];
  const int s0 = -(qs[0] + qs[1] + qs[2] + qs[3]) - 128 * n128 + ((p0 & 1u) ? dq[0] : 0) + ((p0 & 2u) ? dq[1] : 0) +
                 ((p0 & 4u) ? dq[2] : 0) + ((p0 & 8u) ? dq[3] : 0);
  float e[16];
  if (isfinite(x->d)) {
    const float dd[4] = {x->d * (float)dq[0], x->d * (float)dq[1], x->d * (float)dq[2], x->d * (float)dq[3]};
    e[0] = x->d * (float)s0;
#pragma unroll
    for (uint i = 1; i < unit; i++) e[i] = e[i & (i - 1u)] + dd[bml_low_quant(i)];
  } else {
    int m[16];
    m[0] = s0;
#pragma unroll
    for (uint i = 1; i < unit; i++) m[i] = m[i & (i - 1u)] + dq[bml_low_quant(i)];
#pragma unroll
    for (uint i = 0; i < unit; i++) e[i] = x->d * (float)m[i];
  }
  const uint z = bml_swz(pair);
#pragma unroll
  for (uint i = 0; i < unit / 4u; i++) vstore4(vload4(i, e), (p0 / 4u + i) ^ z, tab + pair * 16u);
}

/* A table word of block j of the tile: its byte address is the block's
 * offset plus ((4 * pattern) ^ c) where c (bml_lc) holds the tile half, the
 * sub-block, the lane and the swizzle.  BML_LBLOCK spends a shift and one
 * three-input logic operation per lookup; BML_LWORD (full tiles, where
 * the device permutes bytes) less (below). */
#define BML_LT(j, byteoff) (*(__local const float *)((__local const char *)tu + (j) * (512u * 4u) + (byteoff)))
#define BML_LNIB(x, sh) (((sh) >= 2 ? (x) >> ((sh) - 2) : (x) << (2 - (sh))) & 0x3Cu) /* 4 * bits sh..sh+3 of x */

/* One block's lane: ab = ((P0 + P1) + P2) + P3 from the table (tu: the
 * lane's; x: the word holding the block's 16 bits at bit h), then the outer
 * fma with the block's scale (dl: the row's scales of the tile, one per gs
 * words). */
#define BML_LBLOCK(x, h, j, acc, dl)                                              \
  do {                                                                            \
    float ab_ = BML_LT(j, BML_LNIB(x, (h)) ^ c0);                                 \
    ab_ = ab_ + BML_LT(j, BML_LNIB(x, (h) + 4) ^ c1);                             \
    ab_ = ab_ + BML_LT(j, BML_LNIB(x, (h) + 8) ^ c2);                             \
    ab_ = ab_ + BML_LT(j, BML_LNIB(x, (h) + 12) ^ c3);                            \
    acc = BML_OUTER((dl)[(j) * gs], ab_, acc);                                    \
  } while (0)

/* Two blocks at once (a full tile): the word x holds block ja's 16 bits in
 * its low half and block ja + 1's in its high half.  Two shifts and two
 * three-input logic operations put all eight lookups' low address bytes,
 * 4 * pattern ^ the low byte of c, one to a byte (y02: sub-blocks 0 and 2;
 * y13: 1 and 3, each for ja, then ja + 1); a lookup then takes its byte
 * into the low byte of the rest of c (h0..h3, whose low bytes are 0) with
 * one byte permute, where the device has one (the hook BML_BYTE_PERMUTE:
 * PTX's prmt in cl/nvidia.cl).  Without it, full tiles take BML_LBLOCK:
 * the permute written in C is no faster. */
#if defined(BML_BYTE_PERMUTE)
#define BML_USE_LWORD 1
#else
#define BML_USE_LWORD 0
#endif

#define BML_LWORD(x, ja, acc, dl)                                                 \
  do {                                                                            \
    const uint y02 = (((x) << 2) & 0x3C3C3C3Cu) ^ z02;                            \
    const uint y13 = (((x) >> 2) & 0x3C3C3C3Cu) ^ z13;                            \
    float ab_ = BML_LT(ja, bml_byte_into(y02, h0, 0u));                           \
    ab_ = ab_ + BML_LT(ja, bml_byte_into(y13, h1, 0u));                           \
    ab_ = ab_ + BML_LT(ja, bml_byte_into(y02, h2, 1u));                           \
    ab_ = ab_ + BML_LT(ja, bml_byte_into(y13, h3, 1u));                           \
    acc = BML_OUTER((dl)[(ja) * gs], ab_, acc);                                   \
    ab_ = BML_LT((ja) + 1u, bml_byte_into(y02, h0, 2u));                          \
    ab_ = ab_ + BML_LT((ja) + 1u, bml_byte_into(y13, h1, 2u));                    \
    ab_ = ab_ + BML_LT((ja) + 1u, bml_byte_into(y02, h2, 3u));                    \
    ab_ = ab_ + BML_LT((ja) + 1u, bml_byte_into(y13, h3, 3u));                    \
    acc = BML_OUTER((dl)[((ja) + 1u) * gs], ab_, acc);                            \
  } while (0)

/* c of sub-block k for lane l0 + u in tile half par (l0 even where a
 * work-item has two lanes, u < 2): the byte offset of the pair's 16 words in
 * block 0, with the swizzle in bits 4 and 5, less 64 u.  The 64 u (bit 6, which
 * neither 4 * pattern nor the swizzle touch) is the lane's table pointer's
 * (tu), a constant a lookup's address takes for nothing: pairs 2m and
 * 2m + 1 have one swizzle, so a work-item's two lanes share their c. */
static inline uint bml_lc(uint par, uint k, uint l0) {
  const uint pair = 8u * k + l0;
  return ((par * BML_LTAB + pair * 16u) << 2) | (bml_swz(pair) << 4);
}

/* A full tile's lookups of a row (x: its lane's words), and what they need. */
#if BML_USE_LWORD
#define BML_LFULL(x, acc, dl)                                                                           \
  BML_LWORD((x).x, 0u, acc, dl);                                                                        \
  BML_LWORD((x).y, 2u, acc, dl);                                                                        \
  BML_LWORD((x).z, 4u, acc, dl);                                                                        \
  BML_LWORD((x).w, 6u, acc, dl)
#define BML_LBYTES(c0, c1, c2, c3)                                                                      \
  const uint h0 = (c0) & ~0xFFu, h1 = (c1) & ~0xFFu, h2 = (c2) & ~0xFFu, h3 = (c3) & ~0xFFu;            \
  const uint z02 = ((c0) & 0xFFu) * 0x00010001u | ((c2) & 0xFFu) * 0x01000100u;                         \
  const uint z13 = ((c1) & 0xFFu) * 0x00010001u | ((c3) & 0xFFu) * 0x01000100u
#else
#define BML_LFULL(x, acc, dl)                                                                           \
  BML_LBLOCK((x).x, 0, 0u, acc, dl);                                                                    \
  BML_LBLOCK((x).x, 16, 1u, acc, dl);                                                                   \
  BML_LBLOCK((x).y, 0, 2u, acc, dl);                                                                    \
  BML_LBLOCK((x).y, 16, 3u, acc, dl);                                                                   \
  BML_LBLOCK((x).z, 0, 4u, acc, dl);                                                                    \
  BML_LBLOCK((x).z, 16, 5u, acc, dl);                                                                   \
  BML_LBLOCK((x).w, 0, 6u, acc, dl);                                                                    \
  BML_LBLOCK((x).w, 16, 7u, acc, dl)
#define BML_LBYTES(c0, c1, c2, c3) (void)0
#endif
/* A tile's lookups of one row and lane (x: its words) into acc, its scales
 * at dl, one per gs words; kb blocks of the tile are the row's. */
#define BML_LTILE(x, acc)                                                                               \
  do {                                                                                                  \
    if (kb == 8u) {                                                                                     \
      BML_LFULL(x, acc, dl);                                                                            \
    } else { /* the last tile of a row whose blocks are not a multiple of 8 */                          \
      const uint ws_[8] = {(x).x, (x).x >> 16, (x).y, (x).y >> 16, (x).z, (x).z >> 16, (x).w, (x).w >> 16}; \
      for (uint j_ = 0; j_ < kb; j_++) BML_LBLOCK(ws_[j_], 0, j_, acc, dl);                             \
    }                                                                                                   \
  } while (0)
/* Whether a work-item of lpt lanes stages its scales as half2 words
 * (bml_stage_d0), and the word of blocks 2m and 2m + 1 of row i * lr + rr
 * (of gr a work-group) in half h of dtab: the one layout its store and
 * its reads share. */
#define BML_D0_HALF2(lpt) (BML_D0HALF && (lpt) == 2u)
static inline uint bml_d0_word(const bml_place *pl, const uint h, const uint m, const uint i) {
  return h * 4u * pl->gr + m * pl->gr + i * pl->lr + pl->rr;
}
/* The float of block j's scale of that row in half h, where the scales
 * are staged as floats: [half][block][row], so block j + 1's is gr floats
 * on (the reads step by it). */
static inline uint bml_d0_float(const bml_place *pl, const uint h, const uint j, const uint i) {
  return h * 8u * pl->gr + j * pl->gr + i * pl->lr + pl->rr;
}

/* The tile after tile t of a row of nt tiles (a work-group's stream goes
 * on to the next group's first). */
static inline uint bml_next_tile(const uint t, const uint nt) { return t + 1u == nt ? 0u : t + 1u; }

/* A step's lookups for the work-item's rows and lanes (lanes l0 + u, u <
 * lpt; row slice rr of lr, rpt rows of gr a work-group), from their words
 * w[i * lpt + u], into acc[i * lpt + u]: the step's tile has kb blocks of
 * the row's, its table and scales are in half hf.  A work-item of one lane reads each
 * scale d0 where it is used; one of two lanes reads a row's eight once for
 * both.  full (a constant where this is inlined): the tile is full and
 * every row live, and the rows' lookups are one run of code. */
static BML_INLINE void bml_lookups_rows(const bml_lmem *lm, const bml_place *pl, const uint4 *w, float *acc,
                                        const bool *live, const uint hf, const uint kb, const bool full) {
  __local const float *tab = lm->tab, *dtab = lm->dtab;
  const uint l0 = pl->l0, gr = pl->gr, rpt = pl->rpt, lpt = pl->lpt;
  const uint par = hf * (BML_LHALVES - 1u); /* the table's half */
  const uint c0 = bml_lc(par, 0, l0), c1 = bml_lc(par, 1, l0), c2 = bml_lc(par, 2, l0), c3 = bml_lc(par, 3, l0);
  BML_LBYTES(c0, c1, c2, c3);
#pragma unroll
  for (uint i = 0; i < rpt; i++) {
    if (!full && !live[i]) continue;
    __local const float *dt = dtab + bml_d0_float(pl, hf, 0u, i);
    float dz[8];
    if (BML_D0_HALF2(lpt)) {
#pragma unroll
      for (uint m = 0; m < 4u; m++) {
        const float2 v = vload_half2(bml_d0_word(pl, hf, m, i), (__local const half *)dtab);
        dz[2u * m] = v.x, dz[2u * m + 1u] = v.y;
      }
    } else if (lpt > 1u) {
#pragma unroll
      for (uint j = 0; j < 8u; j++) dz[j] = dt[j * gr];
    }
#pragma unroll
    for (uint u = 0; u < lpt; u++) {
      __local const float *tu = tab + 16u * u;
      const uint4 x = w[i * lpt + u];
      if (lpt == 1u) { /* the scales where they are used */
        __local const float *dl = dt;
        const uint gs = gr;
        if (full) {
          BML_LFULL(x, acc[i], dl);
        } else {
          BML_LTILE(x, acc[i]);
        }
      } else { /* the row's scales, read once for its lanes */
        const float *dl = dz;
        const uint gs = 1u;
        if (full) {
          BML_LFULL(x, acc[i * lpt + u], dl);
        } else {
          BML_LTILE(x, acc[i * lpt + u]);
        }
      }
    }
  }
}

static BML_INLINE void bml_lookups(const bml_lmem *lm, const bml_place *pl, const uint4 *w, float *acc,
                                   const bool *live, const uint hf, const uint kb) {
#if defined(BML_EMULATE_FMA) || !BML_RING
  /* The single run is NVIDIA's build's (beside its ring of weights), where
   * it was measured: on PoCL it made 12288x4096 15 % slower.  Nor is it in
   * the emulated build: PoCL 5.0's work-group compiler (built with
   * assertions, Ubuntu's) aborts the process on a run of a tile's emulated
   * fmas ("createParallelRegionBefore: region_entry_barrier != NULL"); the
   * emulation is for devices whose fma is wrong, not for speed. */
  bool all = false;
#else
  bool all = kb == 8u;
#endif
#pragma unroll
  for (uint i = 0; i < pl->rpt; i++) all = all && live[i];
  if (all) bml_lookups_rows(lm, pl, w, acc, live, hf, 8u, true);
  else bml_lookups_rows(lm, pl, w, acc, live, hf, kb, false);
}

/* The scales d0 of the work-item's rows and lanes in a step (d: their
 * slot of the queue) into half hn of dtab: [half][block][row] as floats;
 * with -DBML_D0HALF=1 (NVIDIA's build) and two lanes a work-item,
 * [half][block pair][row] as half2, a row's two blocks (those of the
 * work-item's lanes) one word, so that a row's eight scales of a tile are
 * four local reads, not eight.  A scale is a half converted exactly (the
 * host's table), so it goes to a half and back unchanged (a NaN stays a
 * NaN). */
static BML_INLINE void bml_stage_d0(__local float *dtab, const bml_place *pl, const uint hn, const float *d) {
  const uint lpt = pl->lpt;
#pragma unroll
  for (uint i = 0; i < pl->rpt; i++) {
    if (BML_D0_HALF2(lpt)) {
      vstore_half2((float2)(d[2u * i], d[2u * i + 1u]), bml_d0_word(pl, hn, pl->l0 / 2u, i), (__local half *)dtab);
    } else {
#pragma unroll
      for (uint u = 0; u < lpt; u++) dtab[bml_d0_float(pl, hn, pl->l0 + u, i)] = d[i * lpt + u];
    }
  }
}

/* A work-group takes groups g0, g0 + stride, ... of a product, nt steps
 * each (one a tile), as one stream.  Where its refills stand: the next
 * refill is of tile t of the group whose first row is row, and ab and ad
 * are the indices in the buffers of its lane l0 and row (of this
 * work-item) in that tile; a group's first tile is base_b and base_d on
 * from its first row, and the next group jump rows on. */
typedef struct {
  uint t, row, ab, ad;
  uint nt, jump, base_b, base_d;
} bml_fill;

/* The weights and scales d0 of the work-item's rows (row rr of slice i of
 * the group) in the next refill's tile into a slot of the queue (w, d),
 * where go (there is a step to refill); f moves on a tile, or to the first
 * tile of the next group.  A row past the product's is not read. */
static BML_INLINE void bml_refill(const bml_prod *p, const bml_place *pl, bml_fill *f, uint4 *w, float *d,
                                  const bool go) {
  if (!go) return;
  const uint rows = p->rows, lr = pl->lr, lpt = pl->lpt;
#pragma unroll
  for (uint i = 0; i < pl->rpt; i++)
#pragma unroll
    for (uint u = 0; u < lpt; u++)
      if (f->row + pl->rr + i * lr < rows) {
        w[i * lpt + u] = p->bits[f->ab + (u * rows + i * lr)];
        d[i * lpt + u] = p->d0[f->ad + (u * rows + i * lr)];
      }
  if (f->t + 1u < f->nt) {
    f->t++, f->ab += 8u * rows, f->ad += 8u * rows;
  } else {
    f->t = 0u, f->row += f->jump, f->ab = f->base_b + f->row, f->ad = f->base_d + f->row;
  }
}

/* The next step's table (tile tn), from the sources loaded a step ago,
 * into half hn, and the sources of the step after it (tile st). */
#define BML_LNEXT(hn)                                                                                    \
  if (cs + 1u < ns) {                                                                                   \
    const uint kb_ = min(8u, nb - tn * 8u);                                                              \
    BML_SRC_TAKE(cs + 1u);                                                                               \
    for (uint i = 0; i < units; i++)                                                                     \
      if ((lid + i * wg) % 256u / 32u < kb_)                                                             \
        bml_lbuild(tab + (hn) * (BML_LHALVES - 1u) * BML_LTAB, lid + i * wg, &src[i], unit);             \
    if (!BML_SRC_STAGED && cs + 2u < ns)                                                                   \
      for (uint i = 0; i < units; i++) bml_lsrc_load(&src[i], p, lid + i * wg, st);              \
  }
#if BML_SRC_STAGED
#define BML_SRC_TAKE(k)                                                                                  \
  do {                                                                                                   \
    BML_SRC_WAIT(k);                                                                                     \
    for (uint i = 0; i < units; i++) bml_src_take(&src[i], ssh, lid + i * wg, (k));                      \
  } while (0)
#define BML_SRC_NEXT() if (lid == 0u && cs + 3u < ns) bml_src_issue(ssh, p, cs + 3u, nt)
#else
#define BML_SRC_TAKE(k) (void)0
#define BML_SRC_NEXT() (void)0
#endif

/* The next step's scales (dq[slot]) into their half hn, at the end of the
 * step (its lookups and refill issued, before its barrier): they were
 * loaded a step before, so their loads have had a step to arrive.  (Stored
 * at the step's start, as they were before, a work-item waited there for
 * loads issued just before the barrier.) */
#define BML_DNEXT(hn, slot)                                                                              \
  if (cs + 1u < ns) bml_stage_d0(dtab, &pl, (hn), dq[slot])

/* The step's end, behind its barrier: after a group's last tile its lanes
 * meet in jtab and are joined in the reference order. */
#define BML_LEND()                                                                                       \
  do {                                                                                                   \
    const bool last_ = tn == 0u;                                                                         \
    if (last_)                                                                                           \
      for (uint i = 0; i < rpt; i++)                                                                    \
        for (uint u = 0; u < lpt; u++)                                                                   \
          jtab[(l0 + u) * gr + i * lr + rr] = acc[i * lpt + u], acc[i * lpt + u] = 0.0f;                 \
    barrier(CLK_LOCAL_MEM_FENCE);                                                                        \
    if (last_) {                                                                                         \
      for (uint x = lid; x < gr; x += wg) {                                                              \
        if (crow + x >= rows) continue;                                                                  \
        float a_[8];                                                                                     \
        for (uint i = 0; i < 8u; i++) a_[i] = jtab[i * gr + x];                                          \
        out[crow + x] = bml_reduce8(a_);                                                                 \
      }                                                                                                  \
    }                                                                                                    \
    /* one tile a group: the next group's lanes meet in jtab at the next step */                        \
    if (BML_LHALVES == 2 && nt == 1u) barrier(CLK_LOCAL_MEM_FENCE);                                      \
  } while (0)

/* The next step's table where it is built before the lookups (two
 * halves) or after them, behind a second barrier (one). */
#if BML_LHALVES == 2
#define BML_LNEXT_BEFORE(hn) BML_LNEXT(hn)
#define BML_LNEXT_AFTER(hn) (void)0
#else
#define BML_LNEXT_BEFORE(hn) (void)0
#define BML_LNEXT_AFTER(hn)                                                                              \
  do {                                                                                                   \
    BML_LNEXT(hn);                                                                                       \
    barrier(CLK_LOCAL_MEM_FENCE);                                                                        \
  } while (0)
#endif

/* The computed stream on a step: the tile of the step after next (st), the
 * step's tile (tn, the next step's) and group, and the rows of the group
 * that are the product's. */
#define BML_CNEXT()                                                                                      \
  do {                                                                                                   \
    st = bml_next_tile(st, nt);                                                                          \
    cs++, ct = tn;                                                                                       \
    if (tn == 0u) {                                                                                      \
      crow += jump;                                                                                      \
      for (uint i = 0; i < rpt; i++) live[i] = crow + rr + i * lr < rows;                               \
    }                                                                                                    \
  } while (0)

/* Step cs of the ring, in slot ph (a constant), or out of the loop after
 * the last. */
#define BML_RSTEP(ph)                                                                                    \
  if (cs >= ns) break;                                                                                   \
  {                                                                                                      \
    const uint hf = BML_LAHEAD % 2 == 0 ? (ph) & 1u : cs & 1u, sn = (ph) + 1u == BML_LAHEAD ? 0u : (ph) + 1u; \
    const uint tn = bml_next_tile(ct, nt); /* the next step's tile */                                    \
    BML_LNEXT_BEFORE(hf ^ 1u);                                                                           \
    bml_lookups(lm, &pl, wq[ph], acc, live, hf, min(8u, nb - ct * 8u));                                 \
    bml_refill(p, &pl, &f, wq[ph], dq[ph], cs + BML_LAHEAD < ns);                                        \
    BML_DNEXT(hf ^ 1u, sn);                                                                              \
    BML_LEND();                                                                                          \
    BML_LNEXT_AFTER(hf ^ 1u);                                                                            \
    BML_SRC_NEXT();                                                                                      \
    BML_CNEXT();                                                                                         \
  }

/* The body of the table kernels: groups g0, g0 + stride, ... of a product
 * (a group: lr * rpt rows; a launch of fewer work-groups than groups, each
 * taking its share in turn, streams the next group's weights in while it
 * ends one, and pays a work-group's start once); lr, rpt and lpt are
 * constants where it is inlined (rpt * lpt <= 4).  A work-group of
 * 8 / lpt * lr work-items takes a group's rows: work-item lid computes
 * lanes l0 + u (l0 = lid / lr * lpt, u < lpt) of rows lid % lr + i * lr
 * (i < rpt) of the group.  tab: BML_LHALVES * BML_LTAB floats; dtab: 2 * 8
 * * lr * rpt floats; jtab: 8 * lr * rpt; ssh: BML_SSH_WORDS (BML_BULK_COPY's). */
static BML_INLINE void bml_lanes(const bml_prod *p, const bml_lmem *lm, const uint lr, const uint rpt, const uint lpt,
                                 const uint g0, const uint stride) {
  const uint rows = p->rows, nb = p->nb;
  __global float *out = p->out;
  __local float *tab = lm->tab, *dtab = lm->dtab, *jtab = lm->jtab;
#if BML_SRC_STAGED
  __local ulong *ssh = lm->ssh;
#endif
  const uint wg = 8u / lpt * lr, gr = lr * rpt, m = rpt * lpt;
  const uint unit = 4096u / wg < 16u ? 4096u / wg : 16u, units = 4096u / wg / unit;
  const uint lid = get_local_id(0), l0 = lid / lr * lpt, rr = lid % lr;
  const bml_place pl = {lr, rpt, lpt, gr, l0, rr};
  const uint nt = (nb + 7u) / 8u, groups = (rows + gr - 1u) / gr;
  if (g0 >= groups) return; /* (uniform) */
  const uint ns = ((groups - 1u - g0) / stride + 1u) * nt; /* steps */
  /* work-item (l0, rr) loads its lanes' bits of its rows, and d0 of blocks 8t + l0 + u of its rows */
  uint4 wq[BML_LAHEAD][4];
  float dq[BML_LAHEAD][4] = {{0.0f}}; /* a row past the product's is not loaded (nor its scale used) */
  const uint base_b = p->bits_off + l0 * rows + rr, base_d = p->d0_off + l0 * rows + rr, jump = stride * gr;
  bml_fill f = {0u, g0 * gr, base_b + g0 * gr, base_d + g0 * gr, nt, jump, base_b, base_d}; /* the next refill: step 0 */
#pragma unroll
  for (uint a = 0; a < BML_LAHEAD; a++) bml_refill(p, &pl, &f, wq[a], dq[a], a < ns);
  /* step 0's table now, step 1's sources loaded */
  bml_lsrc src[4];
#if BML_SRC_STAGED
  if (lid == 0u) bml_bulk_init(ssh);
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid == 0u) {
    bml_src_issue(ssh, p, 0u, nt);
    if (ns > 1u) bml_src_issue(ssh, p, 1u, nt);
  }
  /* (a copy engine's barrier counts its bytes; copies made by work-item 0
   * itself are ordered by this one: later steps' by the steps' own) */
  barrier(CLK_LOCAL_MEM_FENCE);
  BML_SRC_TAKE(0u);
#else
#pragma unroll
  for (uint i = 0; i < units; i++) bml_lsrc_load(&src[i], p, lid + i * wg, 0);
#endif
#pragma unroll
  for (uint i = 0; i < units; i++)
    if ((lid + i * wg) % 256u / 32u < min(8u, nb)) bml_lbuild(tab, lid + i * wg, &src[i], unit);
  if (!BML_SRC_STAGED && ns > 1u) {
#pragma unroll
    for (uint i = 0; i < units; i++) bml_lsrc_load(&src[i], p, lid + i * wg, nt > 1u ? 1u : 0u);
  }
  bml_stage_d0(dtab, &pl, 0u, dq[0]);
  float acc[4];
#pragma unroll
  for (uint i = 0; i < m; i++) acc[i] = 0.0f;
  barrier(CLK_LOCAL_MEM_FENCE);
#if BML_SRC_STAGED
  if (lid == 0u && ns > 2u) bml_src_issue(ssh, p, 2u, nt);
#endif
  /* the step computed (cs), its tile and its group's first row, which of
   * the work-item's rows are the product's, and the tile of step cs + 2 */
  uint cs = 0u, ct = 0u, crow = g0 * gr, st = nt > 2u ? 2u : 0u;
  bool live[4];
#pragma unroll
  for (uint i = 0; i < rpt; i++) live[i] = crow + rr + i * lr < rows;
#if BML_RING
  /* The weights' queue is a ring: step s is in slot s % BML_LAHEAD, and a
   * step's slot is refilled (BML_LAHEAD steps on) once its lookups are
   * issued.  The loop is unrolled by BML_LAHEAD, by hand (clang does not
   * apply an unroll pragma to it), so every slot index is a constant and
   * nothing moves between registers (and, BML_LAHEAD even, the step's half
   * of the table). */
  for (;;) {
    BML_RSTEP(0u);
    BML_RSTEP(1u);
#if BML_LAHEAD > 2
    BML_RSTEP(2u);
#endif
#if BML_LAHEAD > 3
    BML_RSTEP(3u);
#endif
  }
#else
  /* The weights' queue moves down a slot a step: the step in use is
   * copied out of slot 0 and the last slot loads BML_LAHEAD steps on,
   * before the lookups. */
  while (cs < ns) {
    const uint hf = cs & 1u, tn = bml_next_tile(ct, nt);
    uint4 w[4];
#pragma unroll
    for (uint i = 0; i < m; i++) w[i] = wq[0][i];
    BML_LNEXT_BEFORE(hf ^ 1u);
#pragma unroll
    for (uint a = 0; a + 1u < BML_LAHEAD; a++)
#pragma unroll
      for (uint i = 0; i < m; i++) wq[a][i] = wq[a + 1u][i], dq[a][i] = dq[a + 1u][i];
    bml_refill(p, &pl, &f, wq[BML_LAHEAD - 1], dq[BML_LAHEAD - 1], cs + BML_LAHEAD < ns);
    bml_lookups(lm, &pl, w, acc, live, hf, min(8u, nb - ct * 8u));
    BML_DNEXT(hf ^ 1u, 0); /* the queue has moved: slot 0 is step cs + 1 */
    BML_LEND();
    BML_LNEXT_AFTER(hf ^ 1u);
    BML_SRC_NEXT();
    BML_CNEXT();
  }
#endif
}

__kernel __attribute__((reqd_work_group_size(8 * BML_LROWS, 1, 1)))
void q1_0_mat_vec_l(__global const uint4 *restrict bits, __global const float *restrict d0,
                    __global const char *restrict act_base, const uint act_off, const uint rows,
                    const uint nb, __global float *restrict out_base, const uint out_off, const uint bits_off,
                    const uint d0_off) {
  __local float tab[BML_LHALVES * BML_LTAB] __attribute__((aligned(16))); /* [tile half][block][sub-block][lane][pattern, swizzled] */
  __local float dtab[2 * 8 * BML_LROWS];     /* [tile half][block][row]: the scales d0 */
  __local float jtab[8 * BML_LROWS];         /* [lane][row]: the lanes' sums of a group */
  __local ulong ssh[BML_SSH_WORDS] __attribute__((aligned(16)));
  const uint n = nb * 128u;
  BML_ACTIVATION(act_base, act_off, n);
  const bml_prod p = {bits, d0, q, d1, out_base + out_off, bits_off, d0_off, rows, nb};
  const bml_lmem lm = {tab, dtab, jtab, ssh};
  bml_lanes(&p, &lm, BML_LROWS, 1u, 1u, get_group_id(0), get_num_groups(0));
}

__kernel __attribute__((reqd_work_group_size(8 / BML_LRLPT * BML_LRROWS, 1, 1)))
void q1_0_mat_vec_lr(__global const uint4 *restrict bits, __global const float *restrict d0,
                     __global const char *restrict act_base, const uint act_off, const uint rows,
                     const uint nb, __global float *restrict out_base, const uint out_off, const uint bits_off,
                     const uint d0_off) {
  __local float tab[BML_LHALVES * BML_LTAB] __attribute__((aligned(16)));
  __local float dtab[2 * 8 * BML_LRROWS * BML_LRRPT];
  __local float jtab[8 * BML_LRROWS * BML_LRRPT];
  __local ulong ssh[BML_SSH_WORDS] __attribute__((aligned(16)));
  const uint n = nb * 128u;
  BML_ACTIVATION(act_base, act_off, n);
  const bml_prod p = {bits, d0, q, d1, out_base + out_off, bits_off, d0_off, rows, nb};
  const bml_lmem lm = {tab, dtab, jtab, ssh};
  bml_lanes(&p, &lm, BML_LRROWS, BML_LRRPT, BML_LRLPT, get_group_id(0), get_num_groups(0));
}

/*
 * q1_0_mat_vec_lb and q1_0_mat_vec_lrb: many products in one launch (a
 * launch costs the host microseconds, and a model's token is hundreds).  Every
 * product's matrix lies in the same pair of buffers; a table of
 * BML_DESC_WORDS-word records, at desc_off of act_base (copied in with the
 * activations), says for each product, in order: its first work-group, rows,
 * blocks per row, where its bits (in uint4s) and scales (in floats) start,
 * its activation's byte offset, its results' float offset and its
 * work-groups W.  A work-group finds its product by a binary search of
 * the first work-groups (uniform across the work-group, so the barriers
 * inside stay uniform); the product's work-group w takes its groups w, w +
 * W, ... (the host gives a big product fewer work-groups than groups when
 * the launch's would be more than the card's max_groups).
 */
#define BML_DESC_WORDS 8

static inline __global const uint *bml_desc_of(__global const uint *desc, uint ndesc, uint grp) {
  uint lo = 0, hi = ndesc; /* the last record whose first work-group is <= grp */
  while (hi - lo > 1u) {
    const uint mid = (lo + hi) / 2u;
    if (desc[BML_DESC_WORDS * mid] <= grp) lo = mid;
    else hi = mid;
  }
  return desc + BML_DESC_WORDS * lo;
}

/* The batch's record d as the product p, its activation in act: declared
 * in place, as a helper that returned the struct would hand it back through
 * a noalias pointer, and inlining that leaves an LLVM intrinsic that some
 * OpenCL implementations do not know (Oclgrind refuses the kernel). */
#define BML_RECORD(d, act)                                                     \
  BML_ACTIVATION((act), (d)[5], (d)[2] * 128u);                                \
  const bml_prod p = {bits, d0, q, d1, out_base + (d)[6], (d)[3], (d)[4], (d)[1], (d)[2]}

#define BML_BATCHED(lr, rpt, lpt)                                                                                  \
  __global const uint *d_ = bml_desc_of((__global const uint *)(act_base + desc_off), ndesc, get_group_id(0)); \
  BML_RECORD(d_, act_base);                                                                                    \
  const bml_lmem lm = {tab, dtab, jtab, ssh};                                                                  \
  bml_lanes(&p, &lm, (lr), (rpt), (lpt), get_group_id(0) - d_[0], d_[7])

__kernel __attribute__((reqd_work_group_size(8 * BML_LROWS, 1, 1)))
void q1_0_mat_vec_lb(__global const uint4 *restrict bits, __global const float *restrict d0,
                     __global const char *restrict act_base, const uint desc_off, const uint ndesc,
                     __global float *restrict out_base) {
  __local float tab[BML_LHALVES * BML_LTAB] __attribute__((aligned(16)));
  __local float dtab[2 * 8 * BML_LROWS];
  __local float jtab[8 * BML_LROWS];
  __local ulong ssh[BML_SSH_WORDS] __attribute__((aligned(16)));
  BML_BATCHED(BML_LROWS, 1u, 1u);
}

__kernel __attribute__((reqd_work_group_size(8 / BML_LRLPT * BML_LRROWS, 1, 1)))
void q1_0_mat_vec_lrb(__global const uint4 *restrict bits, __global const float *restrict d0,
                      __global const char *restrict act_base, const uint desc_off, const uint ndesc,
                      __global float *restrict out_base) {
  __local float tab[BML_LHALVES * BML_LTAB] __attribute__((aligned(16)));
  __local float dtab[2 * 8 * BML_LRROWS * BML_LRRPT];
  __local float jtab[8 * BML_LRROWS * BML_LRRPT];
  __local ulong ssh[BML_SSH_WORDS] __attribute__((aligned(16)));
  BML_BATCHED(BML_LRROWS, BML_LRRPT, BML_LRLPT);
}

/*
 * q1_0_token: a decode's token resident on the card.  A decode's groups of
 * products (Q/K/V, O, gate/up, down, ...) each need the host's work on the
 * group before (its activation), so each is a round trip; launched once,
 * this kernel runs the groups the host asks for, one after the other, so
 * that a group costs no launch, no copy command and no event.  Its
 * work-groups are all resident at once (the host launches no more than the
 * card holds).  Through host memory that the card reads and writes over
 * the bus (`host`, uint words): the host writes a group's activation
 * (repacked, as the other kernels read it) at the group's own offset,
 * then the next ticket (ticket0, ticket0 + 1, ...) and the group in one
 * word at BML_TOKEN_REQ (BML_TOKEN_WORD: the ticket's low 20 bits above the
 * group's 12, so that one read over the bus brings both); work-group 0
 * waits for it (at most `spins`, below), copies the activation into `dev`
 * at the same offset and posts the same word at dev word BML_TOKEN_FLAG;
 * the other work-groups wait for that post.  Every work-group then
 * computes its share of the group's records (as q1_0_mat_vec_lrb does: the
 * same bits), writing the results over the bus into `out_base`, then the
 * ticket at its own host word (from the word dev word BML_TOKEN_DONES
 * names: the host waits for all of them, which costs it less than a count
 * on the card costs the last work-group).  A ticket that does not come
 * (BML_TOKEN_ABORT, or not within `spins`) ends the kernel, work-group 0
 * writing the ticket it waited for at BML_TOKEN_EXIT.  Each group's activation has an offset of its own, in
 * `host` and in `dev`, and the host runs a group at most once a launch:
 * the card's caches (which the kernel's loads may go through) never hold
 * an earlier copy of an address a group reads.  dev holds, from word BML_TOKEN_TABLE,
 * BML_TOKEN_GROUP_WORDS words a group (its records' word offset in dev,
 * their count, their work-groups in all, its activation's byte offset, its
 * bytes, and how its records are planned: 0 at BML_LRRPT rows a work-item,
 * 1 at one row, 2 at one row and one lane a work-item, groups of
 * BML_LRROWS / 2 rows, where BML_LRLPT is 2), and the records.  A product
 * of few rows leaves most of the work-groups without a group of BML_LRROWS
 * x BML_LRRPT rows, where a group of BML_LRROWS rows, or half of them,
 * keeps them busy (the same bits: a row's sums do not depend on the rows
 * beside it, nor on which work-item computes which of its lanes).
 */
#define BML_TOKEN_REQ 0u
#define BML_TOKEN_EXIT 32u
#define BML_TOKEN_FLAG 0u
#define BML_TOKEN_DONES 16u
#define BML_TOKEN_WORD(ticket, group) (((ticket) << 12) | (group))
#define BML_TOKEN_TABLE 64u
#define BML_TOKEN_GROUP_WORDS 8u
#define BML_TOKEN_ABORT 0xffffffffu

/* What the host reads of the card's writes over the bus is ordered only by
 * a fence of the system's scope: the global fence here, a device's own
 * where its global fence is the card's scope alone (the hook
 * BML_SYS_FENCE: cl/nvidia.cl).  A wait gives up after `spins` reads, or
 * the hook's measure (cl/nvidia.cl: microseconds of the card's clock). */
#ifndef BML_SYS_FENCE
#define BML_SYS_FENCE() mem_fence(CLK_GLOBAL_MEM_FENCE)
#define BML_SPIN_START(limit) (void)0
#define BML_SPIN_OVER(n, limit) ((n) >= (limit))
#endif

__kernel __attribute__((reqd_work_group_size(8 / BML_LRLPT * BML_LRROWS, 1, 1)))
void q1_0_token(__global const uint4 *restrict bits, __global const float *restrict d0,
                __global volatile uint *host, __global uint *dev, __global float *out_base, const uint ticket0,
                const uint spins) {
  __local float tab[BML_LHALVES * BML_LTAB] __attribute__((aligned(16)));
  __local float dtab[2 * 8 * BML_LRROWS * BML_LRRPT];
  __local float jtab[8 * BML_LRROWS * BML_LRRPT];
  __local ulong ssh[BML_SSH_WORDS] __attribute__((aligned(16)));
  __local uint go, grp;
  const uint lid = get_local_id(0), wg = get_group_id(0), nwg = get_num_groups(0), L = get_local_size(0);
  __global volatile uint *vdev = dev;
  __global volatile uint *done = host + dev[BML_TOKEN_DONES] + wg;
  for (uint i = 0u;; i++) {
    const uint ticket = ticket0 + i;
    if (wg == 0u) {
      if (lid == 0u) {
        uint n = 0u, r;
        BML_SPIN_START(spins);
        while ((r = host[BML_TOKEN_REQ]) >> 12 != (ticket & 0xfffffu) && r != BML_TOKEN_ABORT &&
               !BML_SPIN_OVER(++n, spins))
          continue;
        go = r >> 12 == (ticket & 0xfffffu);
        grp = r & 0xfffu;
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      if (go) {
        __global const uint *gt = dev + BML_TOKEN_TABLE + BML_TOKEN_GROUP_WORDS * grp;
        __global const uint4 *from = (__global const uint4 *)((__global const char *)host + gt[3]);
        __global uint4 *to = (__global uint4 *)((__global char *)dev + gt[3]);
        /* four loads over the bus in flight a work-item, then their stores:
         * a round trip for up to 64 KiB of a 1024-work-item group, not one
         * each 16 bytes a work-item (bonsai-8b's token 6 % faster on an
         * NVIDIA H200) */
        const uint nq = gt[4] / 16u;
        for (uint k = lid; k < nq; k += 4u * L) {
          uint4 r[4];
#pragma unroll
          for (uint j = 0u; j < 4u; j++)
            if (k + j * L < nq) r[j] = from[k + j * L];
#pragma unroll
          for (uint j = 0u; j < 4u; j++)
            if (k + j * L < nq) to[k + j * L] = r[j];
        }
      }
      mem_fence(CLK_GLOBAL_MEM_FENCE);
      barrier(CLK_GLOBAL_MEM_FENCE);
      if (lid == 0u) {
        if (!go) {
          host[BML_TOKEN_EXIT] = ticket;
          BML_SYS_FENCE();
        }
        atomic_xchg(&vdev[BML_TOKEN_FLAG], go ? BML_TOKEN_WORD(ticket, grp) : BML_TOKEN_ABORT);
      }
    } else {
      if (lid == 0u) {
        uint n = 0u, f;
        BML_SPIN_START(2u * spins); /* work-group 0 posts an abort when it gives up first */
        while ((f = atomic_or(&vdev[BML_TOKEN_FLAG], 0u)) >> 12 != (ticket & 0xfffffu) && f != BML_TOKEN_ABORT &&
               !BML_SPIN_OVER(++n, 64u * spins))
          continue;
        go = f >> 12 == (ticket & 0xfffffu);
        grp = f & 0xfffu;
      }
      barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    }
    if (!go) return; /* (uniform) */
    __global const uint *gt = dev + BML_TOKEN_TABLE + BML_TOKEN_GROUP_WORDS * grp;
    __global const uint *desc = dev + gt[0];
    for (uint v = wg; v < gt[2]; v += nwg) {
      __global const uint *d_ = bml_desc_of(desc, gt[1], v);
      BML_RECORD(d_, (__global const char *)dev);
      const bml_lmem lm = {tab, dtab, jtab, ssh};
      if (gt[5] == 1u) bml_lanes(&p, &lm, BML_LRROWS, 1u, BML_LRLPT, v - d_[0], d_[7]);
#if BML_LRLPT == 2
      else if (gt[5] == 2u) bml_lanes(&p, &lm, BML_LRROWS / 2u, 1u, 1u, v - d_[0], d_[7]);
#endif
      else bml_lanes(&p, &lm, BML_LRROWS, BML_LRRPT, BML_LRLPT, v - d_[0], d_[7]);
    }
    /* the results out before the done word says they are: every
     * work-item's writes are ordered before the barrier, and one fence of
     * the system's scope after it orders them, cumulatively, before the word
     * (a fence by each work-item cost 1.5-4 % of a round-trip token on an
     * NVIDIA H100) */
    barrier(CLK_GLOBAL_MEM_FENCE);
    if (lid == 0u) {
      BML_SYS_FENCE();
      *done = ticket;
      BML_SYS_FENCE(); /* out now: the card's caches may keep a write to host memory until a fence */
    }
  }
}

/* The fma probe: out[i] = fma(a[i], b[i], c[i]) with the device's fma, and
 * with the emulation, so the host can compare both with a correctly rounded
 * fma on cases where fused and unfused results differ. */
__kernel void bml_fma_probe(__global const float *a, __global const float *b, __global const float *c,
                            const uint count, __global float *native, __global float *emulated) {
  const uint i = get_global_id(0);
  if (i >= count) return;
  native[i] = BML_FMA(a[i], b[i], c[i]);
  emulated[i] = bml_exact_fma(a[i], b[i], c[i]);
}
