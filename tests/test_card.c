/* test_card.c -- the card's buffers, chunks, slabs, build fallbacks and batch plans, on a real OpenCL implementation (a GPU where there is one, else PoCL) and without one. */
#include <criterion/criterion.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "logbuf.h"
#include "golden.h"
#include "base/hooks.h"
#include "card/oracle.h"
#include "card/tune.h"
#include "cpu/q1_0.h"
#include "cpu/gen.h"
#include "card/card.h"
#include "card/slab.h"
#include "card/program.h"
#include "card/kernels.h"
#include "oracletest.h"
#include "card/tune.h"

static void no_hooks(void) { bml__oracle_set_hooks(NULL); }

TestSuite(card, .init = no_hooks, .fini = no_hooks, .timeout = 600);

/* The card under test opened (no verification): its listing in *list,
 * its index in *index. */
static bml__card *card_opened(bml_devices **list, size_t *index) {
  *list = card_under_test(index);
  char err[256];
  bml__card *c = NULL;
  cr_assert_eq(bml__card_open(&(*list)->dev[*index].cl, &c, err, sizeof err), 0, "%s", err);
  return c;
}

/* Boards' drivers cap a buffer at a quarter of their memory or less
 * (CL_DEVICE_MAX_MEM_ALLOC_SIZE: 1792 MiB of 7 GiB on an Adreno 635): a
 * matrix whose bits exceed the cap is cut into chunks of rows, no slab's
 * buffer exceeds it, and every kernel gives the CPU's bits across the
 * chunks.  Here the cap is 64 KiB: 301x5120 (640 bytes of bits a row) takes
 * three chunks of 102 rows at most. */
Test(card, a_card_whose_largest_buffer_is_small_cuts_matrices_and_keeps_the_bits) {
  size_t i;
  bml_devices *l;
  bml__card *c = card_opened(&l, &i);
  c->max_alloc = 64 << 10;
  const size_t rows = 301, n = 5120;
  bml_block_q1_0 *w = malloc(rows * (n / 128) * sizeof *w);
  bml_block_q8_0 *a = malloc(n / 32 * sizeof *a);
  float *want = malloc(rows * sizeof *want), *got = malloc(rows * sizeof *got);
  cr_assert(w && a && want && got);
  uint64_t seed = 0xa110cu;
  bml__gen_q1_0(&seed, w, rows, n, false);
  cr_assert_eq(bml__gen_q8_0(&seed, a, n, false), 0);
  cr_assert_eq(bml__q1_0_run(&bml__q1_0_ref, w, rows, n, a, want), 0);
  bml__build b;
  char *log = NULL;
  cr_assert_eq(bml__card_build(c, false, NULL, &b, &log), 0, "%s", log ? log : "");
  free(log);
  cr_expect_null(strstr(b.options, "-cl-std"), "the build asks for an OpenCL C version: %s", b.options);
  bml__rows_part part = {w, rows};
  bml__card_matrix m = {0};
  cr_assert_eq(bml__card_matrix_upload(c, &part, 1, n, false, &m), 0);
  cr_expect_eq(m.nchunks, 3, "%zu chunks", m.nchunks);
  for (size_t s = 0; s < c->nslabs; s++)
    cr_expect_leq((uint64_t)c->slabs[s].cap * 16, c->max_alloc, "slab %zu: %zu row-blocks of bits", s, c->slabs[s].cap);
  bml__card_buf act = {0}, out = {0};
  for (int k = 0; k < BML_KERNEL_COUNT; k++) {
    memset(got, 0, rows * sizeof *got);
    cr_assert_eq(bml__card_product(c, &b, (bml__kernel_id)k, 0, &m, a, &act, &out, got), 0);
    const long r = bml__first_difference(want, got, rows);
    cr_expect(r < 0, "%s: row %ld differs (cpu 0x%08x, card 0x%08x)", bml__kernel_name((bml__kernel_id)k), r,
              r < 0 ? 0 : bml__float_bits(want[r]), r < 0 ? 0 : bml__float_bits(got[r]));
  }
  bml__card_buf_free(&act);
  bml__card_buf_free(&out);
  bml__card_matrix_free(c, &m);
  bml__build_release(&b);
  bml__card_close(c);
  bml_devices_free(l);
  free(w), free(a), free(want), free(got);
}

