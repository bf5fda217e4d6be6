/* bench_render.c -- the one place `bankml-cl bench` writes results: a table or one JSON object. */
#define _POSIX_C_SOURCE 200809L

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bankml-cl.h"
#include "bench.h"
#include "cli.h"
#include "progress.h"

/* t as UTC: ISO 8601 for machines, or with a space and "UTC" for people. */
static void format_time(time_t t, bool iso, char *buf, size_t size) {
  struct tm tm;
  size_t len = 0;
  if (gmtime_r(&t, &tm))
    len = iso ? strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &tm)
              : strftime(buf, size, "%Y-%m-%d %H:%M:%S UTC", &tm);
  if (len == 0) snprintf(buf, size, "unknown");
}

static void format_shape(const struct bench_row *row, char *buf, size_t size) {
  if (row->label)
    snprintf(buf, size, "%s", row->label);
  else
    snprintf(buf, size, "%zux%zu", row->rows, row->n);
}

/* GB/s of the bytes the card reads (its repacked weights), and that as a
 * share of the card's read bandwidth the bench measured. */
static double card_gbps(const struct bench_row *r) {
  return r->card_bytes && r->median_ms > 0 ? (double)r->card_bytes / (r->median_ms * 1e6) : 0;
}

static double products_per_s(const struct bench_row *r) {
  return r->median_ms > 0 ? (double)(r->products ? r->products : 1) / (r->median_ms * 1e-3) : 0;
}

/* A write that failed: the command's end (finish_output) says so, once,
 * with the system's reason. */
static int write_error(void) { return BML_EIO; }

/* ---- text ---------------------------------------------------------------- */

static void text_header(const struct bench_report *rep, FILE *f) {
  char date[32];
  format_time(rep->started, false, date, sizeof date);
  bool flushed = false; /* only the CPU's "flushed" rows flush caches */
  for (size_t i = 0; i < rep->nrows; i++) flushed |= strcmp(rep->rows[i].cache, "flushed") == 0;
  fprintf(f,
          "bankml-cl %s bench --%s, %s: CPU path %s, %d CPUs online, median and min of %ld runs "
          "after %ld warm-up%s%s\n",
          bml_version_string(), rep->modes, date, rep->cpu_path, rep->threads_available, rep->runs,
          rep->warmup, flushed ? ", caches flushed by " : "", flushed ? rep->flush : "");
  if (rep->pool_wait_ms >= 0)
    fprintf(f, "pool helpers awake %ld ms after a product (BANKML_POOL_WAIT_MS; default 1, or the gaps' cadence)\n", rep->pool_wait_ms);
  if (rep->device[0]) fprintf(f, "device: %s\n", CLI_PRINTABLE(rep->device));
  if (rep->open_verdict[0])
    fprintf(f, "worker opened in %.3f s (verdict %s)\n", rep->open_seconds, rep->open_verdict);
  if (rep->card_read_gbps > 0)
    fprintf(f, "card read bandwidth, measured by a streaming kernel: %.1f GB/s\n", rep->card_read_gbps);
}

/* The exact column: bit-exact or not, or, for a baseline, its bound's verdict. */
static const char *check_text(const struct bench_row *r) {
  if (r->check == BENCH_CHECK_EXACT) return r->exact ? "yes" : "NO";
  return r->agrees ? "n/a (agrees)" : "n/a (DISAGREES)";
}

static const struct bench_row *find_row(const struct bench_report *rep, const char *mode, size_t rows, size_t n) {
  for (size_t i = 0; i < rep->nrows; i++)
    if (strcmp(rep->rows[i].mode, mode) == 0 && rep->rows[i].rows == rows && rep->rows[i].n == n && !rep->rows[i].label)
      return &rep->rows[i];
  return NULL;
}

/* bankml-cl's card against the baseline on the same card, shape by shape:
 * one product and its wait (each CLBlast run is one GEMV and its clFinish;
 * the card row also copies the activation in and the results out), and
 * bankml-cl's products back to back. */
static void text_ratios(const struct bench_report *rep, FILE *f) {
  for (size_t i = 0; i < rep->nrows; i++) {
    const struct bench_row *b = &rep->rows[i];
    if (b->check != BENCH_CHECK_TOLERANCE) continue;
    const struct bench_row *c = find_row(rep, "card", b->rows, b->n), *p = find_row(rep, "card-pipelined", b->rows, b->n);
    if (!c || c->median_ms <= 0) continue;
    fprintf(f, "%zux%zu: bankml-cl card %.1f us (pipelined %.1f us) vs %s %.1f us: %s is %.1fx the time (pipelined %.1fx)\n", b->rows,
            b->n, c->median_ms * 1e3, p ? p->median_ms * 1e3 : 0, b->mode, b->median_ms * 1e3, b->mode, b->median_ms / c->median_ms,
            p && p->median_ms > 0 ? b->median_ms / p->median_ms : 0);
  }
}

