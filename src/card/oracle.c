/* oracle.c -- a card is trusted only after it reproduces, on the card, the CPU kernel's bits: the fma probe and every check. */
#include "card/oracle.h"
#include "card/oracle_int.h"

#include "base/env.h"
#include "base/fork.h"
#include "base/hooks.h"
#include "base/log.h"
#include "base/options.h"
#include "base/util.h"
#include "cpu/gen.h"
#include "cpu/half.h"
#include "card/card.h"
#include "card/kernels.h"
#include "card/program.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu/golden.h"
#include "card/tune.h"


void bml_verify_options_init(bml_verify_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->size = sizeof *o;
}

/* The last member of the options' first version: its size stays this. */
#define VERIFY_OPTIONS_V1 (offsetof(bml_verify_options, quick) + sizeof(int))

/* ---- the checks of the kernels -------------------------------------------------- */

typedef struct {
  bml__card *card;
  const bml__build *build;
  bml__card_buf act, out;
} card_state;

/* Fills the line from the card's rows (or from the error rc). */
static void compare_rows(int rc, const float *want, const float *got, size_t rows, bml_verify_line *line, char *detail,
                         size_t detail_len) {
  char e[64];
  line->total = rows;
  line->first_bad = -1;
  if (rc != 0) {
    snprintf(detail, detail_len, "%s", rc == BML_ENOMEM ? "out of memory" : bml__cl_error_string(rc, e, sizeof e));
    line->detail = detail;
  } else {
    line->first_bad = bml__first_difference(want, got, rows);
    line->exact = line->first_bad < 0 ? rows : (size_t)line->first_bad;
    if (line->first_bad >= 0) {
      for (size_t r = (size_t)line->first_bad + 1; r < rows; r++) line->exact += bml__same_bits(want[r], got[r]);
      line->cpu_bits = bml__float_bits(want[line->first_bad]);
      line->card_bits = bml__float_bits(got[line->first_bad]);
    }
  }
  line->ok = rc == 0 && line->first_bad < 0;
}

/* Computes w (rows x n) on the card with kernel k and compares each row with
 * want; fills the line. */
static void check_product(card_state *cs, bml__kernel_id k, const bml_block_q1_0 *w, size_t rows, size_t n,
                          const bml_block_q8_0 *a, const float *want, bml_verify_line *line, char *detail,
                          size_t detail_len) {
  float *got = malloc(rows * sizeof *got);
  bml__card_matrix m;
  bml__rows_part part = {w, rows};
  int rc = got ? bml__card_matrix_upload(cs->card, &part, 1, n, true, &m) : BML_ENOMEM;
  if (rc == 0) {
    rc = bml__card_buf_reserve(cs->card, &cs->out, rows * sizeof(float));
    if (rc == 0) rc = bml__card_buf_poison(cs->card, &cs->out, rows * sizeof(float));
    if (rc != 0) bml__card_matrix_free(cs->card, &m);
  }
  if (rc == 0) {
    double t0 = bml__now();
    rc = bml__card_product(cs->card, cs->build, k, hooks.wg, &m, a, &cs->act, &cs->out, got);
    line->ms = (bml__now() - t0) * 1e3;
    bml__card_matrix_free(cs->card, &m);
  }
  compare_rows(rc, want, got, rows, line, detail, detail_len);
  free(got);
}

/* 100x2688 is 21 blocks a row: two whole tiles of eight and a part of one.
 * The quick checks take the first six. */
static const size_t full_shapes[][2] = {{64, 128},   {7, 256},   {1, 4096},    {257, 1024},
                                        {301, 5120}, {100, 2688}, {4096, 4096}, {12288, 4096}};
#define QUICK_SHAPES 6
/* A simulator's (hooks.tiny): one block, a part of a tile, four whole
 * tiles, and two tiles and a part, on few rows. */
static const size_t tiny_shapes[][2] = {{64, 128}, {7, 256}, {1, 4096}, {9, 2688}};

static size_t shape_count(bool quick) {
  return hooks.tiny ? BML_ARRAY_SIZE(tiny_shapes) : quick ? QUICK_SHAPES : BML_ARRAY_SIZE(full_shapes);
}