Test(card, slabs_reuse_freed_ranges_merge_them_and_release_empty_slabs) {
  size_t i;
  bml_devices *l;
  bml__card *c = card_opened(&l, &i);
  size_t s[4], off[4];
  /* the first slab is exact; a later one doubles what the card holds, and
   * is BML_SLAB_MIN_BYTES at least; exact slabs fill up */
  const size_t min_rb = BML_SLAB_MIN_BYTES / BML_ROW_BLOCK_BYTES;
  cr_assert_eq(bml__slab_alloc(c, 1000, true, &s[0], &off[0]), 0);
  cr_expect_eq(bml__card_slab_bytes(c), 1000 * BML_ROW_BLOCK_BYTES);
  cr_expect_eq(bml__slab_growth(c, 10, false), min_rb * BML_ROW_BLOCK_BYTES, "a new slab is BML_SLAB_MIN_BYTES at least");
  cr_expect_eq(bml__slab_growth(c, 10, true), 10 * BML_ROW_BLOCK_BYTES, "an exact slab is just what is asked");
  cr_assert_eq(bml__slab_alloc(c, 1000, true, &s[1], &off[1]), 0);
  cr_expect_eq(bml__card_slab_bytes(c), 2000 * BML_ROW_BLOCK_BYTES);
  bml__slab_free(c, s[1], off[1], 1000);
  cr_expect_eq(bml__card_slab_bytes(c), 1000 * BML_ROW_BLOCK_BYTES, "the emptied second slab was not released");
  cr_assert_eq(bml__slab_alloc(c, 300, false, &s[1], &off[1]), 0);
  cr_assert_eq(bml__slab_alloc(c, 300, false, &s[2], &off[2]), 0);
  cr_assert_eq(bml__slab_alloc(c, 300, false, &s[3], &off[3]), 0);
  cr_expect(s[1] != s[0] && s[2] == s[1] && s[3] == s[1], "the three share the second slab");
  cr_expect(off[1] == 0 && off[2] == 300 && off[3] == 600);
  cr_expect_eq(bml__card_slab_bytes(c), (1000 + min_rb) * BML_ROW_BLOCK_BYTES);
  cr_expect_eq(bml__slab_growth(c, min_rb - 900, false), 0, "the rest of the second slab is free");
  /* a freed range is reused; freed neighbours merge into one range */
  bml__slab_free(c, s[2], off[2], 300);
  size_t s2, o2;
  cr_assert_eq(bml__slab_alloc(c, 250, false, &s2, &o2), 0);
  cr_expect(s2 == s[1] && o2 == 300, "the hole was not reused (slab %zu at %zu)", s2, o2);
  bml__slab_free(c, s2, o2, 250);
  bml__slab_free(c, s[3], off[3], 300);
  cr_expect_eq(bml__slab_growth(c, min_rb - 300, false), 0, "the ranges from 300 on did not merge");
  /* an emptied slab goes back to the driver */
  bml__slab_free(c, s[1], off[1], 300);
  cr_expect_eq(bml__card_slab_bytes(c), 1000 * BML_ROW_BLOCK_BYTES);
  bml__slab_free(c, s[0], off[0], 1000);
  cr_expect_eq(bml__card_slab_bytes(c), 0);
  bml__card_close(c);
  bml_devices_free(l);
}

/* PoCL shares the host's memory, so its matrices go up through the mapped
 * (host-unified) path; a discrete card, like the H200, copies them with
 * writes.  That path, forced here, gives every check the same bits. */
