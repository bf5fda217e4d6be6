/* q1_0_batch.cl -- many products a launch: q1_0_mat_vec_lb, q1_0_mat_vec_lrb and the resident q1_0_token. */

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
#define BML_TOKEN_GROUPS 17u
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

/* Group g's weights and scales into the card's L2 cache, this
 * work-group's share of them, while it waits for the host: a token's
 * groups come in their order, so the group after the last one is the
 * likely next (where the host asks for another, the prefetch costs only
 * the reads).  A device without the hook BML_L2_PREFETCH (cl/nvidia.cl)
 * does nothing here. */
static inline void bml_token_warm(__global const uint4 *bits, __global const float *d0, __global const uint *dev,
                                  const uint g, const uint wg, const uint nwg, const uint lid, const uint L) {
#ifdef BML_L2_PREFETCH
  __global const uint *gt = dev + BML_TOKEN_TABLE + BML_TOKEN_GROUP_WORDS * g;
  __global const uint *d_ = dev + gt[0];
  const uint n = d_[1] * d_[2], lb = (n + 7u) / 8u, ls = (n + 31u) / 32u; /* lines of 128 bytes */
  __global const char *b = (__global const char *)(bits + d_[3]), *s = (__global const char *)(d0 + d_[4]);
  for (uint k = wg * L + lid; k < lb + ls; k += nwg * L) BML_L2_PREFETCH(k < lb ? b + 128u * k : s + 128u * (k - lb));
#else
  (void)bits, (void)d0, (void)dev, (void)g, (void)wg, (void)nwg, (void)lid, (void)L;
#endif
}

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
  const uint ngroups = dev[BML_TOKEN_GROUPS];
  uint next = 0u; /* the group likely asked for next */
  for (uint i = 0u;; i++) {
    const uint ticket = ticket0 + i;
    if (next < ngroups) bml_token_warm(bits, d0, dev, next, wg, nwg, lid, L);
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
    const uint cur = grp;
    __global const uint *gt = dev + BML_TOKEN_TABLE + BML_TOKEN_GROUP_WORDS * cur;
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
    next = cur + 1u < ngroups ? cur + 1u : 0u;
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