static const size_t *shape_at(size_t s) { return hooks.tiny ? tiny_shapes[s] : full_shapes[s]; }

/* Random and layer-shaped data of one shape, and the CPU's answer. */
typedef struct {
  bml_block_q1_0 *w;
  bml_block_q8_0 *a;
  float *want;
} case_data;

/* The operands of a case; its answer is left to the caller. */
static int gen_case(size_t rows, size_t n, bool layer, uint64_t seed, case_data *d) {
  d->w = malloc(rows * (n / BML_Q1_0_BLOCK) * sizeof *d->w);
  d->a = malloc(n / BML_Q8_0_BLOCK * sizeof *d->a);
  d->want = malloc(rows * sizeof *d->want);
  if (!d->w || !d->a || !d->want) return BML_ENOMEM;
  bml__gen_q1_0(&seed, d->w, rows, n, layer);
  return bml__gen_q8_0(&seed, d->a, n, layer);
}

static int make_case(size_t rows, size_t n, bool layer, uint64_t seed, case_data *d) {
  int rc = gen_case(rows, n, layer, seed, d);
  return rc ? rc : bml_q1_0_mat_vec(d->w, rows, n, d->a, d->want);
}

/* Random data whose activation has an infinite scale: the rows are mostly
 * NaN (their lanes' infinities of both signs meet), and about one in a
 * hundred is an infinity, which a kernel that makes inf * 0 of the wrong
 * form would turn into NaN.  Rows of two blocks. */
#define INF_ROWS (hooks.tiny ? (size_t)32 : (size_t)2048)
#define INF_N 256
static int make_infinite_case(case_data *d) {
  int rc = gen_case(INF_ROWS, INF_N, false, 0x1f1f1f1fu, d);
  if (rc != 0) return rc;
  d->a[1].d = 0x7c00; /* +inf: block 0, sub-block 1 */
  return bml_q1_0_mat_vec(d->w, INF_ROWS, INF_N, d->a, d->want);
}

static void free_case(case_data *d) {
  free(d->w);
  free(d->a);
  free(d->want);
}

/* One line: kernel k on case d (made with status rc), which is freed. */
static void check_case(run *v, card_state *cs, bml__kernel_id k, size_t rows, size_t n, const char *regime, int rc,
                       case_data *d) {
  bml_verify_line line = {.check = bml__kernel_name(k), .fma = cs->build->emulated_fma ? "emulated" : "native",
                          .rows = rows, .n = n, .regime = regime};
  char detail[160];
  if (rc == 0)
    check_product(cs, k, d->w, rows, n, d->a, d->want, &line, detail, sizeof detail);
  else
    line.detail = "out of memory for the test data", line.first_bad = -1;
  free_case(d);
  bml__oracle_emit(v, &line);
}

/* Each kernel's cases have their own seeds, and each check starts from
 * poisoned buffers: a kernel that leaves them alone cannot pass on the
 * answer another kernel left there. */
static void check_shapes(run *v, card_state *cs, bml__kernel_id k, bool quick) {
  size_t nshapes = shape_count(quick);
  for (size_t s = 0; s < nshapes; s++)
    for (int layer = 0; layer < 2; layer++) {
      size_t rows = shape_at(s)[0], n = shape_at(s)[1];
      case_data d = {0};
      int rc = make_case(rows, n, layer, 0x5eed0000u + 0x100u * (unsigned)k + s * 2 + (unsigned)layer, &d);
      check_case(v, cs, k, rows, n, layer ? "layer" : "random", rc, &d);
    }
  case_data d = {0};
  int rc = make_infinite_case(&d);
  check_case(v, cs, k, INF_ROWS, INF_N, "infinite", rc, &d);
}

/* Every case of ggml's golden file, one line per kernel and build: ggml's
 * own bits, reached on the card. */
