/* verdict.c -- a card's verdict at a worker's open: found by the oracle, or remembered and confirmed on the card. */
#include "card/verdict.h"

#include "base/hooks.h"
#include "base/log.h"
#include "card/cache.h"
#include "card/card.h"
#include "card/oracle.h"
#include "card/program.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The layout of a verdict's entry, part of its key. */
#define VERDICT_LAYOUT 1

/* The key: the card's identity, the native build's options and sources as
 * they are asked for (after the tuning; the tests' hooks' additions
 * included) and the oracle's extent (full, quick, or the tests' tiny).  NULL where hooks other than those
 * change what the open does. */
static json_t *verdict_key(const bml__card *c, const bml__device *d) {
  if (!bml__oracle_hooks_cacheable()) return NULL;
  char options[sizeof ((bml__build *)0)->options];
  const bml__oracle_hooks *test = bml__oracle_get_hooks();
  bml__card_build_options(c, false, test, options, sizeof options);
  char sources[17];
  snprintf(sources, sizeof sources, "%016llx", (unsigned long long)bml__card_sources_hash(c, test));
  json_t *key = bml__card_identity(&d->cl);
  if (key && json_object_set_new(key, "layout", json_integer(VERDICT_LAYOUT)) == 0 &&
      json_object_set_new(key, "options", json_string(options)) == 0 &&
      json_object_set_new(key, "sources", json_string(sources)) == 0 &&
      json_object_set_new(key, "checks", json_string(bml__oracle_get_hooks()->tiny ? "tiny"
                                                     : bml__oracle_quick(NULL) ? "quick" : "full")) == 0)
    return key;
  json_decref(key);
  return NULL;
}

static const char *string_of(const json_t *o, const char *name) {
  const char *s = json_string_value(json_object_get(o, name));
  return s ? s : "";
}

/* ---- a remembered verdict ------------------------------------------------------------- */

/* A seed of the spot check's data: another product at every open. */
static uint64_t spot_seed(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t parts[3] = {(uint64_t)ts.tv_sec, (uint64_t)ts.tv_nsec, (uint64_t)getpid()};
  return bml__hash64(parts, sizeof parts, BML_HASH_SEED);
}

/* Builds the remembered variant and confirms it on the card.  Returns 0
 * (confirmed: *use built), BML_EVERIFY (v->why says why not), BML_ENOMEM. */
static int confirm(bml__verdict *v, const json_t *e, bml__card *c, bml__build *use) {
  const char *fma = string_of(e, "fma"), *options = string_of(e, "build_options");
  const json_t *nb = json_object_get(e, "nvidia_build"), *nt = json_object_get(e, "nvidia_tma");
  if ((strcmp(fma, "native") != 0 && strcmp(fma, "emulated") != 0) || !options[0] || !json_is_boolean(nb) ||
      !json_is_boolean(nt)) {
    snprintf(v->why, sizeof v->why, "the remembered verdict is not one this version writes");
    return BML_EVERIFY;
  }
  /* NVIDIA's options the verified build kept (a driver that refused them
   * once refuses them again: the build without them is the one verified) */
  const bool was_build = c->nvidia_build, was_tma = c->nvidia_tma;
  c->nvidia_build = was_build && json_is_true(nb);
  c->nvidia_tma = was_tma && json_is_true(nt);
  const uint64_t seed = spot_seed();
  int rc = bml__oracle_confirm(c, strcmp(fma, "emulated") == 0, seed, use, v->why, sizeof v->why);
  if (rc == 0 && strcmp(use->options, options) != 0) {
    snprintf(v->why, sizeof v->why, "the build's options are not the verified ones (%s)", options);
    bml__build_release(use);
    rc = BML_EVERIFY;
  }
  if (rc != 0) c->nvidia_build = was_build, c->nvidia_tma = was_tma;
  bml__debug(BML_CAT_ORACLE, "\"%s\": the remembered verdict (fma %s) %s by the spot check (seed %016llx)%s%s",
             c->name, fma, rc == 0 ? "confirmed" : "not confirmed", (unsigned long long)seed, rc ? ": " : "",
             rc ? v->why : "");
  return rc;
}

