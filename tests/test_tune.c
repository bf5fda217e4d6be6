/* test_tune.c -- the tuning of the table kernels on a real OpenCL implementation (a GPU where there is one, else PoCL): shapes that fit, measured once and remembered. */
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

TestSuite(tune, .init = no_hooks, .fini = no_hooks, .timeout = 600);

/* A kernel may run fewer work-items a group than the device allows
 * (CL_KERNEL_WORK_GROUP_SIZE: its registers, on phones' GPUs).  Every
 * launch of 256 then failed and the tuning gave up at its first candidate,
 * so the card was refused.  Now a build whose work-groups exceed a kernel's
 * limit fails naming it, the tuning passes such shapes over, and the card
 * is verified with shapes that fit.  (The tuning is measured here: a
 * remembered one is of the card's real limit.) */
/* A fresh tuning cache for one test (the tuning is measured, or with the
 * tuning off the defaults apply, whatever the tests' own cache holds). */
typedef struct {
  char dir[32];
  char *was;
} fresh_cache;

static void fresh_cache_use(fresh_cache *f) {
  const char *was = getenv("BANKML_CACHE_DIR");
  f->was = was ? strdup(was) : NULL;
  snprintf(f->dir, sizeof f->dir, "/tmp/bankml-tune-XXXXXX");
  cr_assert_not_null(mkdtemp(f->dir));
  setenv("BANKML_CACHE_DIR", f->dir, 1);
}

static void fresh_cache_drop(fresh_cache *f) {
  char cmd[64];
  snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
  cr_expect_eq(system(cmd), 0);
  if (f->was) setenv("BANKML_CACHE_DIR", f->was, 1); /* the tests' own cache, not the user's */
  else unsetenv("BANKML_CACHE_DIR");
  free(f->was);
}

/* Verifies the card under test with hooks h on a fresh tuning cache, and
 * expects it verified with shapes of at most 128 work-items a group; with
 * use_capped, every kernel of the build the card keeps may run at most 128
 * too (the hooks capped the native build). */
static void expect_tuned_within_128(bml_devices *l, size_t i, const bml__oracle_hooks *h, bool use_capped) {
  fresh_cache f;
  fresh_cache_use(&f);
  static collected c;
  c.n = 0;
  bml__card *card = NULL;
  bml__build use = {0};
  const int rc = verify_keeping(l, i, h, &c, &card, &use);
  bml__oracle_set_hooks(NULL);
  fresh_cache_drop(&f);
  const bml_verify_line *bad = NULL; /* the native probe's line refuses nothing */
  for (size_t k = 0; k < c.n && !bad; k++)
    if (!c.lines[k].ok && strcmp(c.lines[k].fma, "native") != 0) bad = &c.lines[k];
  cr_expect_eq(rc, 0, "not verified: %s: %s", bad ? bad->check : "?", bad && bad->detail ? bad->detail : "");
  if (rc == 0) {
    cr_expect(card->lrows * 8 <= 128 && bml__card_lr_wg(card) <= 128, "_l %zu, _lr %zux%zu, %zu lanes: beyond 128 work-items",
              card->lrows, card->lrrows, card->lrrpt, card->lrlpt);
    for (int k = 0; use_capped && k < BML_KERNEL_COUNT; k++) cr_expect_leq(use.kernel_wg[k], 128, "%d", k);
    bml__build_release(&use);
    bml__card_close(card);
  }
}