static void check_golden(run *v, card_state *cs, bml__kernel_id k, const bml__golden_q1 *g, int ng) {
  bml_verify_line sum = {.check = bml__kernel_name(k), .fma = cs->build->emulated_fma ? "emulated" : "native",
                         .regime = "golden", .first_bad = -1, .ok = 1};
  char detail[160];
  for (int i = 0; i < ng && sum.ok; i++) {
    bml_verify_line line = {0};
    check_product(cs, k, g[i].w, g[i].rows, g[i].n, g[i].a, g[i].ref, &line, detail, sizeof detail);
    sum.exact += line.exact;
    sum.total += line.total;
    sum.ms += line.ms;
    if (!line.ok) {
      sum = (bml_verify_line){.check = sum.check, .fma = sum.fma, .regime = "golden", .rows = g[i].rows,
                              .n = g[i].n, .exact = sum.exact, .total = sum.total, .ms = sum.ms,
                              .first_bad = line.first_bad, .cpu_bits = line.cpu_bits,
                              .card_bits = line.card_bits, .detail = line.detail};
    }
  }
  bml__oracle_emit(v, &sum);
}

/* One case of a batch: its operands, its matrix on the card, its results. */
typedef struct {
  const bml_block_q1_0 *w;
  const bml_block_q8_0 *a;
  const float *want;
  size_t rows, n;
  bml__card_matrix m;
  size_t act_off, out_off;
} batch_case;

/* Runs the cases as one batch of batched kernel k (all matrices in the
 * card's slabs, one launch per slab and BML_RUN_BYTES) into got.  Returns 0 or an error. */
static int run_batch(card_state *cs, bml__batched_id k, batch_case *bc, size_t n, float *got) {
  size_t act_bytes = 0, out_rows = 0;
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < n; i++) {
    bml__rows_part part = {bc[i].w, bc[i].rows};
    rc = bml__card_matrix_upload(cs->card, &part, 1, bc[i].n, hooks.exact_slabs, &bc[i].m);
    bc[i].act_off = act_bytes, bc[i].out_off = out_rows;
    act_bytes += bml__card_act_bytes(bc[i].n);
    out_rows += bc[i].rows;
  }
  bml__batch_item *items = malloc(n * sizeof *items);
  size_t nrec = 0;
  for (size_t i = 0; rc == 0 && items && i < n; i++) {
    items[i] = (bml__batch_item){&bc[i].m, k, bc[i].act_off, bc[i].out_off};
    nrec += bc[i].m.nchunks;
  }
  bml__batch_rec *recs = malloc((nrec ? nrec : 1) * sizeof *recs);
  bml__batch_run *runs = malloc((nrec ? nrec : 1) * sizeof *runs);
  if (rc == 0 && (!items || !recs || !runs)) rc = BML_ENOMEM;
  size_t in_bytes = act_bytes + nrec * sizeof(bml__desc);
  if (rc == 0) rc = bml__card_buf_reserve(cs->card, &cs->act, in_bytes);
  if (rc == 0) rc = bml__card_buf_reserve(cs->card, &cs->out, out_rows * sizeof(float));
  if (rc == 0) rc = bml__card_buf_poison(cs->card, &cs->out, out_rows * sizeof(float));
  if (rc == 0) {
    for (size_t i = 0; i < n; i++) bml__card_act_repack(bc[i].a, bc[i].n, (char *)cs->act.host + bc[i].act_off);
    size_t nruns = bml__batch_plan(cs->card, items, n, recs, (bml__desc *)((char *)cs->act.host + act_bytes), runs);
    rc = bml__card_buf_write(cs->card, &cs->act, in_bytes);
    for (size_t i = 0; rc == 0 && i < nruns; i++)
      rc = bml__card_batched_enqueue(cs->card, cs->card->queue, cs->build, k, runs[i].slab, &cs->act,
                                     act_bytes + runs[i].first * sizeof(bml__desc), runs[i].count, runs[i].groups,
                                     &cs->out, NULL);
    if (rc == 0) rc = bml__card_buf_read(cs->card, &cs->out, out_rows * sizeof(float));
    if (rc == 0) rc = clFinish(cs->card->queue);
    if (rc == 0) memcpy(got, cs->out.host, out_rows * sizeof(float));
  }
  for (size_t i = 0; i < n; i++) bml__card_matrix_free(cs->card, &bc[i].m);
  free(items), free(recs), free(runs);
  return rc;
}

