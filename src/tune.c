/* tune.c -- q1_0_mat_vec_t's work-group size and table tile for each card: measured once, remembered per device and driver. */
#include "tune.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The candidates: rows per work-group and blocks per table tile. */
static const size_t twg_candidates[] = {64, 128, 256, 512};
static const size_t tile_candidates[] = {4, 8, 16};

/* The measured product: the size of a model's gate/up, a few kernels back
 * to back so the launch cost is what it is in a pipeline. */
#define TUNE_ROWS 12288
#define TUNE_N 4096
#define TUNE_BACK_TO_BACK 8
#define TUNE_RUNS 3

static bool tuning_off;

void bml__tune_disable(bool off) { tuning_off = off; }

/* $BANKML_CACHE_DIR, else $XDG_CACHE_HOME/bankml-cl, else ~/.cache/bankml-cl. */
static int cache_path(char *buf, size_t len) {
  const char *dir = NULL, *xdg = NULL, *home = NULL;
  bml__env_cache_dirs(&dir, &xdg, &home);
  int n = dir ? snprintf(buf, len, "%s/tuning.json", dir)
        : xdg ? snprintf(buf, len, "%s/bankml-cl/tuning.json", xdg)
        : home ? snprintf(buf, len, "%s/.cache/bankml-cl/tuning.json", home)
               : -1;
  return n > 0 && (size_t)n < len ? 0 : BML_EIO;
}

static bool entry_matches(json_t *e, const bml__cl_info *ci) {
  const char *dev = json_string_value(json_object_get(e, "device"));
  const char *drv = json_string_value(json_object_get(e, "driver"));
  const char *ver = json_string_value(json_object_get(e, "bankml_cl_version"));
  return dev && drv && ver && strcmp(dev, ci->name) == 0 && strcmp(drv, ci->driver_version) == 0 &&
         strcmp(ver, bml_version_string()) == 0;
}

/* The remembered choice for this device, driver and version, if any. */
static bool load(const char *path, const bml__cl_info *ci, size_t *twg, size_t *tile) {
  json_t *root = json_load_file(path, 0, NULL);
  json_t *entries = json_object_get(root, "entries");
  bool found = false;
  for (size_t i = 0; !found && i < json_array_size(entries); i++) {
    json_t *e = json_array_get(entries, i);
    json_int_t t = json_integer_value(json_object_get(e, "twg")), k = json_integer_value(json_object_get(e, "tile"));
    if (entry_matches(e, ci) && t > 0 && t <= 4096 && k > 0 && k <= 64) {
      *twg = (size_t)t, *tile = (size_t)k;
      found = true;
    }
  }
  json_decref(root);
  return found;
}

static void make_dirs(const char *path) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s", path);
  for (char *p = dir + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      if (mkdir(dir, 0755) != 0 && errno != EEXIST) return;
      *p = '/';
    }
}

/* Adds (or replaces) this device's entry; a failure to write only costs a
 * measurement next time, so it is a debug message. */
static void save(const char *path, const bml__cl_info *ci, size_t twg, size_t tile, double us) {
  json_t *root = json_load_file(path, 0, NULL);
  if (!json_is_object(root)) {
    json_decref(root);
    root = json_pack("{s:i, s:[]}", "schema", 1, "entries");
  }
  json_t *entries = json_object_get(root, "entries");
  for (size_t i = json_array_size(entries); i-- > 0;)
    if (entry_matches(json_array_get(entries, i), ci)) json_array_remove(entries, i);
  json_array_append_new(entries, json_pack("{s:s, s:s, s:s, s:I, s:I, s:f}", "device", ci->name, "driver",
                                           ci->driver_version, "bankml_cl_version", bml_version_string(), "twg",
                                           (json_int_t)twg, "tile", (json_int_t)tile, "us_per_product", us));
  make_dirs(path);
  char tmp[1100];
  snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
  if (json_dump_file(root, tmp, JSON_INDENT(2)) != 0 || rename(tmp, path) != 0) {
    bml__debug(BML_CAT_BUILD, "cannot write the tuning cache %s", path);
    remove(tmp);
  }
  json_decref(root);
}

/* Microseconds per product of the current tunables: TUNE_BACK_TO_BACK
 * launches, one wait, best of TUNE_RUNS.  Returns 0 or an error. */
