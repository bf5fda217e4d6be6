/* q1_0.cl -- Q1_0 x Q8_0 mat-vec kernels, bit for bit the CPU kernel's order (doc/ARITHMETIC.md). */
#pragma OPENCL FP_CONTRACT OFF

/*
 * Layouts (src/kernels.c repacks; every buffer holds `rows` rows of one chunk):
 *   bits[b * rows + r]          a uint4: the 32 weight bits of each sub-block k = 0..3 of
 *                               block b of row r (bit j is element j of the sub-block, 1 = +d)
 *   d0[b * rows + r]            the block's scale as a float (converted exactly on the host)
 *   act_base + act_off          the activation: n quants (int8), then their 8-bit negations
 *                               (-(-128) = -128, done on the host), then n/32 scales as floats
 *   out_base + out_off          the results, one float per row
 * Several activations and results share one buffer each, so a batch of
 * products is one copy in, one launch per product or group, one copy out.
 * Adjacent work-items read adjacent words of bits and d0.
 *
 * The arithmetic (DESIGN §1): per lane l, per block, ab = d1*s for the first
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
 *   -DBML_TEST_UNFUSED_OUTER=1  test only: the outer fma as a multiply and an add, which the
 *                            oracle must refuse
 */

#ifndef BML_WG
#define BML_WG 64 /* work-group size of q1_0_mat_vec8: a multiple of 8 */
#endif

/* s + e = a + b exactly (Knuth's TwoSum; needs contraction off). */
inline float2 bml_two_sum(float a, float b) {
  float s = a + b;
  float bp = s - a;
  float ap = s - bp;
  return (float2)(s, (a - ap) + (b - bp));
}

/* a + b rounded to odd: the neighbour of the exact sum whose last bit is 1,
 * or the sum itself when it is exact (Boldo & Melquiond 2008). */