/* The batched kernels: every shape and regime, and every golden case, as
 * one batch of many products; a line per shape and regime, one for the
 * golden cases. */
static void check_batched(run *v, card_state *cs, bml__batched_id k, const bml__golden_q1 *g, int ng, bool quick) {
  /* the shapes in both regimes, the infinite scale, then ggml's cases */
  const size_t nshapes = shape_count(quick), inf_at = nshapes * 2,
               nown = inf_at + 1, ncases = nown + (size_t)ng;
  const char *fma = cs->build->emulated_fma ? "emulated" : "native";
  case_data *d = calloc(nown, sizeof *d);
  batch_case *bc = calloc(ncases, sizeof *bc);
  size_t out_rows = 0;
  int rc = d && bc ? 0 : BML_ENOMEM;
  for (size_t i = 0; rc == 0 && i < nown; i++) {
    const bool inf = i == inf_at;
    size_t rows = inf ? INF_ROWS : shape_at(i / 2)[0], n = inf ? INF_N : shape_at(i / 2)[1];
    rc = inf ? make_infinite_case(&d[i]) : make_case(rows, n, i % 2, 0xba7c0000u + 0x100u * (unsigned)k + (unsigned)i, &d[i]);
    bc[i] = (batch_case){d[i].w, d[i].a, d[i].want, rows, n, {0}, 0, 0};
  }
  for (int i = 0; rc == 0 && i < ng; i++)
    bc[nown + (size_t)i] = (batch_case){g[i].w, g[i].a, g[i].ref, g[i].rows, g[i].n, {0}, 0, 0};
  for (size_t i = 0; bc && i < ncases; i++) out_rows += bc[i].rows;
  float *got = rc == 0 ? malloc((out_rows ? out_rows : 1) * sizeof *got) : NULL;
  if (rc == 0 && !got) rc = BML_ENOMEM;
  double t0 = bml__now();
  if (rc == 0) rc = run_batch(cs, k, bc, ncases, got);
  double ms = (bml__now() - t0) * 1e3;
  char detail[160];
  bml_verify_line sum = {.check = bml__batched_name(k), .fma = fma, .regime = "golden", .first_bad = -1, .ok = 1,
                         .batched = 1};
  for (size_t i = 0; i < (rc == 0 ? ncases : nown); i++) {
    bml_verify_line line = {.check = bml__batched_name(k), .fma = fma, .rows = bc ? bc[i].rows : 0,
                            .n = bc ? bc[i].n : 0,
                            .regime = i == inf_at ? "infinite" : i % 2 ? "layer" : "random", .ms = ms,
                            .batched = 1};
    compare_rows(rc, bc ? bc[i].want : NULL, got ? got + bc[i].out_off : NULL, bc ? bc[i].rows : 0, &line, detail,
                 sizeof detail);
    if (i < nown) {
      bml__oracle_emit(v, &line);
    } else {
      sum.exact += line.exact, sum.total += line.total, sum.ms = ms;
      if (!line.ok && sum.ok)
        sum = (bml_verify_line){.check = sum.check, .fma = fma, .regime = "golden", .rows = line.rows, .n = line.n,
                                .exact = sum.exact, .total = sum.total, .ms = ms, .first_bad = line.first_bad,
                                .cpu_bits = line.cpu_bits, .card_bits = line.card_bits, .detail = line.detail,
                                .batched = 1};
    }
  }
  if (ng > 0 && rc == 0) bml__oracle_emit(v, &sum);
  for (size_t i = 0; d && i < nown; i++) free_case(&d[i]);
  free(d), free(bc), free(got);
}

