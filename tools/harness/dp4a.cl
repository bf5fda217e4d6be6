/* dp4a.cl -- an experiment (tools/harness): Q1_0 x Q8_0 without a table, the lane sums by dp4a; bit-exact, not used by the library.
 *
 * Weights, transposed: bits[(t * 8 + l) * rows + r] a uint4, word p holds
 * blocks 8t + 2p and 8t + 2p + 1 of lane l of row r: bit 8u + g is element u
 * (0..3) of group g = 4 * (block parity) + k (sub-block k), i.e. the native
 * word's bit 4g + u.  d0[b * rows + r] as floats (native).  Activation native:
 * n int8 quants, then n/32 float scales.
 *
 * Per group (sub-block k of a block, lane l) the work-group stages a set
 * {q', Cw, fa, fb}: q' the lane's four quants with -128 made 0; C = -sum(q')
 * - 128 * (quants that are -128), so s = 2 * sum(bit * q') + C; with K =
 * max(1, 2^(g-1)) and the group's bits masked to bytes of value 2K (g = 0:
 * the word shifted left by one), D = dp4a(mask, q', 0x4B400000 + K * C) is
 * the float 12582912 + K * s exactly; P = fma(fa, D, fb), fa = d1 / K, fb =
 * -fa * 12582912, is RN(d1 * s) = d1 * s.  A tile with a scale that is not
 * finite computes d1 * (float)s itself.
 */
#pragma OPENCL FP_CONTRACT OFF

#ifndef DP_RPT
#define DP_RPT 4 /* rows a work-item */
#endif
#define DP_WG 256 /* 8 lanes x 32 rows */
#define DP_GR (32 * DP_RPT)

#if defined(DP_PTX) && DP_PTX
static inline uint dp_dp4a(uint a, uint b, uint c) {
  uint r;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}
#else
static inline uint dp_dp4a(uint a, uint b, uint c) {
  const uchar4 x = as_uchar4(a);
  const char4 y = as_char4(b);
  return c + (uint)((int)x.x * y.x + (int)x.y * y.y + (int)x.z * y.z + (int)x.w * y.w);
}
#endif

/* The set of group (j, k) of lane l in tile t. */
static inline uint4 dp_set(__global const uint *q, __global const float *d1, uint t, uint nb, uint j, uint k, uint l,
                           int *bad) {
  const uint b = 8u * t + j;
  if (b >= nb) return (uint4)(0u, 0x4B400000u, 0u, 0u); /* P = 0 */
  const uint sk = 4u * b + k;
  const uint w = q[8u * sk + l];
  const float d = d1[sk];
  const uint wx = w ^ 0x80808080u;
  const uint nz = (((wx & 0x7F7F7F7Fu) + 0x7F7F7F7Fu) | wx) & 0x80808080u;
  const uint qp = w & ((nz >> 7) * 0xFFu);
  const int n128 = 4 - (int)popcount(nz);
  const char4 c = as_char4(qp);
  const int C = -((int)c.x + c.y + c.z + c.w) - 128 * n128;
  const uint g = 4u * (j & 1u) + k;
  const uint sh = g <= 1u ? 0u : g - 1u;
  const uint Cw = 0x4B400000u + (uint)(C * (1 << sh));
  const float fa = d * (1.0f / (float)(1u << sh));
  const float fb = -fa * 12582912.0f;
  if (!isfinite(d)) *bad = 1;
  return (uint4)(qp, Cw, as_uint(fa), as_uint(fb));
}