Test(tune, kernels_that_take_smaller_work_groups_get_shapes_that_fit) {
  size_t i;
  bml_devices *l = card_under_test(&i);
  bml__oracle_hooks h = {.kernel_wg = 128, .quick = true};
  expect_tuned_within_128(l, i, &h, true);
  fresh_cache f;
  /* untuned, with nothing remembered (the default shapes, 256
   * work-items), the build fails naming the kernel, and the card is
   * refused */
  fresh_cache_use(&f);
  bml__tune_disable(true);
  static collected c2;
  const int untuned = verify_keeping(l, i, &h, &c2, NULL, NULL);
  bml__tune_disable(false);
  fresh_cache_drop(&f);
  cr_expect_eq(untuned, BML_EVERIFY);
  const bml_verify_line *x = NULL;
  for (size_t k = 0; k < c2.n && !x; k++)
    if (strcmp(c2.lines[k].check, "build") == 0) x = &c2.lines[k];
  cr_expect(x && x->detail &&
                strstr(x->detail, " work-items and this device runs at most 128 of it (CL_KERNEL_WORK_GROUP_SIZE)") != NULL,
            "%s", x && x->detail ? x->detail : "no build line");
  bml_devices_free(l);
}

/* The emulated fma's longer code may leave a kernel fewer work-items than
 * the native build's (a GPU's registers): the tuning picks shapes that
 * both builds fit, and the card is verified.  It tuned the native build
 * alone, and the oracle's emulated build then refused the card, for good
 * (the shapes were remembered). */
Test(tune, the_tuned_shapes_fit_the_emulated_build_too) {
  size_t i;
  bml_devices *l = card_under_test(&i);
  const bml__oracle_hooks h = {.kernel_wg_emulated = 128, .quick = true};
  expect_tuned_within_128(l, i, &h, false);
  bml_devices_free(l);
}

/* A device whose work-groups hold at most 128 work-items (PoCL told so by
 * POCL_MAX_WORK_GROUP_SIZE): the default _lr shape is fitted down to 16
 * rows, and the _l candidates were then all taken as beyond the device
 * (their build's _lr had been fitted), so the tuning failed and was
 * measured again at every open. */
Test(tune, a_device_of_128_work_items_is_tuned_within_them) {
  setenv("POCL_MAX_WORK_GROUP_SIZE", "128", 1); /* read when PoCL starts: before the discovery */
  size_t i;
  bml_devices *l = card_under_test(&i);
  if (l->dev[i].cl.max_work_group > 128) {
    bml_devices_free(l);
    cr_skip_test("the card under test is not PoCL (POCL_MAX_WORK_GROUP_SIZE does not apply)");
  }
  fresh_cache f;
  fresh_cache_use(&f);
  bml__oracle_hooks h = {.quick = true};
  static collected c;
  bml__card *card = NULL;
  bml__build use = {0};
  const int rc = verify_keeping(l, i, &h, &c, &card, &use);
  char path[64];
  snprintf(path, sizeof path, "%s/cards.json", f.dir);
  const bool remembered = access(path, R_OK) == 0;
  fresh_cache_drop(&f);
  cr_assert_eq(rc, 0, "not verified: %s", c.n ? c.lines[c.n - 1].check : "no line");
  cr_expect(remembered, "the tuning failed: nothing was remembered");
  cr_expect(card->lrows * 8 <= 128 && bml__card_lr_wg(card) <= 128, "_l %zu, _lr %zux%zu, %zu lanes", card->lrows,
            card->lrrows, card->lrrpt, card->lrlpt);
  bml__build_release(&use);
  bml__card_close(card);
  bml_devices_free(l);
}

static char logged[16384];
static void capture(void *ctx, bml_log_level level, const char *cat, const char *msg) {
  (void)ctx, (void)level, (void)cat;
  logbuf_append(logged, sizeof logged, msg);
}

/* A fresh tuning cache in dir (a mkdtemp template) with the build's debug
 * lines on; the card under test's listing, its index in *index. */
static bml_devices *tuning_fixture(char *dir, size_t *index) {
  cr_assert_not_null(mkdtemp(dir));
  setenv("BANKML_CACHE_DIR", dir, 1);
  setenv("BANKML_DEBUG", "build", 1);
  return card_under_test(index);
}

/* Removes the cache (its file, lock and program binaries) and dir. */
static void tuning_cleanup(const char *dir) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_expect_eq(system(cmd), 0);
}