static void check_build(run *v, bml__card *c, const bml__build *b, const bml__golden_q1 *g, int ng, bool quick) {
  card_state cs = {c, b, {0}, {0}};
  for (int k = 0; k < BML_KERNEL_COUNT; k++) {
    check_shapes(v, &cs, (bml__kernel_id)k, quick);
    if (ng > 0) check_golden(v, &cs, (bml__kernel_id)k, g, ng);
  }
  for (int k = 0; k < BML_BATCHED_COUNT; k++) check_batched(v, &cs, (bml__batched_id)k, g, ng, quick);
  bml__card_buf_free(&cs.act);
  bml__card_buf_free(&cs.out);
}

/* Builds cl/q1_0*.cl for one fma (a variant), from a remembered binary
 * where there is one; the failure's log and options are kept in *log
 * (malloc'd, NULL when it built). */
static int build(bml__card *c, bool emulate, bml__build *b, char **log) {
  *log = NULL;
  bool from_binary;
  int rc = bml__card_build_cached(c, emulate, &hooks, b, log, &from_binary);
  if (rc == 0) free(*log), *log = NULL;
  return rc;
}

/* Both variants, the native fma's and the emulation's.  A compiler may
 * refuse one and take the other (a driver's compiler that fails on the
 * emulation's longer code, or on fma()): the one it refused is left out,
 * said on an informational line (ok, with the log), and the card is
 * checked with the other alone.  Only when both fail is the card refused,
 * on a line for each.  Returns 0 when at least one built. */
static int build_variants(run *v, bml__card *c, bml__build *native, bml__build *emulated, bool *native_built,
                          bool *emulated_built) {
  char *log[2] = {NULL, NULL};
  int rc[2] = {build(c, false, native, &log[0]), build(c, true, emulated, &log[1])};
  *native_built = rc[0] == 0, *emulated_built = rc[1] == 0;
  for (int i = 0; i < 2; i++) {
    if (rc[i] == 0) continue;
    const char *fma = i ? "emulated" : "native";
    if (rc[1 - i] != 0) {
      bml__oracle_emit_error(v, "build", fma, log[i] ? log[i] : "cannot build the kernels");
      continue;
    }
    size_t len = (log[i] ? strlen(log[i]) : 0) + 160;
    char *detail = malloc(len);
    if (detail)
      snprintf(detail, len, "left out: the %s fma's build failed, the card is checked with the %s one alone: %s",
               fma, i ? "native" : "emulated", log[i] ? log[i] : "cannot build the kernels");
    bml_verify_line line = {.check = "build", .fma = fma, .regime = "", .first_bad = -1, .ok = 1,
                            .detail = detail ? detail : "left out: this fma's build failed"};
    bml__oracle_emit(v, &line);
    free(detail);
  }
  free(log[0]), free(log[1]);
  return *native_built || *emulated_built ? 0 : rc[0];
}

int bml__oracle_card_open(const bml__device *d, cl_context ctx, cl_command_queue queue, bml__card **out, char *err,
                          size_t errlen) {
  bml__card *c = NULL;
  int rc = bml__card_open_on(&d->cl, ctx, queue, &c, err, errlen);
  if (rc != 0) return rc;
  c->max_chunk_rows = hooks.max_chunk_rows;
  if (hooks.discrete) c->host_unified = false;
  if (hooks.local_mem) c->local_mem = hooks.local_mem;
  c->kernel_wg_cap = hooks.kernel_wg;
  c->kernel_wg_cap_emulated = hooks.kernel_wg_emulated;
  if (hooks.max_groups) c->max_groups = hooks.max_groups == SIZE_MAX ? 0 : hooks.max_groups;
  int tuned = bml__tune(c, &d->cl);
  if (tuned != 0) bml__debug(BML_CAT_BUILD, "tuning failed (%s): the default tunables", bml_err_name(tuned));
  if (hooks.lr_shape[0])
    bml__card_set_tunables(c, c->lrows, hooks.lr_shape[0], hooks.lr_shape[1], hooks.lr_shape[2]);
  *out = c;
  return 0;
}

bool bml__oracle_quick(const bml_verify_options *opt) { return (opt && opt->quick) || hooks.quick; }