inline float bml_add_round_odd(float a, float b) {
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
inline float bml_exact_fma(float d0, float ab, float acc) {
  if (!isfinite(d0) || !isfinite(ab)) return d0 * ab + acc;
  if (!isfinite(acc)) return acc;
  float ah = as_float(as_uint(ab) & 0xfffff000u);
  float al = ab - ah;
  float2 u = bml_two_sum(d0 * ah, d0 * al);
  float2 t = bml_two_sum(acc, u.x);
  return t.x + bml_add_round_odd(t.y, u.y);
}

#if defined(BML_EMULATE_FMA)
#define BML_INNER(d1, s, ab) ((d1) * (s) + (ab))
#define BML_OUTER(d0, ab, acc) bml_exact_fma((d0), (ab), (acc))
#elif defined(BML_TEST_UNFUSED_OUTER)
#define BML_INNER(d1, s, ab) fma((d1), (s), (ab))
#define BML_OUTER(d0, ab, acc) ((d0) * (ab) + (acc))
#else
#define BML_INNER(d1, s, ab) fma((d1), (s), (ab))
#define BML_OUTER(d0, ab, acc) fma((d0), (ab), (acc))
#endif

/* The activation at act_off of act_base, as the host lays it out
 * (bml__q1_0_act_split): q, the n quants as char4s (lane l of sub-block sk
 * is q[8*sk + l]); nq, their 8-bit negations; d1, the n/32 scales. */
#define BML_ACTIVATION(base, off, n)                                                   \
  __global const char4 *q = (__global const char4 *)((base) + (off));                \
  __global const char4 *nq = (__global const char4 *)((base) + (off) + (n));         \
  __global const float *d1 = (__global const float *)((base) + (off) + 2u * (n))

/* The exact sum of lane l's four quants under the four bits of nib. */
inline int bml_lane_sum(uint nib, char4 q, char4 nq) {
  return ((nib & 1u) ? q.x : nq.x) + ((nib & 2u) ? q.y : nq.y) + ((nib & 4u) ? q.z : nq.z) +
         ((nib & 8u) ? q.w : nq.w);
}

inline float bml_reduce8(const float *a) {
  return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

/* One work-item per row. */
__kernel void q1_0_mat_vec(__global const uint4 *restrict bits, __global const float *restrict d0,
                           __global const char *restrict act_base, const uint act_off, const uint rows,
                           const uint nb, __global float *restrict out_base, const uint out_off) {
  const uint r = get_global_id(0);
  if (r >= rows) return;
  const uint n = nb * 128u;
  BML_ACTIVATION(act_base, act_off, n);
  __global float *out = out_base + out_off;
  float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  for (uint b = 0; b < nb; b++) {
    float ab[8];
    const uint4 w4 = bits[b * rows + r];
    const uint ws[4] = {w4.x, w4.y, w4.z, w4.w};
    for (uint k = 0; k < 4u; k++) {
      const uint sk = 4u * b + k;
      const uint w = ws[k];
      const float d = d1[sk];
      for (uint l = 0; l < 8u; l++) {
        const float s = (float)bml_lane_sum((w >> (4u * l)) & 15u, q[8u * sk + l], nq[8u * sk + l]);
        ab[l] = k == 0 ? d * s : BML_INNER(d, s, ab[l]);
      }
    }
    const float dz = d0[b * rows + r];
    for (uint l = 0; l < 8u; l++) acc[l] = BML_OUTER(dz, ab[l], acc[l]);
  }
  out[r] = bml_reduce8(acc);
}

/* Eight work-items per row, one per accumulation lane; the lanes meet in
 * local memory and are joined in the reference order.  The work-group is
 * BML_WG work-items (BML_WG / 8 rows). */
__kernel __attribute__((reqd_work_group_size(BML_WG, 1, 1)))
void q1_0_mat_vec8(__global const uint4 *restrict bits, __global const float *restrict d0,
                   __global const char *restrict act_base, const uint act_off, const uint rows,
                   const uint nb, __global float *restrict out_base, const uint out_off) {
  __local float lanes[BML_WG];
  const uint lid = get_local_id(0);
  const uint r = get_global_id(0) / 8u, l = lid % 8u;
  const uint n = nb * 128u;
  BML_ACTIVATION(act_base, act_off, n);
  __global float *out = out_base + out_off;
  float acc = 0.0f;
  if (r < rows) {
    for (uint b = 0; b < nb; b++) {
      float ab = 0.0f;
      const uint4 w4 = bits[b * rows + r];
      const uint ws[4] = {w4.x, w4.y, w4.z, w4.w};
      for (uint k = 0; k < 4u; k++) {
        const uint sk = 4u * b + k;
        const uint nib = (ws[k] >> (4u * l)) & 15u;
        const float s = (float)bml_lane_sum(nib, q[8u * sk + l], nq[8u * sk + l]);
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
 * q1_0_mat_vec_t: the fast one.  One work-item per row, BML_TWG rows per
 * work-group.  The inner part of the reference needs no fused operation:
 * d1*s is exact, so ab = d1*s0, then fma(d1, s1, ab) = RN(d1*s1 + ab), ...
 * is ((P0 + P1) + P2) + P3 with P = d1*s.  For every sub-block K, lane l and
 * 4-bit pattern of weight bits there are only 16 possible P: the
 * work-group tabulates them in local memory for BML_TILE blocks at a time
 * (exact: d1 times an exact integer sum with the 8-bit negation), and each
 * row then costs, per lane and sub-block, a bit-field extract, a table read
 * and an add; the outer fma(d0, ab, acc) is the reference's.  The lanes of
 * a warp read the same K and l with different patterns: 16 consecutive
 * words, no bank conflicts.
 */
#ifndef BML_TWG
#define BML_TWG 256 /* rows (work-items) per work-group */
#endif
#ifndef BML_TILE
#define BML_TILE 8  /* blocks per table tile: 8 * 4 sub-blocks * 8 lanes * 16 floats = 16 KiB */
#endif

/* The 16 products d1 * s(pattern) of lane l of one sub-block. */
inline void bml_tabulate(__local float *t, char4 q, char4 nq, float d) {
  const int dq[4] = {q.x - nq.x, q.y - nq.y, q.z - nq.z, q.w - nq.w};
  int s[16];
  s[0] = nq.x + nq.y + nq.z + nq.w; /* every bit clear */
  for (uint p = 1; p < 16u; p++) {
    const uint low = p & (0u - p); /* the lowest set bit of p */
    const uint t_ = low == 1u ? 0u : low == 2u ? 1u : low == 4u ? 2u : 3u;
    s[p] = s[p & (p - 1u)] + dq[t_]; /* one more quant taken instead of its negation */
  }
  for (uint p = 0; p < 16u; p++) t[p] = d * (float)s[p];
}

#define BML_TPE ((BML_TILE * 32 + BML_TWG - 1) / BML_TWG) /* (sub-block, lane) pairs per work-item */

__kernel __attribute__((reqd_work_group_size(BML_TWG, 1, 1)))
void q1_0_mat_vec_t(__global const uint4 *restrict bits, __global const float *restrict d0,
                    __global const char *restrict act_base, const uint act_off, const uint rows,
                    const uint nb, __global float *restrict out_base, const uint out_off) {
  __local float tab[BML_TILE * 4 * 8 * 16];
  const uint r = get_global_id(0), lid = get_local_id(0);
  const uint n = nb * 128u;
  BML_ACTIVATION(act_base, act_off, n);
  __global float *out = out_base + out_off;
  float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  /* loaded one step ahead: the next tile's activation, the next block's weights */
  char4 tq[BML_TPE], tnq[BML_TPE];
  float td[BML_TPE];
  for (uint j = 0; j < BML_TPE; j++) {
    const uint p = lid + j * BML_TWG, sk = p / 8u, l = p % 8u;
    if (p < min((uint)BML_TILE, nb) * 32u) tq[j] = q[8u * sk + l], tnq[j] = nq[8u * sk + l], td[j] = d1[sk];
  }
  const bool live = r < rows;
  /* the row's blocks of a tile are all loaded at its start: one memory
   * latency a tile, not one a block */
  uint4 wt[BML_TILE];
  float dt[BML_TILE];
  for (uint tb = 0; tb < nb; tb += BML_TILE) {
    const uint tk = min((uint)BML_TILE, nb - tb);
#pragma unroll
    for (uint b = 0; b < BML_TILE; b++)
      if (live && b < tk) {
        wt[b] = bits[(tb + b) * rows + r];
        dt[b] = d0[(tb + b) * rows + r];
      }
    for (uint j = 0; j < BML_TPE; j++) { /* the work-group tabulates (sub-block, lane) pairs */
      const uint p = lid + j * BML_TWG;
      if (p < tk * 32u) bml_tabulate(tab + p * 16u, tq[j], tnq[j], td[j]);
    }
    if (tb + BML_TILE < nb) {
      const uint nk = min((uint)BML_TILE, nb - tb - BML_TILE);
      for (uint j = 0; j < BML_TPE; j++) {
        const uint p = lid + j * BML_TWG, sk = (tb + BML_TILE) * 4u + p / 8u, l = p % 8u;
        if (p < nk * 32u) tq[j] = q[8u * sk + l], tnq[j] = nq[8u * sk + l], td[j] = d1[sk];
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (live) {
#pragma unroll
      for (uint b = 0; b < BML_TILE; b++) {
        if (b >= tk) break;
        const uint4 w = wt[b];
        const float dz = dt[b];
        __local const float *t = tab + b * 512u; /* 4 sub-blocks * 8 lanes * 16 */
#pragma unroll
        for (uint l = 0; l < 8u; l++) {
          const uint sh = 4u * l;
          float ab = t[l * 16u + ((w.x >> sh) & 15u)];
          ab = ab + t[128u + l * 16u + ((w.y >> sh) & 15u)];
          ab = ab + t[256u + l * 16u + ((w.z >> sh) & 15u)];
          ab = ab + t[384u + l * 16u + ((w.w >> sh) & 15u)];
          acc[l] = BML_OUTER(dz, ab, acc[l]);
        }
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (live) out[r] = bml_reduce8(acc);
}

/*
 * q1_0_mat_vec_p: the same arithmetic as q1_0_mat_vec_t, with the rows'
 * work spread over many more work-items, for cards where a work-item per
 * row leaves most of the chip idle (a 4096-row matrix is 4096 work-items).
 * A work-group takes BML_PROWS rows; for each tile of BML_PTILE blocks it
 * (1) tabulates the products d1*s, (2) computes every (row, block)'s eight
 * lanes' ab from the table, one pair per work-item, into local memory with
 * the block's d0, and (3) runs each (row, lane)'s chain
 * acc = fma(d0, ab, acc) over the tile's blocks, in order: the only
 * sequential part, one fma per block.  The lanes are joined at the end.
 */
#ifndef BML_PWG
#define BML_PWG 512 /* work-items per work-group */
#endif
#ifndef BML_PROWS
#define BML_PROWS 128 /* rows per work-group */
#endif
#ifndef BML_PTILE
#define BML_PTILE 4 /* blocks per tile */
#endif
#define BML_PCH ((BML_PROWS * 8 + BML_PWG - 1) / BML_PWG)      /* lane chains per work-item */
#define BML_PTE ((BML_PTILE * 512 + BML_PWG - 1) / BML_PWG)     /* table entries per work-item */
#define BML_PAB ((BML_PROWS * BML_PTILE + BML_PWG - 1) / BML_PWG) /* (row, block) pairs per work-item */

/* What a work-item reads from global memory for one tile: loaded one tile
 * ahead, so the loads of the next tile are in flight while this one is
 * computed (a tile is otherwise two global latencies in a row). */
typedef struct {
  char4 q[BML_PTE], nq[BML_PTE];
  float d1[BML_PTE];
  uint4 w[BML_PAB];
  float d0[BML_PAB];
} bml_ptile_regs;

inline void bml_ptile_load(bml_ptile_regs *x, uint tb, uint nb, uint lid, uint row0, uint rows,
                           __global const char4 *q, __global const char4 *nq, __global const float *d1,
                           __global const uint4 *bits, __global const float *d0) {
  const uint tk = min((uint)BML_PTILE, nb - tb);
  for (uint j = 0; j < BML_PTE; j++) {
    const uint e = lid + j * BML_PWG;
    if (e < tk * 512u) {
      const uint l = (e >> 4) & 7u, sk = tb * 4u + (e >> 7);
      x->q[j] = q[8u * sk + l];
      x->nq[j] = nq[8u * sk + l];
      x->d1[j] = d1[sk];
    }
  }
  for (uint j = 0; j < BML_PAB; j++) {
    const uint pr = lid + j * BML_PWG, r = pr % BML_PROWS, b = pr / BML_PROWS, row = row0 + r;
    if (pr < BML_PROWS * tk && row < rows) {
      x->w[j] = bits[(tb + b) * rows + row];
      x->d0[j] = d0[(tb + b) * rows + row];
    }
  }
}

__kernel __attribute__((reqd_work_group_size(BML_PWG, 1, 1)))
void q1_0_mat_vec_p(__global const uint4 *restrict bits, __global const float *restrict d0,
                    __global const char *restrict act_base, const uint act_off, const uint rows,
                    const uint nb, __global float *restrict out_base, const uint out_off) {
  __local float tab[BML_PTILE * 512];           /* [block][sub-block][lane][pattern] */
  __local float abl[BML_PTILE * 9 * BML_PROWS]; /* [block][lane, then d0][row] */
  const uint lid = get_local_id(0), row0 = get_group_id(0) * BML_PROWS;
  const uint n = nb * 128u;
  BML_ACTIVATION(act_base, act_off, n);
  __global float *out = out_base + out_off;
  float acc[BML_PCH];
  for (uint i = 0; i < BML_PCH; i++) acc[i] = 0.0f;
  bml_ptile_regs cur, next;
  bml_ptile_load(&next, 0, nb, lid, row0, rows, q, nq, d1, bits, d0);
  for (uint tb = 0; tb < nb; tb += BML_PTILE) {
    const uint tk = min((uint)BML_PTILE, nb - tb);
    cur = next;
    if (tb + BML_PTILE < nb) bml_ptile_load(&next, tb + BML_PTILE, nb, lid, row0, rows, q, nq, d1, bits, d0);
    for (uint j = 0; j < BML_PTE; j++) { /* (1) the table */
      const uint e = lid + j * BML_PWG, p = e & 15u;
      if (e >= tk * 512u) continue;
      const char4 qq = cur.q[j], nn = cur.nq[j];
      const int s = ((p & 1u) ? qq.x : nn.x) + ((p & 2u) ? qq.y : nn.y) + ((p & 4u) ? qq.z : nn.z) +
                    ((p & 8u) ? qq.w : nn.w);
      tab[e] = cur.d1[j] * (float)s;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint j = 0; j < BML_PAB; j++) { /* (2) ab of (row, block) pairs */
      const uint pr = lid + j * BML_PWG, r = pr % BML_PROWS, b = pr / BML_PROWS;
      if (pr >= BML_PROWS * tk || row0 + r >= rows) continue;
      const uint4 w = cur.w[j];
      __local const float *t = tab + b * 512u;
      __local float *o = abl + b * 9u * BML_PROWS + r;
      for (uint l = 0; l < 8u; l++) {
        const uint sh = 4u * l;
        float ab = t[l * 16u + ((w.x >> sh) & 15u)];
        ab = ab + t[128u + l * 16u + ((w.y >> sh) & 15u)];
        ab = ab + t[256u + l * 16u + ((w.z >> sh) & 15u)];
        ab = ab + t[384u + l * 16u + ((w.w >> sh) & 15u)];
        o[l * BML_PROWS] = ab;
      }
      o[8u * BML_PROWS] = cur.d0[j];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint i = 0; i < BML_PCH; i++) { /* (3) the chains, in block order */
      const uint c = lid + i * BML_PWG, r = c % BML_PROWS, l = c / BML_PROWS;
      if (c < BML_PROWS * 8u && row0 + r < rows)
        for (uint b = 0; b < tk; b++)
          acc[i] = BML_OUTER(abl[(b * 9u + 8u) * BML_PROWS + r], abl[(b * 9u + l) * BML_PROWS + r], acc[i]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (uint i = 0; i < BML_PCH; i++) { /* join the lanes */
    const uint c = lid + i * BML_PWG;
    if (c < BML_PROWS * 8u) abl[c] = acc[i]; /* [lane][row] */
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint r = lid; r < BML_PROWS; r += BML_PWG) {
    if (row0 + r >= rows) continue;
    float a[8];
    for (uint l = 0; l < 8u; l++) a[l] = abl[l * BML_PROWS + r];
    out[row0 + r] = bml_reduce8(a);
  }
}

/* The fma probe: out[i] = fma(a[i], b[i], c[i]) with the device's fma, and
 * with the emulation, so the host can compare both with a correctly rounded
 * fma on cases where fused and unfused results differ. */
__kernel void bml_fma_probe(__global const float *a, __global const float *b, __global const float *c,
                            const uint count, __global float *native, __global float *emulated) {
  const uint i = get_global_id(0);
  if (i >= count) return;
  native[i] = fma(a[i], b[i], c[i]);
  emulated[i] = bml_exact_fma(a[i], b[i], c[i]);
}