Test(tune, tunables_are_measured_once_and_remembered) {
  char dir[] = "/tmp/bankml-cl-tune-XXXXXX";
  size_t i;
  bml_devices *l = tuning_fixture(dir, &i);
  bml__oracle_hooks h = {.quick = true, .tiny = true}; /* the tuning is this test's subject */
  bml__oracle_set_hooks(&h);
  bml_log_set_sink(capture, NULL);
  static collected c;
  cr_assert_eq(verify(l, i, &c, 1), 0);
  cr_expect(strstr(logged, "tuned \"") != NULL, "no measurement the first time: %s", logged);
  char path[256];
  snprintf(path, sizeof path, "%s/cards.json", dir);
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f, "no tuning cache written at %s", path);
  char text[4096] = "";
  size_t got = fread(text, 1, sizeof text - 1, f);
  text[got] = '\0';
  fclose(f);
  cr_expect(strstr(text, bml_devices_get(l, i)->name) && strstr(text, "\"lrows\"") && strstr(text, "\"lrrpt\"") &&
                strstr(text, "\"lrlpt\""),
            "%s", text);
  /* what is remembered is what was measured, "always _lr" (0 rows) included */
  const char *tuned = strstr(logged, "tuned \"");
  char from[64] = "";
  if (tuned && strstr(tuned, " from ")) sscanf(strstr(tuned, " from "), " from %63s", from);
  logged[0] = '\0';
  c.n = 0;
  cr_assert_eq(verify(l, i, &c, 1), 0);
  cr_expect(strstr(logged, "tuning \"") == NULL, "measured again although remembered: %s", logged);
  const char *remembered = strstr(logged, "remembered: ");
  char from2[64] = "";
  if (remembered && strstr(remembered, " from ")) sscanf(strstr(remembered, " from "), " from %63s", from2);
  cr_expect(from[0] && strcmp(from, from2) == 0, "measured _lr from %s rows, remembered from %s: %s", from, from2,
            logged);
  bml_log_set_sink(NULL, NULL);
  tuning_cleanup(dir);
  bml_devices_free(l);
}

/* Writes text as the tuning cache in dir. */
static void write_cache(const char *dir, const char *text) {
  char path[256];
  snprintf(path, sizeof path, "%s/cards.json", dir);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs(text, f);
  fclose(f);
}

/* A cache file with one tuning entry of layout `layout` for the card under
 * test (l's device i): its shapes are `fields`. */
static void cache_entry(char *buf, size_t len, int layout, const bml_devices *l, size_t i, const char *fields) {
  snprintf(buf, len,
           "{\"schema\": 1, \"entries\": [{\"kind\": \"tuning\", \"key\": {\"layout\": %d, \"device\": \"%s\", "
           "\"driver\": \"%s\", \"bankml_cl_version\": \"%s\"%s}, %s}]}",
           layout, bml_devices_get(l, i)->name, l->dev[i].cl.driver_version, bml_version_string(),
           bml__tune_is_quick() ? ", \"measure\": \"quick\"" : "", fields);
}

/* A cache of another layout, odd JSON, or tunables no measurement gives (a
 * hand edit) is measured again and replaced, and the card still verifies:
 * the caches numbered first to last of the list below (two tests, run side
 * by side, a tuning each cache). */