Test(card, the_discrete_cards_upload_path_passes_every_check) {
  size_t i;
  bml_devices *l = card_under_test(&i);
  static collected c;
  const bml__oracle_hooks h = {.discrete = true, .quick = true, .max_chunk_rows = 300};
  bml__oracle_set_hooks(&h);
  int rc = verify(l, i, &c, 1);
  for (size_t k = 0; k < c.n; k++)
    cr_expect(c.lines[k].ok, "%s %s %zux%zu %s: %zu/%zu", c.lines[k].check, c.lines[k].fma, c.lines[k].rows,
              c.lines[k].n, c.lines[k].regime, c.lines[k].exact, c.lines[k].total);
  cr_expect_eq(rc, 0, "%s", bml_err_name(rc));
  cr_expect_gt(c.n, 20, "only %zu checks", c.n);
  bml_devices_free(l);
}

/* The growth a matrix of several chunks will cause is what allocating its
 * chunks one after the other causes: each chunk takes what the ones before
 * left.  Summing each chunk's growth against the same state (as before)
 * let every chunk "fit" one free range (the limiter then allowed more than
 * its limit) and charged each chunk a slab of the current total (too
 * little when they double, too much when one slab holds them all).
 * Random matrices, exact or not, with random frees between them. */
Test(card, the_growth_of_a_chunked_matrix_is_what_its_allocation_makes) {
  size_t i;
  bml_devices *l;
  bml__card *c = card_opened(&l, &i);
  const size_t min_rb = BML_SLAB_MIN_BYTES / BML_ROW_BLOCK_BYTES;
  enum { MAXHELD = 64 };
  size_t held_slab[MAXHELD], held_off[MAXHELD], held_rb[MAXHELD], nheld = 0;
  uint64_t seed = 0x51ab5eedu;
  for (int step = 0; step < 200; step++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    const uint64_t x = seed >> 20;
    /* free a few, to leave holes */
    while (nheld > 0 && (nheld >= MAXHELD - 8 || x % 3 == 0)) {
      const size_t k = (size_t)((x >> 8) % nheld);
      bml__slab_free(c, held_slab[k], held_off[k], held_rb[k]);
      held_slab[k] = held_slab[nheld - 1], held_off[k] = held_off[nheld - 1], held_rb[k] = held_rb[--nheld];
      if (x % 7 != 0) break;
    }
    if (bml__card_slab_bytes(c) > (uint64_t)6 * BML_SLAB_MIN_BYTES) { /* keep PoCL's memory modest */
      while (nheld > 0) bml__slab_free(c, held_slab[nheld - 1], held_off[nheld - 1], held_rb[nheld - 1]), nheld--;
    }
    const size_t nchunks = 1 + (size_t)((x >> 4) % 4);
    const size_t rb = 1 + (size_t)((x >> 12) % (min_rb / 2)), last = 1 + (size_t)((x >> 32) % rb);
    const bool exact = (x >> 40) % 2;
    const uint64_t before = bml__card_slab_bytes(c);
    const uint64_t predicted = bml__slab_growth_chunks(c, nchunks, rb, last, exact);
    for (size_t k = 0; k < nchunks && nheld < MAXHELD; k++) {
      const size_t need = k + 1 == nchunks ? last : rb;
      cr_assert_eq(bml__slab_alloc(c, need, exact, &held_slab[nheld], &held_off[nheld]), 0);
      held_rb[nheld++] = need;
    }
    const uint64_t grown = bml__card_slab_bytes(c) - before;
    cr_assert_eq(predicted, grown, "step %d: %zu chunks of %zu (last %zu), %s: predicted %llu bytes, grew %llu",
                 step, nchunks, rb, last, exact ? "exact" : "doubling", (unsigned long long)predicted,
                 (unsigned long long)grown);
  }
  while (nheld > 0) bml__slab_free(c, held_slab[nheld - 1], held_off[nheld - 1], held_rb[nheld - 1]), nheld--;
  cr_expect_eq(bml__card_slab_bytes(c), 0);
  bml__card_close(c);
  bml_devices_free(l);
}

/* The fallback tests' card: the card under test with the default
 * tunables, and whether its platform is NVIDIA's. */
static bml__card *card_for_fallback(bml_devices **l, size_t *i, bool *nvidia) {
  bml__card *c = card_opened(l, i);
  bml__card_set_tunables(c, 32, 32, 4, 1);
  *nvidia = strstr(bml_devices_get(*l, *i)->platform, "NVIDIA") != NULL;
  return c;
}