__kernel __attribute__((reqd_work_group_size(DP_WG, 1, 1)))
void q1_0_dp(__global const uint4 *restrict bits, __global const float *restrict d0,
             __global const char *restrict act, const uint rows, const uint nb, __global float *restrict out) {
  __local uint4 ops[2][256];
  __local int badf[3];
  __local float jtab[8 * DP_GR];
  const uint lid = get_local_id(0), l = lid / 32u, slot = lid % 32u, jk = lid % 32u;
  const uint n = nb * 128u, nt = (nb + 7u) / 8u;
  __global const uint *q = (__global const uint *)act;
  __global const float *d1 = (__global const float *)(act + n);
  const uint groups = (rows + DP_GR - 1u) / DP_GR, G = get_num_groups(0);
  const uint g0 = get_group_id(0);
  if (g0 >= groups) return;
  const uint ngr = (groups - 1u - g0) / G + 1u, ns = ngr * nt;
  if (lid < 3u) badf[lid] = 0;
  barrier(CLK_LOCAL_MEM_FENCE);

  uint4 wc[DP_RPT], wn[DP_RPT];
  float dc[DP_RPT][8], dn[DP_RPT][8];
  float acc[DP_RPT];
  for (uint i = 0; i < DP_RPT; i++) acc[i] = 0.0f;
  /* step s: group g0 + (s / nt) * G, tile s % nt */
  uint crow = g0 * DP_GR, ct = 0u;
#define DP_LOAD(W, DZ, row0, t)                                                        \
  for (uint i = 0; i < DP_RPT; i++) {                                                  \
    const uint r_ = (row0) + slot + 32u * i;                                           \
    if (r_ < rows) {                                                                   \
      W[i] = bits[((t) * 8u + l) * rows + r_];                                         \
      for (uint j_ = 0; j_ < 8u; j_++) DZ[i][j_] = d0[((t) * 8u + j_) * rows + r_];    \
    } else {                                                                           \
      W[i] = (uint4)(0u);                                                              \
      for (uint j_ = 0; j_ < 8u; j_++) DZ[i][j_] = 0.0f;                               \
    }                                                                                  \
  }
  DP_LOAD(wc, dc, crow, 0u);
  for (uint s = 0; s < ns; s++) {
    /* this step's sets */
    {
      int bad = 0;
      const uint4 v = dp_set(q, d1, ct, nb, jk / 4u, jk % 4u, l, &bad);
      ops[s & 1u][lid] = v;
      if (bad) badf[s % 3u] = 1;
      if (lid == 0u) badf[(s + 1u) % 3u] = 0;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const bool slow = badf[s % 3u] != 0;
    /* the next step's weights */
    const uint nrow = ct + 1u == nt ? crow + G * DP_GR : crow, ntile = ct + 1u == nt ? 0u : ct + 1u;
    if (s + 1u < ns) {
      DP_LOAD(wn, dn, nrow, ntile);
    }
    __local const uint4 *o = &ops[s & 1u][l * 32u];
    if (!slow) {
#pragma unroll
      for (uint p = 0; p < 4u; p++) {
        float ab[DP_RPT];
#pragma unroll
        for (uint gg = 0; gg < 8u; gg++) {
          const uint4 v = o[(2u * p + gg / 4u) * 4u + gg % 4u];
#pragma unroll
          for (uint i = 0; i < DP_RPT; i++) {
            const uint x = p == 0 ? wc[i].x : p == 1 ? wc[i].y : p == 2 ? wc[i].z : wc[i].w;
            const uint m = gg == 0u ? (x << 1) & 0x02020202u : x & (0x01010101u << gg);
#if defined(DP_NODP) && DP_NODP
            const uint D = (m ^ v.x) + v.y; /* diagnostic: not the bits */
#else
            const uint D = dp_dp4a(m, v.x, v.y);
#endif
            const float P = fma(as_float(v.z), as_float(D), as_float(v.w));
            ab[i] = gg % 4u == 0u ? P : ab[i] + P;
            if (gg % 4u == 3u) acc[i] = fma(dc[i][2u * p + gg / 4u], ab[i], acc[i]);
          }
        }
      }
    } else {
      for (uint p = 0; p < 4u; p++) {
        float ab[DP_RPT];
        for (uint gg = 0; gg < 8u; gg++) {
          const uint4 v = o[(2u * p + gg / 4u) * 4u + gg % 4u];
          const uint sh = gg <= 1u ? 0u : gg - 1u;
          for (uint i = 0; i < DP_RPT; i++) {
            const uint x = p == 0 ? wc[i].x : p == 1 ? wc[i].y : p == 2 ? wc[i].z : wc[i].w;
            const uint m = gg == 0u ? (x << 1) & 0x02020202u : x & (0x01010101u << gg);
            const uint D = dp_dp4a(m, v.x, v.y);
            const int si = ((int)(D - 0x4B400000u)) >> sh;
            const float dd = as_float(v.z) * (float)(1u << sh);
            const float P = dd * (float)si;
            ab[i] = gg % 4u == 0u ? P : ab[i] + P;
            if (gg % 4u == 3u) acc[i] = fma(dc[i][2u * p + gg / 4u], ab[i], acc[i]);
          }
        }
      }
    }
    if (ct + 1u == nt) { /* the group's last tile: the lanes meet */
      for (uint i = 0; i < DP_RPT; i++) jtab[l * DP_GR + 32u * i + slot] = acc[i], acc[i] = 0.0f;
      barrier(CLK_LOCAL_MEM_FENCE);
      for (uint x = lid; x < DP_GR; x += DP_WG) {
        if (crow + x < rows) {
          float a_[8];
          for (uint u = 0; u < 8u; u++) a_[u] = jtab[u * DP_GR + x];
          out[crow + x] = ((a_[0] + a_[4]) + (a_[2] + a_[6])) + ((a_[1] + a_[5]) + (a_[3] + a_[7]));
        }
      }
      if (nt == 1u) barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (uint i = 0; i < DP_RPT; i++) {
      wc[i] = wn[i];
      for (uint j = 0; j < 8u; j++) dc[i][j] = dn[i][j];
    }
    crow = nrow, ct = ntile;
  }
}