static void measured_again_and_replaced(size_t first, size_t last) {
  char dir[] = "/tmp/bankml-cl-tune-XXXXXX";
  size_t i;
  bml_devices *l = tuning_fixture(dir, &i);
  char edited[1024], lanes[1024], layout5[1024], layout4[1024], layout3[1024], layout2[1024];
  cache_entry(edited, sizeof edited, 6, l, i,
              "\"lrows\": 48, \"lrrows\": 32, \"lrrpt\": 4, \"lrlpt\": 1, \"lr_from_rows\": 0");
  /* every shape a candidate but the lanes (32x4 is one, with one lane) */
  cache_entry(lanes, sizeof lanes, 6, l, i,
              "\"lrows\": 32, \"lrrows\": 32, \"lrrpt\": 4, \"lrlpt\": 2, \"lr_from_rows\": 0");
  /* layout 5 was measured on launches of a work-group per group of rows */
  cache_entry(layout5, sizeof layout5, 5, l, i,
              "\"lrows\": 32, \"lrrows\": 32, \"lrrpt\": 4, \"lrlpt\": 1, \"lr_from_rows\": 16384");
  /* layout 4 was measured on the kernels before their cheaper table build */
  cache_entry(layout4, sizeof layout4, 4, l, i,
              "\"lrows\": 32, \"lrrows\": 32, \"lrrpt\": 4, \"lrlpt\": 1, \"lr_from_rows\": 16384");
  /* layout 3 had no lanes per work-item: an entry of it is measured again
   * even where it names them */
  cache_entry(layout3, sizeof layout3, 3, l, i,
              "\"lrows\": 32, \"lrrows\": 32, \"lrrpt\": 4, \"lrlpt\": 1, \"lr_from_rows\": 16384");
  /* layout 2's shapes were checked against the native build alone */
  cache_entry(layout2, sizeof layout2, 2, l, i, "\"lrows\": 32, \"lrrows\": 32, \"lrrpt\": 4, \"lr_from_rows\": 16384");
  const char *caches[] = {"{\"schema\": 2, \"entries\": []}", "{\"schema\": 1, \"entries\": {}}", "[1, 2]", edited,
                          lanes, layout5, layout4, layout3, layout2};
  cr_assert(first <= last && last < BML_ARRAY_SIZE(caches));
  bml__oracle_hooks h = {.quick = true, .tiny = true}; /* the tuning is this test's subject */
  bml__oracle_set_hooks(&h);
  bml_log_set_sink(capture, NULL);
  for (size_t k = first; k <= last; k++) {
    write_cache(dir, caches[k]);
    static collected c;
    logged[0] = '\0';
    c.n = 0;
    cr_expect_eq(verify(l, i, &c, 1), 0, "cache %zu: not verified", k);
    cr_expect(strstr(logged, "tuned \"") != NULL, "cache %zu was used: %s", k, logged);
    logged[0] = '\0';
    c.n = 0;
    cr_expect_eq(verify(l, i, &c, 1), 0);
    cr_expect(strstr(logged, "tuning \"") == NULL, "cache %zu was not replaced: measured again: %s", k, logged);
  }
  bml_log_set_sink(NULL, NULL);
  tuning_cleanup(dir);
  bml_devices_free(l);
}

Test(tune, a_cache_of_odd_json_or_hand_edited_tunables_is_measured_again_and_replaced) {
  measured_again_and_replaced(0, 4);
}

Test(tune, a_cache_this_version_did_not_write_is_measured_again_and_replaced) { measured_again_and_replaced(5, 8); }

/* A cache that cannot be written says why (it said only that it could
 * not): here its directory would be under a regular file. */
Test(tune, a_cache_that_cannot_be_written_says_why) {
  char dir[] = "/tmp/bankml-cl-tune-XXXXXX";
  size_t i;
  bml_devices *l = tuning_fixture(dir, &i);
  char file[300], under[320];
  snprintf(file, sizeof file, "%s/file", dir);
  FILE *f = fopen(file, "w");
  cr_assert_not_null(f);
  fclose(f);
  snprintf(under, sizeof under, "%s/sub", file);
  setenv("BANKML_CACHE_DIR", under, 1);
  bml__oracle_hooks h = {.quick = true, .tiny = true}; /* the tuning is this test's subject */
  bml__oracle_set_hooks(&h);
  logged[0] = '\0';
  bml_log_set_sink(capture, NULL);
  static collected c;
  cr_expect_eq(verify(l, i, &c, 1), 0);
  bml_log_set_sink(NULL, NULL);
  cr_expect(strstr(logged, "cannot write the cache ") && strstr(logged, "(Not a directory)"), "%s", logged);
  remove(file);
  tuning_cleanup(dir);
  bml_devices_free(l);
}