/* c built with the options its flags force on: the build must succeed,
 * dropping whatever the compiler refuses. */
static void build_forced(bml__card *c, bml__build *b) {
  char *log = NULL;
  cr_assert_eq(bml__card_build(c, false, NULL, b, &log), 0, "%s", log ? log : "");
  free(log);
}

static void fallback_done(bml__card *c, bml_devices *l, bml__build *b) {
  bml__build_release(b);
  bml__card_close(c);
  bml_devices_free(l);
}

/* NVIDIA's driver builds the kernels with cl/nvidia.cl (PTX's prmt inline)
 * and its options; any other compiler that refuses them gets cl/q1_0*.cl's
 * plain C formulation (the same bits, which the oracle checks), not a
 * failed build. */
Test(card, the_byte_permute_build_is_nvidias_and_a_refusal_falls_back_to_plain_c) {
  size_t i;
  bml_devices *l;
  bool nvidia;
  bml__card *c = card_for_fallback(&l, &i, &nvidia);
  cr_expect_eq(c->nvidia_build, nvidia, "NVIDIA's build chosen for \"%s\"", bml_devices_get(l, i)->platform);
  c->nvidia_build = true;
  bml__build b;
  build_forced(c, &b);
  if (nvidia) {
    cr_expect(c->nvidia_build && strstr(b.options, BML_NVIDIA_OPTIONS) != NULL, "%s", b.options);
  } else {
    cr_expect(!c->nvidia_build, "the refused option is still chosen");
    cr_expect(strstr(b.options, "BML_RING") == NULL && strstr(b.options, "BML_D0HALF") == NULL,
              "built with %s", b.options);
  }
  fallback_done(c, l, &b);
}

/* The TMA's copies are NVIDIA's build's on compute capability 9.0 and
 * later; a compiler that refuses them (PoCL, or an older driver's PTX)
 * builds without them, keeping the rest of NVIDIA's build where it takes
 * it, not a failed build. */
Test(card, the_tma_build_is_hoppers_and_a_refusal_falls_back) {
  size_t i;
  bml_devices *l;
  bool nvidia;
  bml__card *c = card_for_fallback(&l, &i, &nvidia);
  cr_expect(!c->nvidia_tma || nvidia, "the TMA chosen for \"%s\"", bml_devices_get(l, i)->platform);
  const bool hopper = c->nvidia_tma;
  c->nvidia_build = c->nvidia_tma = true;
  bml__build b;
  build_forced(c, &b);
  if (hopper) {
    cr_expect(c->nvidia_tma && strstr(b.options, BML_NVIDIA_TMA_OPTION) != NULL, "%s", b.options);
  } else {
    cr_expect(!c->nvidia_tma, "the refused TMA is still chosen");
    cr_expect(strstr(b.options, BML_NVIDIA_TMA_OPTION) == NULL, "built with %s", b.options);
    cr_expect_eq(c->nvidia_build, nvidia, "NVIDIA's other options kept where taken: %s", b.options);
  }
  fallback_done(c, l, &b);
}

/* Planning needs no device: a card's table shapes and matrices' chunks. */
static const bml__card plan_card = {.lrows = 32, .lrrows = 32, .lrrpt = 4, .lrlpt = 1};

/* Plans the items on plan_card and checks that each launch numbers its
 * records' work-groups from 0, in order.  Returns the launches. */
static size_t plan_checked(const bml__batch_item *items, size_t n, bml__batch_rec *scratch, bml__desc *desc,
                           bml__batch_run *runs) {
  size_t nruns = bml__batch_plan(&plan_card, items, n, scratch, desc, runs);
  for (size_t r = 0; r < nruns; r++) {
    size_t g = 0;
    for (size_t k = runs[r].first; k < runs[r].first + runs[r].count; k++) {
      cr_expect_eq(desc[k].first_group, g, "launch %zu record %zu's first work-group", r, k);
      cr_expect_eq(desc[k].wgs, bml__card_groups(&plan_card, runs[r].kind, desc[k].rows),
                   "launch %zu record %zu: a work-group per group (max_groups 0)", r, k);
      g += bml__card_groups(&plan_card, runs[r].kind, desc[k].rows);
    }
    cr_expect_eq(runs[r].groups, g, "launch %zu's work-groups", r);
  }
  return nruns;
}