/* A remembered verdict: 0 (a verified one, confirmed: *use built), 1 (a
 * refusal: v->why), -1 (none that stands: the oracle runs), BML_ENOMEM. */
static int remembered(bml__verdict *v, const json_t *e, bml__card *c, bml__build *use) {
  const char *verdict = string_of(e, "verdict");
  if (strcmp(verdict, "refused") == 0 && string_of(e, "why")[0]) {
    snprintf(v->why, sizeof v->why, "%s (remembered; BANKML_VERIFY=always verifies it again)", string_of(e, "why"));
    bml__debug(BML_CAT_ORACLE, "\"%s\": a remembered refusal: %s", c->name, v->why);
    return 1;
  }
  if (strcmp(verdict, "verified") != 0) return -1;
  int rc = confirm(v, e, c, use);
  if (rc == 0 || rc == BML_ENOMEM) return rc;
  bml__warn(BML_CAT_ORACLE, "\"%s\": its remembered verdict is not confirmed on the card (%s): verifying it again",
            c->name, v->why);
  v->why[0] = '\0';
  return -1;
}

/* ---- the oracle's verdict --------------------------------------------------------------- */

/* The first failing check of the verification, for the log. */
typedef struct {
  char first[400];
  bool bits; /* it is a row or a case that differed (not an error) */
} verify_note;

static void note_failure(void *ctx, const bml_verify_line *l) {
  verify_note *n = ctx;
  if (l->ok || n->first[0] || (strcmp(l->check, "fma probe") == 0 && strcmp(l->fma, "native") == 0)) return;
  n->bits = l->first_bad >= 0;
  if (l->first_bad >= 0)
    snprintf(n->first, sizeof n->first, "%s (fma: %s) %zux%zu %s: row %ld differs (cpu 0x%08x, card 0x%08x)",
             l->check, l->fma, l->rows, l->n, l->regime, l->first_bad, l->cpu_bits, l->card_bits);
  else
    snprintf(n->first, sizeof n->first, "%s: %.300s", l->check, l->detail ? l->detail : "failed");
}

/* The oracle on the open card.  0 (verified: *use built), BML_EVERIFY
 * (v->why), BML_ENOMEM. */
static int verify(bml__verdict *v, const bml__device *d, size_t index, bml__card *c, bml__build *use) {
  verify_note note = {"", false};
  bml_verify_options o;
  bml_verify_options_init(&o);
  o.on_line = note_failure;
  o.ctx = &note;
  const int rc = bml__oracle_verify_card(c, d, index, &o, use);
  if (rc == BML_ENOMEM) return rc;
  json_decref(v->entry);
  v->entry = NULL;
  if (rc == 0) {
    v->entry = json_pack("{s:s, s:s, s:s, s:b, s:b}", "verdict", "verified", "fma",
                         use->emulated_fma ? "emulated" : "native", "build_options", use->options, "nvidia_build",
                         c->nvidia_build, "nvidia_tma", c->nvidia_tma);
    v->changed = true;
    return 0;
  }
  snprintf(v->why, sizeof v->why, "%s", note.first[0] ? note.first : bml_strerror(rc));
  if (note.bits) bml__verdict_refuse(v, v->why);
  return BML_EVERIFY;
}