/* A model's tokens through the worker: what a round-trip group costs and
 * where its time goes, and what the pipelined token is. */
static void text_groups(const struct bench_report *rep, FILE *f) {
  for (size_t i = 0; i < rep->nrows; i++) {
    const struct bench_row *r = &rep->rows[i];
    if (r->pipelined)
      fprintf(f, "%s %s: the token as one batch, the bound with no dependencies between its groups (a decode "
                 "waits for each group)\n", r->mode, r->label ? r->label : "");
    if (!r->groups) continue;
    fprintf(f, "%s %s: %zu groups, each run when the one before returned (a token, %s)", r->mode,
            r->label ? r->label : "", r->groups, r->token ? r->token : "-");
    if (!isnan(r->group_cost_us)) fprintf(f, "; a group costs %.1f us beside its kernels ((this - pipelined) / groups)",
                                       r->group_cost_us);
    fprintf(f, "\n  a group's mean us:");
    for (int k = 0; k < BENCH_PHASES; k++)
      fprintf(f, " %s %.1f%s", bench_phase_names[k], r->group_us[k], k + 1 < BENCH_PHASES ? "," : "\n");
  }
}

/* The row of r's shape and gap in `mode` with `threads` threads (-1: any), or NULL. */
static const struct bench_row *gap_row(const struct bench_report *rep, const struct bench_row *r, const char *mode,
                                       int threads) {
  for (size_t i = 0; i < rep->nrows; i++) {
    const struct bench_row *o = &rep->rows[i];
    if (o->gapped && (threads < 0 || o->threads == threads) && o->gap_ms == r->gap_ms && o->rows == r->rows &&
        o->n == r->n && strcmp(o->mode, mode) == 0)
      return o;
  }
  return NULL;
}

/* --gap: each pool against one thread after the same gap, as ratios of the
 * one-thread median measured in the same run. */
static void text_gap_ratios(const struct bench_report *rep, FILE *f) {
  for (size_t i = 0; i < rep->nrows; i++) {
    const struct bench_row *r = &rep->rows[i], *one = r->gapped && r->threads > 1 ? gap_row(rep, r, r->mode, 1) : NULL;
    if (!one || one->median_ms <= 0) continue;
    fprintf(f, "%zux%zu after %ld ms gaps, %d threads against 1: median %.2fx, p90 %.2fx, max %.2fx the 1-thread median\n",
            r->rows, r->n, r->gap_ms, r->threads, r->median_ms / one->median_ms, r->p90_ms / one->median_ms,
            r->max_ms / one->median_ms);
  }
}

/* --gap with --card and --split: each split against the card alone after
 * the same gap, as ratios of the card's median measured in the same run. */
static void text_gap_split_ratios(const struct bench_report *rep, FILE *f) {
  for (size_t i = 0; i < rep->nrows; i++) {
    const struct bench_row *r = &rep->rows[i];
    const struct bench_row *card = r->gapped && strcmp(r->mode, "split") == 0 ? gap_row(rep, r, "card", -1) : NULL;
    if (!card || card->median_ms <= 0) continue;
    fprintf(f, "%zux%zu after %ld ms gaps, split against the card alone: median %.2fx, p90 %.2fx, max %.2fx the card's median\n",
            r->rows, r->n, r->gap_ms, r->median_ms / card->median_ms, r->p90_ms / card->median_ms,
            r->max_ms / card->median_ms);
  }
}

/* Under the table when a baseline ran: what its columns mean. */
static void text_footnote(const struct bench_report *rep, FILE *f) {
  text_groups(rep, f);
  text_gap_ratios(rep, f);
  text_gap_split_ratios(rep, f);
  text_ratios(rep, f);
  for (size_t i = 0; i < rep->nrows; i++) {
    if (rep->rows[i].check != BENCH_CHECK_TOLERANCE) continue;
    fprintf(f, "clblast rows: GB/s of the F32/F16 matrix read; not bit-exact, checked against a "
               "CPU reference within a bound (bankml-cl(1))\n");
    return;
  }
}

static int mode_width(const struct bench_report *rep) {
  int w = (int)strlen("mode");
  for (size_t i = 0; i < rep->nrows; i++)
    if ((int)strlen(rep->rows[i].mode) > w) w = (int)strlen(rep->rows[i].mode);
  return w;
}