int bml__oracle_verify_card(bml__card *c, const bml__device *d, size_t index, const bml_verify_options *opt,
                            bml__build *use) {
  run v = {opt, index, d->cl.name, false};
  bml__build native = {0}, emulated = {0};
  bml__golden_q1 *g = NULL;
  int ng = 0;
  bool native_ok = false;
  const bool quick = bml__oracle_quick(opt);
  int rc;
  bool native_built = false, emulated_built = false;
  /* ggml's cases first: where they were named and cannot be read, the
   * verdict cannot be complete, and no build or check is run for it */
  ng = bml__oracle_load_golden(&v, &g);
  if (v.failed) {
    rc = BML_EVERIFY;
    goto done;
  }
  if ((rc = build_variants(&v, c, &native, &emulated, &native_built, &emulated_built)) != 0) goto done;
  /* the probe kernel is in both builds, and runs both fmas */
  if ((rc = bml__oracle_probe(&v, c, native_built ? &native : &emulated, &native_ok)) != 0) goto done;
  native_ok = native_ok && native_built;
  if (!native_ok && !emulated_built) {
    bml__oracle_emit_error(&v, "build", "emulated", "the native fma is not correctly rounded and the emulated fma's build failed: "
               "no build gives the reference's bits");
    rc = BML_EVERIFY;
    goto done;
  }
  if (native_ok) check_build(&v, c, &native, g, ng, quick);
  if (emulated_built) check_build(&v, c, &emulated, g, ng, quick);
  rc = v.failed ? BML_EVERIFY : 0;
done:
  /* only the build a later open uses is worth its binary: a driver that
   * compiles every kernel to give one (PoCL: 4-12 s a build) would spend
   * it on the other build, and on a refused card's, for nothing */
  if (rc != 0 || v.failed || !native_ok) native.remember = false;
  if (rc != 0 || v.failed || native_ok) emulated.remember = false;
  if (rc == 0 && use) {
    *use = native_ok ? native : emulated;
    memset(native_ok ? &native : &emulated, 0, sizeof native);
  }
  bml__golden_free_q1(g, ng);
  bml__build_release(&native);
  bml__build_release(&emulated);
  return rc == BML_ENOMEM ? rc : v.failed ? BML_EVERIFY : rc;
}

int bml__oracle_verify(const bml__device *d, size_t index, const bml_verify_options *opt, bml__card **card_out,
                       bml__build *use) {
  run v = {opt, index, d->cl.name, false};
  char err[256] = "";
  bml__card *c = NULL;
  if (bml__opencl_forked()) { /* the driver's threads and state are the parent's (fork.c) */
    bml__oracle_emit_error(&v, "open", "", "this process is a child of fork() of one that used OpenCL: the driver cannot be "
               "used here");
    return BML_EVERIFY;
  }
  int rc = bml__oracle_card_open(d, NULL, NULL, &c, err, sizeof err);
  if (rc != 0) {
    bml__oracle_emit_error(&v, "open", "", err);
    return rc == BML_ENOMEM ? rc : BML_EVERIFY;
  }
  bml__build b = {0};
  rc = bml__oracle_verify_card(c, d, index, opt, card_out ? &b : NULL);
  if (rc == 0 && card_out) {
    *use = b;
    *card_out = c;
    c = NULL;
  }
  bml__card_close(c);
  return rc;
}

/* ---- the spot check of a remembered verdict ---------------------------------------- */

/* Its products: a few blocks a row (a single block cannot tell a fused
 * outer fma from a multiply and an add), random with -128 quants and the
 * special scales, and layer-shaped with a partial tile of blocks. */
static const struct {
  size_t rows, n;
  bool layer;
} spot_cases[] = {{96, 1024, false}, {40, 2688, true}};
#define SPOT_CASES (sizeof spot_cases / sizeof spot_cases[0])

/* Each kernel, and each batched kernel, on the spot cases: every row
 * compared with the CPU's. */