Test(card, a_batch_plan_is_a_launch_per_slab_and_kernel_cut_every_run_bytes) {
  /* big: 65536 x 8192 in slab 1 (84 MB); small: 1000 x 256 in slab 0 */
  bml__card_chunk big_ch = {0, 65536, 1, 0, 65536 * 64}, small_ch = {0, 1000, 0, 0, 1000 * 2};
  bml__card_matrix big = {65536, 8192, 1, &big_ch, 0}, small = {1000, 256, 1, &small_ch, 0};
  const size_t big_bytes = bml__card_matrix_bytes(65536, 8192);
  cr_assert(3 * big_bytes < BML_RUN_BYTES && 4 * big_bytes >= BML_RUN_BYTES, "the test's sizes assume 256 MiB");
  bml__batch_item items[7];
  for (size_t i = 0; i < 7; i++) /* big, small, big, big, small, big, big */
    items[i] = (bml__batch_item){i == 1 || i == 4 ? &small : &big, BML_BATCHED_LR, 100 * i, 0};
  bml__batch_rec scratch[7];
  bml__desc desc[7];
  bml__batch_run runs[7];
  cr_assert_eq(bml__batch_records(items, 7), 7);
  size_t n = plan_checked(items, 7, scratch, desc, runs);
  /* slab 0's two records, then slab 1's five: four reach 256 MiB, one more */
  cr_assert_eq(n, 3, "%zu launches", n);
  static const size_t first[3] = {0, 2, 6}, count[3] = {2, 4, 1}, slab[3] = {0, 1, 1};
  static const size_t act[7] = {100, 400, 0, 200, 300, 500, 600}; /* each run in the items' order */
  for (size_t r = 0; r < 3; r++) {
    cr_expect_eq(runs[r].first, first[r], "run %zu", r);
    cr_expect_eq(runs[r].count, count[r], "run %zu", r);
    cr_expect_eq(runs[r].slab, slab[r], "run %zu", r);
  }
  for (size_t k = 0; k < 7; k++) cr_expect_eq(desc[k].act_off, act[k], "record %zu", k);
  cr_expect_eq(desc[2].rows, 65536);
  cr_expect_eq(desc[2].nb, 64);
}

/* Plans items on plan_card with max_groups cap and checks each launch's
 * numbering: records' work-groups from 0 in order, each at least one and
 * at most its groups, and within the cap wherever a record has fewer
 * work-groups than groups; past it (more records than the cap) no
 * work-group takes more groups than cover the fewest steps of a record.
 * Returns the one launch's records' work-groups in wgs. */
static void plan_capped(const bml__batch_item *items, size_t n, size_t cap, size_t *wgs) {
  bml__card card = plan_card;
  card.max_groups = cap;
  bml__batch_rec scratch[8];
  bml__desc desc[8];
  bml__batch_run runs[8];
  cr_assert(n <= 8);
  const size_t nruns = bml__batch_plan(&card, items, n, scratch, desc, runs);
  cr_assert_eq(nruns, 1, "cap %zu: %zu launches", cap, nruns);
  size_t first = 0, least = SIZE_MAX;
  bool fewer = false;
  for (size_t i = 0; i < n; i++) {
    const size_t st = bml__card_groups(&card, BML_BATCHED_LR, desc[i].rows) * ((desc[i].nb + 7u) / 8u);
    if (st < least) least = st;
  }
  for (size_t i = 0; i < n; i++) {
    const size_t g = bml__card_groups(&card, BML_BATCHED_LR, desc[i].rows);
    cr_expect_eq(desc[i].first_group, first, "cap %zu, record %zu", cap, i);
    cr_expect(desc[i].wgs >= 1 && desc[i].wgs <= g, "cap %zu, record %zu: %u work-groups for %zu groups", cap, i,
              (unsigned)desc[i].wgs, g);
    fewer |= desc[i].wgs < g;
    wgs[i] = desc[i].wgs;
    first += desc[i].wgs;
    const size_t tiles = (desc[i].nb + 7u) / 8u, taken = (g + desc[i].wgs - 1) / desc[i].wgs;
    if (n > cap && cap)
      cr_expect(taken == 1 || taken * tiles < least + tiles, "cap %zu, record %zu: a work-group takes %zu groups of %zu tiles, past %zu steps",
                cap, i, taken, tiles, least);
  }
  cr_expect_eq(runs[0].groups, first, "cap %zu: the launch's work-groups", cap);
  cr_expect(!fewer || n > cap || runs[0].groups <= cap, "cap %zu: %zu work-groups", cap, runs[0].groups);
}