int bench_render_text(const struct bench_report *rep, FILE *f) {
  /* A mode column only once there is more than one mode to tell apart, or a
   * mode whose rows are named otherwise (--clblast: clblast-f32, clblast-f16). */
  bool with_mode = strchr(rep->modes, ',') != NULL;
  for (size_t i = 0; i < rep->nrows; i++) with_mode |= strcmp(rep->rows[i].mode, rep->modes) != 0;
  int shape_w = (int)strlen("shape");
  char shape[48];
  for (size_t i = 0; i < rep->nrows; i++) {
    format_shape(&rep->rows[i], shape, sizeof shape);
    if ((int)strlen(shape) > shape_w) shape_w = (int)strlen(shape);
  }
  int mode_w = mode_width(rep);
  bool with_card = false, with_products = false, with_gap = false;
  for (size_t i = 0; i < rep->nrows; i++) {
    with_card |= rep->rows[i].card_bytes != 0;
    with_products |= rep->rows[i].products != 0;
    with_gap |= rep->rows[i].gapped;
  }
  text_header(rep, f);
  if (with_mode) fprintf(f, "%-*s ", mode_w, "mode");
  fprintf(f, "%-*s %7s  %-7s", shape_w, "shape", "threads", "cache");
  if (with_gap) fprintf(f, " %6s", "gap ms");
  fprintf(f, " %11s %11s", "median ms", "min ms");
  if (with_gap) fprintf(f, " %11s %11s", "p90 ms", "max ms");
  fprintf(f, " %9s", "GB/s");
  if (with_card) fprintf(f, " %9s %7s", "card GB/s", "% read");
  if (with_products) fprintf(f, " %11s", "products/s");
  fprintf(f, "  %s\n", "exact");
  for (size_t i = 0; i < rep->nrows; i++) {
    const struct bench_row *r = &rep->rows[i];
    format_shape(r, shape, sizeof shape);
    char threads[16] = "-"; /* 0: a device's library, no CPU threads */
    if (r->threads > 0) snprintf(threads, sizeof threads, "%d", r->threads);
    if (with_mode) fprintf(f, "%-*s ", mode_w, r->mode);
    fprintf(f, "%-*s %7s  %-7s", shape_w, shape, threads, r->cache);
    if (with_gap && r->gapped) fprintf(f, " %6ld", r->gap_ms);
    else if (with_gap) fprintf(f, " %6s", "-");
    fprintf(f, " %11.4f %11.4f", r->median_ms, r->min_ms);
    if (with_gap) fprintf(f, " %11.4f %11.4f", r->p90_ms, r->max_ms);
    fprintf(f, " %9.2f", r->gbps);
    if (with_card && r->card_bytes && rep->card_read_gbps > 0)
      fprintf(f, " %9.1f %6.1f%%", card_gbps(r), 100 * card_gbps(r) / rep->card_read_gbps);
    else if (with_card && r->card_bytes) /* the bandwidth kernel could not run: no percentage */
      fprintf(f, " %9.1f %7s", card_gbps(r), "-");
    else if (with_card)
      fprintf(f, " %9s %7s", "-", "-");
    if (with_products) fprintf(f, " %11.0f", products_per_s(r));
    fprintf(f, "  %s\n", check_text(r));
  }
  text_footnote(rep, f);
  return ferror(f) ? write_error() : 0;
}

/* ---- JSON ---------------------------------------------------------------- */

/* A baseline's verdict: "agrees" and how much of its bound the worst error used. */
static json_t *json_add_tolerance(json_t *row, const struct bench_row *r) {
  if (!row || r->check != BENCH_CHECK_TOLERANCE) return row;
  /* An error beyond any bound (NaN, infinity) has no JSON number: null. */
  json_t *ratio = isfinite(r->error_to_bound) ? json_real(r->error_to_bound) : json_null();
  if (json_object_set_new(row, "agrees", json_boolean(r->agrees)) != 0 ||
      json_object_set_new(row, "error_to_bound", ratio) != 0 ||
      json_object_set_new(row, "probe_exact", json_boolean(r->probe_exact)) != 0) {
    json_decref(row);
    return NULL;
  }
  return row;
}

/* A round-trip token's groups, its cost a group beside the kernels (null
 * where the pipelined token was not measured) and where a group's time
 * went. */
static json_t *json_add_groups(json_t *row, const struct bench_row *r) {
  json_t *phases = json_object();
  for (int k = 0; phases && k < BENCH_PHASES; k++)
    if (json_object_set_new(phases, bench_phase_names[k], json_real(r->group_us[k])) != 0) json_decref(phases), phases = NULL;
  json_t *cost = !isnan(r->group_cost_us) ? json_real(r->group_cost_us) : json_null();
  if (!phases || json_object_set_new(row, "groups", json_integer((json_int_t)r->groups)) != 0 ||
      json_object_set_new(row, "token", r->token ? json_string(r->token) : json_null()) != 0 ||
      json_object_set_new(row, "group_cost_us", cost) != 0 || json_object_set_new(row, "group_us", phases) != 0) {
    if (!phases) json_decref(cost);
    json_decref(row);
    return NULL;
  }
  return row;
}