int bml__verdict_open(const bml__device *d, size_t index, cl_context ctx, cl_command_queue queue, bool always,
                      bml__verdict *v, bml__card **card, bml__build *use) {
  memset(v, 0, sizeof *v);
  v->always = always;
  *card = NULL;
  char err[256] = "";
  int rc = bml__oracle_card_open(d, ctx, queue, card, err, sizeof err);
  if (rc != 0) {
    snprintf(v->why, sizeof v->why, "open: %s", err);
    return rc == BML_ENOMEM ? rc : 0;
  }
  v->key = verdict_key(*card, d);
  json_t *e = v->key && !always ? bml__cache_find("verdict", v->key) : NULL;
  rc = e ? remembered(v, e, *card, use) : -1;
  if (rc == 0 || rc == 1) {
    v->entry = e;
    v->remembered = true;
  } else {
    json_decref(e);
  }
  if (rc == -1) rc = verify(v, d, index, *card, use);
  if (rc != 0) {
    bml__card_close(*card);
    *card = NULL;
  }
  return rc == BML_ENOMEM ? rc : 0;
}

/* ---- what the worker adds ----------------------------------------------------------------- */

bool bml__verdict_batches(const bml__verdict *v, size_t queues, bml__batch_verdict *out) {
  const json_t *b = v->remembered ? json_object_get(v->entry, "batches") : NULL;
  const json_int_t q = json_integer_value(json_object_get(b, "queues")), k = json_integer_value(json_object_get(b, "kept"));
  const json_t *ac = json_object_get(b, "acts_zero_copy"), *oc = json_object_get(b, "outs_zero_copy"),
               *tk = json_object_get(b, "tokens");
  if (!b || q != (json_int_t)queues || k < 1 || k > q || !json_is_boolean(ac) || !json_is_boolean(oc) ||
      !json_is_boolean(tk))
    return false;
  *out = (bml__batch_verdict){(size_t)k, json_is_true(ac), json_is_true(oc), json_is_true(tk)};
  return true;
}

void bml__verdict_set_batches(bml__verdict *v, size_t queues, const bml__batch_verdict *b) {
  if (v->entry && json_object_set_new(v->entry, "batches",
                                      json_pack("{s:I, s:I, s:b, s:b, s:b}", "queues", (json_int_t)queues, "kept",
                                                (json_int_t)b->kept, "acts_zero_copy", b->acts_zero_copy,
                                                "outs_zero_copy", b->outs_zero_copy, "tokens", b->tokens)) == 0)
    v->changed = true;
}

void bml__verdict_refuse(bml__verdict *v, const char *why) {
  json_t *e = json_pack("{s:s, s:s}", "verdict", "refused", "why", why);
  json_decref(v->entry);
  v->entry = e;
  v->changed = e != NULL;
}

/* A remembered number of seconds: finite and positive, else 0. */
static double seconds(const json_t *o, const char *name) {
  const double s = json_number_value(json_object_get(o, name));
  return isfinite(s) && s > 0 ? s : 0;
}

bool bml__verdict_calibration(const bml__verdict *v, int threads, double *card_s, double *cpu_s, double *trip_s) {
  const json_t *c = v->always ? NULL : json_object_get(v->entry, "calibration");
  if (!c || json_integer_value(json_object_get(c, "threads")) != threads ||
      strcmp(string_of(c, "cpu_path"), bml_cpu_path()) != 0)
    return false;
  *card_s = seconds(c, "card_seconds"), *cpu_s = seconds(c, "cpu_seconds"), *trip_s = seconds(c, "round_trip_seconds");
  return *card_s > 0 && *cpu_s > 0 && *trip_s > 0;
}

void bml__verdict_set_calibration(bml__verdict *v, int threads, double card_s, double cpu_s, double trip_s) {
  if (v->entry && json_object_set_new(v->entry, "calibration",
                                      json_pack("{s:i, s:s, s:f, s:f, s:f}", "threads", threads, "cpu_path",
                                                bml_cpu_path(), "card_seconds", card_s, "cpu_seconds", cpu_s,
                                                "round_trip_seconds", trip_s)) == 0)
    v->changed = true;
}

void bml__verdict_end(bml__verdict *v) {
  if (!v) return;
  if (v->changed && v->key && v->entry) bml__cache_store("verdict", v->key, json_incref(v->entry));
  json_decref(v->key);
  json_decref(v->entry);
  memset(v, 0, sizeof *v);
}