/* A launch of more groups of rows than the card's max_groups gives its
 * records fewer work-groups, each taking about as many tiles (the
 * kernel's work-group w of a record of W takes its groups w, w + W, ...:
 * every group once, by bml_lanes); one of fewer, or with a record too
 * small to share that way, a work-group per group.  A launch of more
 * records than max_groups runs in waves: its work-groups take the steps of
 * BML_PLAN_WAVES waves, or the fewest steps of a record where fewer. */
Test(card, a_launch_past_max_groups_gives_its_records_fewer_work_groups_each_taking_several_groups) {
  /* 8192 x 4096: 64 groups of 128 rows, 4 tiles each (256 steps); 1000 x
   * 256: 8 groups of one tile (8 steps); 16 MB in all, one launch */
  bml__card_chunk big_ch = {0, 8192, 0, 0, 8192 * 32}, small_ch = {0, 1000, 0, 0, 1000 * 2};
  bml__card_matrix big = {8192, 4096, 1, &big_ch, 0}, small = {1000, 256, 1, &small_ch, 0};
  const bml__batch_item items[4] = {{&big, BML_BATCHED_LR, 0, 0}, {&big, BML_BATCHED_LR, 100, 0},
                                    {&big, BML_BATCHED_LR, 200, 0}, {&small, BML_BATCHED_LR, 300, 0}};
  size_t wgs[4];
  /* three big records, 192 groups: 16 work-groups each (4 groups, 16
   * steps, a work-group) within 50 and 48; one each within 3; within 1,
   * waves: 768 steps over 8 x 1 are 96, 3 work-groups each (of 22 groups,
   * 88 steps) */
  cr_assert_eq(BML_PLAN_WAVES, 8, "the expected counts assume 8 waves");
  static const size_t caps[] = {48, 50, 3, 1}, want[] = {16, 16, 1, 3};
  for (size_t t = 0; t < BML_ARRAY_SIZE(caps); t++) {
    plan_capped(items, 3, caps[t], wgs);
    for (size_t i = 0; i < 3; i++) cr_expect_eq(wgs[i], want[t], "cap %zu, record %zu: %zu", caps[t], i, wgs[i]);
  }
  plan_capped(items, 3, 47, wgs); /* fewer, within 47 (the checks above) */
  cr_expect(wgs[0] < 64 && wgs[0] == wgs[1] && wgs[1] == wgs[2], "cap 47: %zu %zu %zu", wgs[0], wgs[1], wgs[2]);
  /* at or past the launch's groups: a work-group per group */
  static const size_t open_caps[] = {192, 5000, 0};
  for (size_t t = 0; t < BML_ARRAY_SIZE(open_caps); t++) {
    plan_capped(items, 3, open_caps[t], wgs);
    for (size_t i = 0; i < 3; i++) cr_expect_eq(wgs[i], 64, "cap %zu, record %zu: %zu", open_caps[t], i, wgs[i]);
  }
  /* with the small record (8 steps, fewer than a work-group would take): a
   * work-group per group */
  static const size_t small_caps[] = {50, 7, 4};
  for (size_t t = 0; t < BML_ARRAY_SIZE(small_caps); t++) {
    plan_capped(items, 4, small_caps[t], wgs);
    for (size_t i = 0; i < 4; i++)
      cr_expect_eq(wgs[i], i < 3 ? 64 : 8, "cap %zu, record %zu: %zu", small_caps[t], i, wgs[i]);
  }
  /* four records within 3 and 1: waves of the small record's 8 steps (776
   * over 8 x 3 or 8 x 1 are more), 32 work-groups of 2 groups for each big
   * one, one for the small one's 8 groups */
  static const size_t wave_caps[] = {3, 1};
  for (size_t t = 0; t < BML_ARRAY_SIZE(wave_caps); t++) {
    plan_capped(items, 4, wave_caps[t], wgs);
    for (size_t i = 0; i < 4; i++)
      cr_expect_eq(wgs[i], i < 3 ? 32 : 1, "cap %zu, record %zu: %zu", wave_caps[t], i, wgs[i]);
  }
  /* the three big records within 2: 768 steps over 8 x 2 are 48, fewer
   * than a record's 256: 6 work-groups each (of 11 groups, 44 steps) */
  plan_capped(items, 3, 2, wgs);
  for (size_t i = 0; i < 3; i++) cr_expect_eq(wgs[i], 6, "cap 2, record %zu: %zu", i, wgs[i]);
}

