/* q1_0_lanes.cl -- the table kernels' stream of tiles (bml_lanes), q1_0_mat_vec_l and q1_0_mat_vec_lr. */

/* The tile after tile t of a row of nt tiles (a work-group's stream goes
 * on to the next group's first). */
static inline uint bml_next_tile(const uint t, const uint nt) { return t + 1u == nt ? 0u : t + 1u; }

/* A step's lookups for the work-item's rows and lanes (lanes l0 + u, u <
 * lpt; row slice rr of lr, rpt rows of gr a work-group), from their words
 * w[i * lpt + u], into acc[i * lpt + u]: the step's tile has kb blocks of
 * the row's, its table and scales are in half hf.  A row's eight scales d0
 * are read once for its lanes.  full (a constant where this is inlined):
 * the tile is full and every row live, and the rows' lookups are one run
 * of code. */
static BML_INLINE void bml_lookups_rows(const bml_lmem *lm, const bml_place *pl, const uint4 *w, float *acc,
                                        const bool *live, const uint hf, const uint kb, const bool full) {
  const uint gr = pl->gr, rpt = pl->rpt, lpt = pl->lpt;
  bml_lkey k;
  bml_lkey_init(&k, hf * (BML_LHALVES - 1u), pl->l0); /* the table's half */
#pragma unroll
  for (uint i = 0; i < rpt; i++) {
    if (!full && !live[i]) continue;
    float8 d;
    if (BML_D0_HALF2(lpt)) {
      const __local half *dh = (__local const half *)lm->dtab;
      d = (float8)(vload_half2(bml_d0_word(pl, hf, 0u, i), dh), vload_half2(bml_d0_word(pl, hf, 1u, i), dh),
                   vload_half2(bml_d0_word(pl, hf, 2u, i), dh), vload_half2(bml_d0_word(pl, hf, 3u, i), dh));
    } else {
      __local const float *dt = lm->dtab + bml_d0_float(pl, hf, 0u, i);
      d = (float8)(dt[0], dt[gr], dt[2u * gr], dt[3u * gr], dt[4u * gr], dt[5u * gr], dt[6u * gr], dt[7u * gr]);
    }
#pragma unroll
    for (uint u = 0; u < lpt; u++) {
      __local const float *tu = lm->tab + 16u * u;
      const uint a = i * lpt + u;
      acc[a] = full ? bml_lfull(&k, tu, w[a], d, acc[a]) : bml_ltile(&k, tu, w[a], d, kb, acc[a]);
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

/* Where a work-group's stream stands: ns steps in all (nt a group), the
 * step computed (cs), its tile (ct), the tile of step cs + 2 (st: the next
 * sources to load), and the first row of the step's group (crow); the
 * work-group's next group is jump rows on. */
typedef struct {
  uint ns, nt, cs, ct, st, crow, jump;
} bml_stream;

/* Step k's table sources, from where the copy engine staged them
 * (BML_BULK_COPY), into src; elsewhere they were loaded a step ago. */
static BML_INLINE void bml_src_take_all(const bml_lmem *lm, const bml_place *pl, bml_lsrc *src, const uint k) {
#if BML_SRC_STAGED
  bml_src_wait(lm->ssh, k);
  for (uint i = 0; i < pl->units; i++) bml_src_take(&src[i], lm->ssh, pl->lid + i * pl->wg, k);
#endif
}

/* The sources of step cs + 3 issued to the copy engine (BML_BULK_COPY). */
static BML_INLINE void bml_src_next(const bml_prod *p, const bml_lmem *lm, const bml_place *pl, const bml_stream *s) {
#if BML_SRC_STAGED
  if (pl->lid == 0u && s->cs + 3u < s->ns) bml_src_issue(lm->ssh, p, s->cs + 3u, s->nt);
#endif
}

/* A work-item's state along its work-group's stream, in registers where
 * the helpers below are inlined: the stream (s), the next refill (f), the
 * sources of the next table (src), the queue of weights and scales (wq,
 * dq: BML_LAHEAD slots), the lanes' sums (acc) and which of its rows are
 * the product's (live). */
typedef struct {
  bml_stream s;
  bml_fill f;
  bml_lsrc src[4];
  uint4 wq[BML_LAHEAD][4];
  float dq[BML_LAHEAD][4];
  float acc[4];
  bool live[4];
} bml_walk;

/* The next step's table (tile tn), from the sources loaded a step ago,
 * into half hn, and the sources of the step after it (tile st). */
static BML_INLINE void bml_table_next(const bml_prod *p, const bml_lmem *lm, const bml_place *pl, bml_walk *r,
                                      const uint tn, const uint hn) {
  const bml_stream *s = &r->s;
  if (s->cs + 1u >= s->ns) return;
  const uint kb = min(8u, p->nb - tn * 8u);
  bml_src_take_all(lm, pl, r->src, s->cs + 1u);
  for (uint i = 0; i < pl->units; i++)
    if ((pl->lid + i * pl->wg) % 256u / 32u < kb)
      bml_lbuild(lm->tab + hn * (BML_LHALVES - 1u) * BML_LTAB, pl->lid + i * pl->wg, &r->src[i], pl->unit);
  if (!BML_SRC_STAGED && s->cs + 2u < s->ns)
    for (uint i = 0; i < pl->units; i++) bml_lsrc_load(&r->src[i], p, pl->lid + i * pl->wg, s->st);
}

/* The step's end, behind its barrier: after a group's last tile (the next
 * step's tile tn is 0) its lanes meet in jtab and are joined in the
 * reference order. */
static BML_INLINE void bml_group_end(const bml_prod *p, const bml_lmem *lm, const bml_place *pl, bml_walk *r,
                                     const uint tn) {
  const bool last = tn == 0u;
  if (last)
    for (uint i = 0; i < pl->rpt; i++)
      for (uint u = 0; u < pl->lpt; u++)
        lm->jtab[(pl->l0 + u) * pl->gr + i * pl->lr + pl->rr] = r->acc[i * pl->lpt + u], r->acc[i * pl->lpt + u] = 0.0f;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (last) {
    for (uint x = pl->lid; x < pl->gr; x += pl->wg) {
      if (r->s.crow + x >= p->rows) continue;
      float a[8];
      for (uint i = 0; i < 8u; i++) a[i] = lm->jtab[i * pl->gr + x];
      p->out[r->s.crow + x] = bml_reduce8(a);
    }
  }
  /* one tile a group: the next group's lanes meet in jtab at the next step */
  if (BML_LHALVES == 2 && r->s.nt == 1u) barrier(CLK_LOCAL_MEM_FENCE);
}

/* The stream on a step: the tile of the step after next, the step's tile
 * (tn, the next step's) and group, and which rows of the group are the
 * product's. */
static BML_INLINE void bml_stream_next(const bml_prod *p, const bml_place *pl, bml_walk *r, const uint tn) {
  bml_stream *s = &r->s;
  s->st = bml_next_tile(s->st, s->nt);
  s->cs++, s->ct = tn;
  if (tn == 0u) {
    s->crow += s->jump;
    for (uint i = 0; i < pl->rpt; i++) r->live[i] = s->crow + pl->rr + i * pl->lr < p->rows;
  }
}

/* A step's start, before its lookups: the next step's table (tile tn)
 * into the other half, where there are two (BML_LHALVES). */
static BML_INLINE void bml_step_start(const bml_prod *p, const bml_lmem *lm, const bml_place *pl, bml_walk *r,
                                      const uint hf, const uint tn) {
  if (BML_LHALVES == 2) bml_table_next(p, lm, pl, r, tn, hf ^ 1u);
}

/* A step's end, its lookups and refill issued: the next step's scales (in
 * slot sn of the queue, loaded a step before, so their loads have had a
 * step to arrive; stored at the step's start, a work-item waited there
 * for loads issued just before the barrier) into the other half, the
 * group's end, the next table where there is one (behind a second
 * barrier), the copy engine's next sources, and the stream on a step. */
static BML_INLINE void bml_step_end(const bml_prod *p, const bml_lmem *lm, const bml_place *pl, bml_walk *r,
                                    const uint sn, const uint hf, const uint tn) {
  if (r->s.cs + 1u < r->s.ns) bml_stage_d0(lm->dtab, pl, hf ^ 1u, r->dq[sn]);
  bml_group_end(p, lm, pl, r, tn);
  if (BML_LHALVES == 1) {
    bml_table_next(p, lm, pl, r, tn, hf ^ 1u);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  bml_src_next(p, lm, pl, &r->s);
  bml_stream_next(p, pl, r, tn);
}

/* Step cs of the ring, in slot ph (a constant where this is inlined). */
static BML_INLINE void bml_ring_step(const bml_prod *p, const bml_lmem *lm, const bml_place *pl, bml_walk *r,
                                     const uint ph) {
  const uint hf = BML_LAHEAD % 2 == 0 ? ph & 1u : r->s.cs & 1u, sn = ph + 1u == BML_LAHEAD ? 0u : ph + 1u;
  const uint tn = bml_next_tile(r->s.ct, r->s.nt); /* the next step's tile */
  bml_step_start(p, lm, pl, r, hf, tn);
  bml_lookups(lm, pl, r->wq[ph], r->acc, r->live, hf, min(8u, p->nb - r->s.ct * 8u));
  bml_refill(p, pl, &r->f, r->wq[ph], r->dq[ph], r->s.cs + BML_LAHEAD < r->s.ns);
  bml_step_end(p, lm, pl, r, sn, hf, tn);
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
  const uint wg = 8u / lpt * lr, gr = lr * rpt, m = rpt * lpt;
  const uint unit = 4096u / wg < 16u ? 4096u / wg : 16u, units = 4096u / wg / unit;
  const uint lid = get_local_id(0), l0 = lid / lr * lpt, rr = lid % lr;
  const bml_place pl = {lr, rpt, lpt, gr, l0, rr, lid, wg, unit, units};
  const uint nt = (nb + 7u) / 8u, groups = (rows + gr - 1u) / gr;
  if (g0 >= groups) return; /* (uniform) */
  const uint jump = stride * gr;
  bml_walk r;
  /* the step computed (cs), its tile and its group's first row, and the tile of step cs + 2 */
  const bml_stream s0 = {((groups - 1u - g0) / stride + 1u) * nt, nt, 0u, 0u, nt > 2u ? 2u : 0u, g0 * gr, jump};
  r.s = s0;
  const uint ns = r.s.ns;
  /* work-item (l0, rr) loads its lanes' bits of its rows, and d0 of blocks 8t + l0 + u of its rows; a
   * row past the product's is not loaded (nor its scale used) */
#pragma unroll
  for (uint a = 0; a < BML_LAHEAD; a++)
#pragma unroll
    for (uint i = 0; i < 4u; i++) r.dq[a][i] = 0.0f;
  const uint base_b = p->bits_off + l0 * rows + rr, base_d = p->d0_off + l0 * rows + rr;
  const bml_fill f0 = {0u, g0 * gr, base_b + g0 * gr, base_d + g0 * gr, nt, jump, base_b, base_d};
  r.f = f0; /* the next refill: step 0 */
#pragma unroll
  for (uint a = 0; a < BML_LAHEAD; a++) bml_refill(p, &pl, &r.f, r.wq[a], r.dq[a], a < ns);
  /* step 0's table now, step 1's sources loaded */
#if BML_SRC_STAGED
  if (lid == 0u) bml_bulk_init(lm->ssh);
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid == 0u) {
    bml_src_issue(lm->ssh, p, 0u, nt);
    if (ns > 1u) bml_src_issue(lm->ssh, p, 1u, nt);
  }
  /* (a copy engine's barrier counts its bytes; copies made by work-item 0
   * itself are ordered by this one: later steps' by the steps' own) */
  barrier(CLK_LOCAL_MEM_FENCE);
  bml_src_take_all(lm, &pl, r.src, 0u);
#else
#pragma unroll
  for (uint i = 0; i < units; i++) bml_lsrc_load(&r.src[i], p, lid + i * wg, 0);
#endif
#pragma unroll
  for (uint i = 0; i < units; i++)
    if ((lid + i * wg) % 256u / 32u < min(8u, nb)) bml_lbuild(lm->tab, lid + i * wg, &r.src[i], unit);
  if (!BML_SRC_STAGED && ns > 1u) {
#pragma unroll
    for (uint i = 0; i < units; i++) bml_lsrc_load(&r.src[i], p, lid + i * wg, nt > 1u ? 1u : 0u);
  }
  bml_stage_d0(lm->dtab, &pl, 0u, r.dq[0]);
#pragma unroll
  for (uint i = 0; i < m; i++) r.acc[i] = 0.0f;
  barrier(CLK_LOCAL_MEM_FENCE);
#if BML_SRC_STAGED
  if (lid == 0u && ns > 2u) bml_src_issue(lm->ssh, p, 2u, nt);
#endif
  /* which of the work-item's rows are the product's */
#pragma unroll
  for (uint i = 0; i < rpt; i++) r.live[i] = r.s.crow + rr + i * lr < rows;
#if BML_RING
  /* The weights' queue is a ring: step s is in slot s % BML_LAHEAD, and a
   * step's slot is refilled (BML_LAHEAD steps on) once its lookups are
   * issued.  The loop is unrolled by BML_LAHEAD, by hand (clang does not
   * apply an unroll pragma to it), so every slot index is a constant and
   * nothing moves between registers (and, BML_LAHEAD even, the step's half
   * of the table). */
  for (;;) {
    if (r.s.cs >= ns) break;
    bml_ring_step(p, lm, &pl, &r, 0u);
    if (r.s.cs >= ns) break;
    bml_ring_step(p, lm, &pl, &r, 1u);
#if BML_LAHEAD > 2
    if (r.s.cs >= ns) break;
    bml_ring_step(p, lm, &pl, &r, 2u);
#endif
#if BML_LAHEAD > 3
    if (r.s.cs >= ns) break;
    bml_ring_step(p, lm, &pl, &r, 3u);
#endif
  }
#else
  /* The weights' queue moves down a slot a step: the step in use is
   * copied out of slot 0 and the last slot loads BML_LAHEAD steps on,
   * before the lookups. */
  while (r.s.cs < ns) {
    const uint hf = r.s.cs & 1u, tn = bml_next_tile(r.s.ct, nt);
    uint4 w[4];
#pragma unroll
    for (uint i = 0; i < m; i++) w[i] = r.wq[0][i];
    bml_step_start(p, lm, &pl, &r, hf, tn);
#pragma unroll
    for (uint a = 0; a + 1u < BML_LAHEAD; a++)
#pragma unroll
      for (uint i = 0; i < m; i++) r.wq[a][i] = r.wq[a + 1u][i], r.dq[a][i] = r.dq[a + 1u][i];
    bml_refill(p, &pl, &r.f, r.wq[BML_LAHEAD - 1], r.dq[BML_LAHEAD - 1], r.s.cs + BML_LAHEAD < ns);
    bml_lookups(lm, &pl, w, r.acc, r.live, hf, min(8u, nb - r.s.ct * 8u));
    bml_step_end(p, lm, &pl, &r, 0u, hf, tn); /* the queue has moved: slot 0 is step cs + 1 */
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