static int spot_kernels(bml__card *c, const bml__build *b, case_data *d, char *why, size_t len) {
  card_state cs = {c, b, {0}, {0}};
  bml_verify_line line;
  char detail[160];
  int rc = 0;
  for (int k = 0; rc == 0 && k < BML_KERNEL_COUNT + BML_BATCHED_COUNT; k++) {
    const char *name = k < BML_KERNEL_COUNT ? bml__kernel_name((bml__kernel_id)k)
                                            : bml__batched_name((bml__batched_id)(k - BML_KERNEL_COUNT));
    batch_case bc[SPOT_CASES];
    float *got = NULL;
    size_t rows = 0;
    for (size_t i = 0; i < SPOT_CASES; i++) {
      bc[i] = (batch_case){d[i].w, d[i].a, d[i].want, spot_cases[i].rows, spot_cases[i].n, {0}, 0, 0};
      rows += spot_cases[i].rows;
    }
    if (k >= BML_KERNEL_COUNT && (got = malloc(rows * sizeof *got)) == NULL) return BML_ENOMEM;
    const int brc = got ? run_batch(&cs, (bml__batched_id)(k - BML_KERNEL_COUNT), bc, SPOT_CASES, got) : 0;
    for (size_t i = 0; rc == 0 && i < SPOT_CASES; i++) {
      memset(&line, 0, sizeof line);
      if (got)
        compare_rows(brc, d[i].want, got + bc[i].out_off, spot_cases[i].rows, &line, detail, sizeof detail);
      else
        check_product(&cs, (bml__kernel_id)k, d[i].w, spot_cases[i].rows, spot_cases[i].n, d[i].a, d[i].want, &line,
                      detail, sizeof detail);
      if (line.ok) continue;
      if (line.first_bad >= 0)
        snprintf(why, len, "%s %zux%zu %s: row %ld differs (cpu 0x%08x, card 0x%08x)", name, spot_cases[i].rows,
                 spot_cases[i].n, spot_cases[i].layer ? "layer" : "random", line.first_bad, line.cpu_bits,
                 line.card_bits);
      else
        snprintf(why, len, "%s %zux%zu: %s", name, spot_cases[i].rows, spot_cases[i].n,
                 line.detail ? line.detail : "failed");
      rc = BML_EVERIFY;
    }
    free(got);
  }
  bml__card_buf_free(&cs.act);
  bml__card_buf_free(&cs.out);
  return rc;
}

int bml__oracle_confirm(bml__card *c, bool emulated, uint64_t seed, bml__build *use, char *why, size_t len) {
  char *log = NULL;
  bool from_binary = false;
  why[0] = '\0';
  int rc = bml__card_build_cached(c, emulated, &hooks, use, &log, &from_binary);
  if (rc != 0) {
    snprintf(why, len, "the build failed: %.300s", log ? log : bml_strerror(rc));
    free(log);
    return rc == BML_ENOMEM ? rc : BML_EVERIFY;
  }
  free(log);
  case_data d[SPOT_CASES] = {{0}};
  for (size_t i = 0; rc == 0 && i < SPOT_CASES; i++)
    rc = make_case(spot_cases[i].rows, spot_cases[i].n, spot_cases[i].layer, seed + i, &d[i]);
  if (rc == 0) rc = bml__oracle_spot_probe(c, use, why, len);
  if (rc == 0) rc = spot_kernels(c, use, d, why, len);
  for (size_t i = 0; i < SPOT_CASES; i++) free_case(&d[i]);
  if (rc != 0) bml__build_release(use);
  if (rc != 0 && !why[0]) snprintf(why, len, "%s", bml_strerror(rc));
  return rc;
}

int bml_devices_verify(bml_devices *list, size_t i, const bml_verify_options *opt) {
  if (!list || i >= list->len) return BML_EINVAL;
  bml_verify_options o;
  bml_verify_options_init(&o);
  int rc = opt ? bml__options_take(opt, &o, sizeof o, VERIFY_OPTIONS_V1, "bml_verify_options") : 0;
  if (rc != 0) return rc;
  bml__device *d = &list->dev[i];
  if (!d->pub.usable) return BML_ENODEV;
  rc = bml__oracle_verify(d, i, &o, NULL, NULL);
  d->pub.verified = rc == 0;
  return rc;
}