static int time_build(bml__card *c, const bml__card_matrix *m, const bml_block_q8_0 *act, double *us) {
  bml__build b;
  char *log = NULL;
  bml__card_buf a = {0}, out = {0};
  int rc = bml__card_build(c, false, NULL, &b, &log);
  free(log);
  if (rc != 0) return rc;
  rc = bml__card_buf_reserve(c, &a, bml__card_act_bytes(m->n));
  if (rc == 0) rc = bml__card_buf_reserve(c, &out, m->rows * sizeof(float));
  if (rc == 0) bml__card_act_repack(act, m->n, a.host);
  if (rc == 0) rc = bml__card_buf_write(c, &a, bml__card_act_bytes(m->n));
  *us = 1e30;
  for (int run = 0; rc == 0 && run <= TUNE_RUNS; run++) { /* run 0 warms up */
    double t0 = bml__now();
    for (int i = 0; rc == 0 && i < TUNE_BACK_TO_BACK; i++)
      rc = bml__card_mat_vec_enqueue(c, &b, BML_KERNEL_MAT_VEC_T, 0, m, &a, 0, &out, 0);
    if (rc == 0) rc = clFinish(c->queue);
    double t = (bml__now() - t0) * 1e6 / TUNE_BACK_TO_BACK;
    if (run > 0 && t < *us) *us = t;
  }
  bml__card_buf_free(&a);
  bml__card_buf_free(&out);
  bml__build_release(&b);
  return rc;
}

/* Times every candidate the device can run; leaves the best one set. */
static int measure(bml__card *c, size_t *best_twg, size_t *best_tile, double *best_us) {
  bml_block_q1_0 *w = malloc((size_t)TUNE_ROWS * (TUNE_N / BML_Q1_0_BLOCK) * sizeof *w);
  bml_block_q8_0 *act = malloc(TUNE_N / BML_Q8_0_BLOCK * sizeof *act);
  uint64_t seed = 0x7475e;
  bml__card_matrix m = {0};
  int rc = w && act ? 0 : BML_ENOMEM;
  if (rc == 0) {
    bml__gen_q1_0(&seed, w, TUNE_ROWS, TUNE_N, true);
    rc = bml__gen_q8_0(&seed, act, TUNE_N, true);
  }
  bml__rows_part part = {w, TUNE_ROWS};
  if (rc == 0) rc = bml__card_matrix_upload(c, &part, 1, TUNE_N, &m);
  *best_us = 1e30;
  for (size_t i = 0; rc == 0 && i < BML_ARRAY_SIZE(twg_candidates); i++)
    for (size_t j = 0; rc == 0 && j < BML_ARRAY_SIZE(tile_candidates); j++) {
      bml__card_set_tunables(c, twg_candidates[i], tile_candidates[j]);
      if (c->twg != twg_candidates[i] || c->tile != tile_candidates[j]) continue; /* beyond this device */
      double us = 1e30;
      rc = time_build(c, &m, act, &us);
      bml__debug(BML_CAT_BUILD, "tuning \"%s\": twg %zu tile %zu: %.1f us", c->name, c->twg, c->tile, us);
      if (rc == 0 && us < *best_us) *best_us = us, *best_twg = c->twg, *best_tile = c->tile;
    }
  bml__card_matrix_free(&m);
  free(w), free(act);
  return rc;
}

int bml__tune(bml__card *c, const bml__cl_info *ci) {
  size_t twg = 256, tile = 8;
  char path[1024] = "";
  bool cached = cache_path(path, sizeof path) == 0 && load(path, ci, &twg, &tile);
  if (cached || tuning_off) {
    bml__card_set_tunables(c, twg, tile);
    return 0;
  }
  double us;
  int rc = measure(c, &twg, &tile, &us);
  if (rc != 0) {
    bml__card_set_tunables(c, 256, 8); /* the defaults: a failed measurement is not fatal */
    return rc;
  }
  bml__card_set_tunables(c, twg, tile);
  bml__debug(BML_CAT_BUILD, "tuned \"%s\": twg %zu, tile %zu (%.1f us per %dx%d product)", c->name, twg, tile, us,
             TUNE_ROWS, TUNE_N);
  if (path[0]) save(path, ci, twg, tile, us);
  return 0;
}
