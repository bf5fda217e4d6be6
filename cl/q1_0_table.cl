/* q1_0_table.cl -- the table kernels: shapes, types, building a tile's table and looking it up. */

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
 * lpt) of rows rr + i * lr (i < rpt) of a group of gr = lr * rpt rows, as
 * work-item lid of wg; the work-group builds a tile's table in units of
 * unit entries, units of them a work-item (bml_lsrc_load).  All but l0, rr
 * and lid are constants where the helpers are inlined. */
typedef struct {
  uint lr, rpt, lpt, gr, l0, rr, lid, wg, unit, units;
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
/* Waits for step k's sources (phase (k / 2) % 2 of slot k % 2's barrier). */
static inline void bml_src_wait(__local ulong *ssh, uint k) { bml_bulk_wait(ssh + (k & 1u), (k >> 1) & 1u); }
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
 * sub-block, the lane and the swizzle.  bml_lblock spends a shift and one
 * three-input logic operation per lookup; bml_lword (full tiles, where
 * the device permutes bytes) less (below). */
static inline float bml_lt(__local const float *tu, const uint j, const uint byteoff) {
  return *(__local const float *)((__local const char *)tu + j * (512u * 4u) + byteoff);
}
/* 4 * bits sh..sh+3 of x (sh a constant where this is inlined). */
static inline uint bml_lnib(const uint x, const uint sh) { return (sh >= 2u ? x >> (sh - 2u) : x << (2u - sh)) & 0x3Cu; }

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

/* What a step's lookups in half par of the table need, for lanes l0 on:
 * the sub-blocks' c0..c3 (bml_lc) and, for bml_lword, each c's bytes
 * split: h0..h3 the rest of each (low byte 0), z02 and z13 the low bytes of
 * sub-blocks 0 and 2, 1 and 3, twice each. */
typedef struct {
  uint c0, c1, c2, c3, h0, h1, h2, h3, z02, z13;
} bml_lkey;

static inline void bml_lkey_init(bml_lkey *k, const uint par, const uint l0) {
  k->c0 = bml_lc(par, 0, l0), k->c1 = bml_lc(par, 1, l0), k->c2 = bml_lc(par, 2, l0), k->c3 = bml_lc(par, 3, l0);
  k->h0 = k->c0 & ~0xFFu, k->h1 = k->c1 & ~0xFFu, k->h2 = k->c2 & ~0xFFu, k->h3 = k->c3 & ~0xFFu;
  k->z02 = (k->c0 & 0xFFu) * 0x00010001u | (k->c2 & 0xFFu) * 0x01000100u;
  k->z13 = (k->c1 & 0xFFu) * 0x00010001u | (k->c3 & 0xFFu) * 0x01000100u;
}

/* One block's lane: ab = ((P0 + P1) + P2) + P3 from the table (tu: the
 * lane's; x: the word holding the block's 16 bits at bit h), then the outer
 * fma with the block's scale d. */
static BML_INLINE float bml_lblock(const bml_lkey *k, __local const float *tu, const uint x, const uint h, const uint j,
                                   const float d, const float acc) {
  float ab = bml_lt(tu, j, bml_lnib(x, h) ^ k->c0);
  ab = ab + bml_lt(tu, j, bml_lnib(x, h + 4u) ^ k->c1);
  ab = ab + bml_lt(tu, j, bml_lnib(x, h + 8u) ^ k->c2);
  ab = ab + bml_lt(tu, j, bml_lnib(x, h + 12u) ^ k->c3);
  return BML_OUTER(d, ab, acc);
}

/* Two blocks at once (a full tile): the word x holds block ja's 16 bits in
 * its low half and block ja + 1's in its high half (scales da, db).  Two
 * shifts and two three-input logic operations put all eight lookups' low
 * address bytes, 4 * pattern ^ the low byte of c, one to a byte (y02:
 * sub-blocks 0 and 2; y13: 1 and 3, each for ja, then ja + 1); a lookup then
 * takes its byte into the low byte of the rest of c (h0..h3) with one byte
 * permute, where the device has one (the hook BML_BYTE_PERMUTE: PTX's prmt
 * in cl/nvidia.cl).  Without it, full tiles take bml_lblock: the permute
 * written in C is no faster. */
#if defined(BML_BYTE_PERMUTE)
static BML_INLINE float bml_lword(const bml_lkey *k, __local const float *tu, const uint x, const uint ja,
                                  const float da, const float db, float acc) {
  const uint y02 = ((x << 2) & 0x3C3C3C3Cu) ^ k->z02;
  const uint y13 = ((x >> 2) & 0x3C3C3C3Cu) ^ k->z13;
  float ab = bml_lt(tu, ja, bml_byte_into(y02, k->h0, 0u));
  ab = ab + bml_lt(tu, ja, bml_byte_into(y13, k->h1, 0u));
  ab = ab + bml_lt(tu, ja, bml_byte_into(y02, k->h2, 1u));
  ab = ab + bml_lt(tu, ja, bml_byte_into(y13, k->h3, 1u));
  acc = BML_OUTER(da, ab, acc);
  ab = bml_lt(tu, ja + 1u, bml_byte_into(y02, k->h0, 2u));
  ab = ab + bml_lt(tu, ja + 1u, bml_byte_into(y13, k->h1, 2u));
  ab = ab + bml_lt(tu, ja + 1u, bml_byte_into(y02, k->h2, 3u));
  ab = ab + bml_lt(tu, ja + 1u, bml_byte_into(y13, k->h3, 3u));
  return BML_OUTER(db, ab, acc);
}
#endif

/* A full tile's lookups of a row and lane (x: its lane's words; d: the
 * row's eight scales of the tile). */
static BML_INLINE float bml_lfull(const bml_lkey *k, __local const float *tu, const uint4 x, const float8 d, float acc) {
#if defined(BML_BYTE_PERMUTE)
  acc = bml_lword(k, tu, x.x, 0u, d.s0, d.s1, acc);
  acc = bml_lword(k, tu, x.y, 2u, d.s2, d.s3, acc);
  acc = bml_lword(k, tu, x.z, 4u, d.s4, d.s5, acc);
  return bml_lword(k, tu, x.w, 6u, d.s6, d.s7, acc);
#else
  acc = bml_lblock(k, tu, x.x, 0u, 0u, d.s0, acc);
  acc = bml_lblock(k, tu, x.x, 16u, 1u, d.s1, acc);
  acc = bml_lblock(k, tu, x.y, 0u, 2u, d.s2, acc);
  acc = bml_lblock(k, tu, x.y, 16u, 3u, d.s3, acc);
  acc = bml_lblock(k, tu, x.z, 0u, 4u, d.s4, acc);
  acc = bml_lblock(k, tu, x.z, 16u, 5u, d.s5, acc);
  acc = bml_lblock(k, tu, x.w, 0u, 6u, d.s6, acc);
  return bml_lblock(k, tu, x.w, 16u, 7u, d.s7, acc);
#endif
}

/* A tile's lookups of one row and lane (x: its words) into acc, its scales
 * d; kb blocks of the tile are the row's. */
static BML_INLINE float bml_ltile(const bml_lkey *k, __local const float *tu, const uint4 x, const float8 d,
                                  const uint kb, float acc) {
  if (kb == 8u) return bml_lfull(k, tu, x, d, acc);
  /* the last tile of a row whose blocks are not a multiple of 8 */
  const uint ws[8] = {x.x, x.x >> 16, x.y, x.y >> 16, x.z, x.z >> 16, x.w, x.w >> 16};
  const float ds[8] = {d.s0, d.s1, d.s2, d.s3, d.s4, d.s5, d.s6, d.s7};
  for (uint j = 0; j < kb; j++) acc = bml_lblock(k, tu, ws[j], 0u, j, ds[j], acc);
  return acc;
}

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