/* Plans n items of the matrices ms[i] (all BML_BATCHED_L, in one slab)
 * and returns the launches' record counts in counts. */
static size_t plan_counts(const bml__card_matrix *const *ms, size_t n, size_t *counts) {
  bml__batch_item items[64];
  bml__batch_rec scratch[64];
  bml__desc desc[64];
  bml__batch_run runs[64];
  cr_assert(n <= 64);
  for (size_t i = 0; i < n; i++) items[i] = (bml__batch_item){ms[i], BML_BATCHED_L, 64 * i, 0};
  size_t nruns = plan_checked(items, n, scratch, desc, runs);
  for (size_t r = 0; r < nruns; r++) counts[r] = runs[r].count;
  for (size_t k = 0; k < n; k++) cr_expect_eq(desc[k].act_off, 64 * k, "record %zu out of the items' order", k);
  return nruns;
}

Test(card, a_batch_plan_halves_its_last_launch_down_to_the_tail_bytes) {
  /* 32 products of 12288 x 4096 (7.9 MB each) in one slab: 252 MB, one
   * launch by BML_RUN_BYTES, then halved while the second half is 2 x
   * BML_TAIL_BYTES or more: 16, 8, 4 and 4 records. */
  bml__card_chunk ch = {0, 12288, 0, 0, 12288 * 32};
  bml__card_matrix m = {12288, 4096, 1, &ch, 0};
  const bml__card_matrix *ms[32];
  for (size_t i = 0; i < 32; i++) ms[i] = &m;
  cr_assert(32 * bml__card_matrix_bytes(12288, 4096) < BML_RUN_BYTES, "the test's sizes assume 256 MiB");
  size_t counts[64], n = plan_counts(ms, 32, counts);
  cr_assert_eq(n, 4, "%zu launches", n);
  static const size_t want[4] = {16, 8, 4, 4};
  for (size_t r = 0; r < 4; r++) cr_expect_eq(counts[r], want[r], "launch %zu: %zu records", r, counts[r]);
  /* a record bigger than the rest together is a launch of its own, first
   * or last; and a small batch stays one launch */
  bml__card_chunk hch = {0, 151936, 0, 0, 151936 * 32}, sch = {0, 4096, 0, 0, 4096 * 32};
  bml__card_matrix head = {151936, 4096, 1, &hch, 0}, small = {4096, 4096, 1, &sch, 0};
  const bml__card_matrix *tail_last[3] = {&small, &small, &head}, *head_first[3] = {&head, &small, &small};
  n = plan_counts(tail_last, 3, counts);
  cr_expect(n == 2 && counts[0] == 2 && counts[1] == 1, "small, small, head: %zu launches", n);
  n = plan_counts(head_first, 3, counts);
  cr_expect(n == 2 && counts[0] == 1 && counts[1] == 2, "head, small, small: %zu launches", n);
  const bml__card_matrix *few[3] = {&small, &small, &small};
  n = plan_counts(few, 3, counts);
  cr_expect_eq(n, 1, "three 2.6 MB products: %zu launches", n);
}