static json_t *json_row(const struct bench_row *r) {
  char shape[48];
  format_shape(r, shape, sizeof shape);
  uint64_t bytes_read = r->bytes_read ? r->bytes_read : r->weight_bytes;
  json_t *row = json_pack(
      "{s:s, s:s, s:I, s:I, s:i, s:s, s:f, s:f, s:f, s:I, s:I, s:s, s:b}", "mode", r->mode, "shape",
      shape, "rows", (json_int_t)r->rows, "n", (json_int_t)r->n, "threads", r->threads, "cache",
      r->cache, "median_ms", r->median_ms, "min_ms", r->min_ms, "gbps", r->gbps, "weight_bytes",
      (json_int_t)r->weight_bytes, "bytes_read", (json_int_t)bytes_read, "check",
      r->check == BENCH_CHECK_EXACT ? "exact" : "tolerance", "exact", r->exact);
  row = json_add_tolerance(row, r);
  if (row && r->label) json_object_set_new(row, "label", json_string(r->label));
  if (row && r->label && r->rows == 0 && r->n == 0) { /* a model's token: many shapes, no one rows x n */
    json_object_del(row, "rows");
    json_object_del(row, "n");
  }
  if (row && r->products) {
    json_object_set_new(row, "products_per_run", json_integer((json_int_t)r->products));
    json_object_set_new(row, "products_per_s", json_real(products_per_s(r)));
  }
  if (row && r->matrices) json_object_set_new(row, "matrices", json_integer((json_int_t)r->matrices));
  if (row && r->pipelined) json_object_set_new(row, "bound_without_dependencies", json_true());
  if (row && r->groups) row = json_add_groups(row, r);
  if (row && r->gapped) {
    json_object_set_new(row, "gap_ms", json_integer((json_int_t)r->gap_ms));
    json_object_set_new(row, "p90_ms", json_real(r->p90_ms));
    json_object_set_new(row, "max_ms", json_real(r->max_ms));
  }
  if (row && r->card_bytes) {
    json_object_set_new(row, "card_bytes", json_integer((json_int_t)r->card_bytes));
    json_object_set_new(row, "card_gbps", json_real(card_gbps(r)));
  }
  return row;
}

static json_t *json_report(const struct bench_report *rep) {
  json_t *results = json_array();
  for (size_t i = 0; results && i < rep->nrows; i++) {
    if (json_array_append_new(results, json_row(&rep->rows[i])) != 0) {
      json_decref(results);
      return NULL;
    }
  }
  if (!results) return NULL;
  char date[32];
  format_time(rep->started, true, date, sizeof date);
  /* "o" hands results and device over to the object, even when json_pack
   * fails; device is null when no device mode ran. */
  json_t *device = rep->device[0] ? json_string(rep->device) : json_null();
  json_t *read = rep->card_read_gbps > 0 ? json_real(rep->card_read_gbps) : json_null();
  json_t *memory = rep->card_memory > 0 ? json_integer((json_int_t)rep->card_memory) : json_null();
  json_t *open = rep->open_verdict[0] ? json_pack("{s:f, s:s}", "seconds", rep->open_seconds, "verdict", rep->open_verdict)
                                      : json_null();
  json_t *wait = rep->pool_wait_ms >= 0 ? json_integer(rep->pool_wait_ms) : json_null();
  return json_pack("{s:i, s:s, s:s, s:s, s:o, s:o, s:o, s:o, s:s, s:s, s:i, s:I, s:I, s:o, s:o}", "schema", 1,
                   "bankml_cl_version", bml_version_string(), "date", date, "mode", rep->modes,
                   "device", device, "card_read_gbps", read, "card_memory_bytes", memory, "worker_open", open, "cpu_path",
                   rep->cpu_path, "cache_flush", rep->flush, "threads_available", rep->threads_available, "runs",
                   (json_int_t)rep->runs, "warmup", (json_int_t)rep->warmup, "pool_wait_ms", wait, "results", results);
}

int bench_render_json(const struct bench_report *rep, FILE *f) {
  json_t *root = json_report(rep);
  char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(6)) : NULL;
  json_decref(root);
  if (!text) {
    fprintf(stderr, "bankml-cl bench: cannot build the JSON report: %s\n",
            bml_strerror(BML_ENOMEM));
    return BML_ENOMEM;
  }
  fprintf(f, "%s\n", text);
  free(text);
  return ferror(f) ? write_error() : 0;
}
