/* status.c -- the worker's status as JSON: its settings, counters, timings, shapes and kinds of batch, its open. */
#include "devices/device.h"
#include "share/worker_int.h"

#include <jansson.h>

static size_t heap_bytes(const bml_worker *w) {
  size_t b = sizeof *w + w->cap * sizeof *w->entries + w->shapes_cap * sizeof *w->shapes +
             w->card_rows_cap * sizeof *w->card_rows + w->groups_cap * sizeof *w->groups +
             w->items_cap * sizeof *w->items + w->recs_cap * sizeof *w->recs + w->runs_cap * sizeof *w->runs +
             w->pieces_cap * sizeof *w->pieces + w->piece_src_cap * sizeof *w->piece_src +
             w->reads_cap * sizeof *w->reads + w->acts.size + w->outs.size;
  for (size_t i = 0; i < w->nentries; i++) {
    const entry *e = w->entries[i];
    b += sizeof *e + e->nmembers * (sizeof *e->members + sizeof *e->held);
    for (size_t k = 0; k < e->nmembers; k++) b += strlen(e->members[k].name) + 1;
  }
  return b;
}

/* Bytes of the matrices the card holds (its slabs may hold more). */
static uint64_t matrix_bytes(const bml_worker *w) {
  uint64_t b = 0;
  for (size_t i = 0; i < w->nentries; i++) b += w->entries[i]->m.bytes;
  return b;
}

static json_t *status_json(const bml_worker *w) {
  json_int_t on_card = 0, on_cpu = 0, tuning = 0;
  for (size_t i = 0; i < w->nshapes; i++) {
    on_card += w->shapes[i].state == BML_SHAPE_CARD;
    on_cpu += w->shapes[i].state == BML_SHAPE_CPU;
    tuning += w->shapes[i].state == BML_SHAPE_WARMUP || w->shapes[i].state == BML_SHAPE_TUNING;
  }
  if (w->share_fixed) on_card = (json_int_t)w->nshapes, tuning = 0, on_cpu = 0;
  return json_pack(
      "{s:s, s:I, s:f, s:f, s:b, s:I, s:I, s:I, s:I, s:b, s:b, s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:s, "
      "s:b, s:I, s:I, s:f, s:f, s:s, s:f, s:{s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}}",
      "card", w->card->name, "device", (json_int_t)w->device, "limit", w->limiter.limit, "share", w->share,
      "share_fixed", w->share_fixed, "allocated_bytes", (json_int_t)w->limiter.allocated,
      "matrix_bytes", (json_int_t)matrix_bytes(w), "card_memory_bytes", (json_int_t)w->card->global_mem,
      "heap_bytes", (json_int_t)heap_bytes(w), "integrated", w->limiter.integrated, "busy", w->cur.active,
      "retired", w->retired, "products_on_card", (json_int_t)w->count.on_card, "products_on_cpu_resting",
      (json_int_t)w->count.on_cpu_resting, "products_on_cpu_memory", (json_int_t)w->count.on_cpu_memory,
      "products_on_cpu_error", (json_int_t)w->count.on_cpu_error, "products_on_cpu_decided",
      (json_int_t)w->count.on_cpu_decided, "products_on_cpu_share", (json_int_t)w->count.on_cpu_share,
      "shapes_on_card", on_card, "shapes_on_cpu", on_cpu, "shapes_tuning",
      tuning, "matrices", (json_int_t)w->nentries, "launches", (json_int_t)w->time.launches, "fma", w->build.emulated_fma ? "emulated" : "native", "software",
      w->devices->dev[w->device].software != NULL, "queues",
      (json_int_t)(w->card->nside + 1), "rests_waited", (json_int_t)w->count.rests_waited,
      "cpu_weights_per_second", w->cpu_rate, "round_trip_seconds", w->round_trip, "transfers", bml__worker_buffers_name(w),
      "wait_spin_seconds", w->wait_spin, "seconds",
      "submissions", (json_int_t)w->time.submissions, "enqueue", w->time.enqueue, "plan", w->time.plan, "upload",
      w->time.upload, "launch", w->time.launch, "flush", w->time.flush, "cpu", w->time.cpu, "wait", w->time.wait, "copy_out", w->time.copy,
      "rest", w->time.rest);
}

/* Each shape's state and share, and each kind of batch's share (the ones
 * in use: the fixed share when there is one) and whether it runs on the CPU
 * alone, with the pool's wake-up its balance expects of the next CPU part. */
static json_t *balances_json(json_t *o, const bml_worker *w) {
  json_t *shapes = json_array(), *kinds = json_array();
  if (!o || !shapes || !kinds) {
    json_decref(o), json_decref(shapes), json_decref(kinds);
    return NULL;
  }
  /* set_new takes its value even when it fails */
  if (json_object_set_new(o, "shapes", shapes) != 0) return json_decref(o), json_decref(kinds), NULL;
  if (json_object_set_new(o, "batches", kinds) != 0) return json_decref(o), NULL;
  for (size_t i = 0; i < w->nshapes; i++) {
    const bml__shape *sh = &w->shapes[i];
    const char *state = w->share_fixed ? "card" : bml__shape_state_name(sh->state);
    if (json_array_append_new(shapes, json_pack("{s:I, s:I, s:s, s:f, s:f}", "rows", (json_int_t)sh->rows, "n",
                                                (json_int_t)sh->n, "state", state, "share",
                                                w->share_fixed ? w->share : sh->balance.share, "cpu_wake_seconds",
                                                sh->balance.wake)) != 0)
      return json_decref(o), NULL;
  }
  for (size_t i = 0; i < w->nkinds && i < KINDS_MAX; i++) {
    const batch_kind *k = &w->kinds[i];
    if (json_array_append_new(kinds, json_pack("{s:I, s:I, s:f, s:f, s:b, s:f}", "products", (json_int_t)k->count,
                                               "rows", (json_int_t)k->rows, "weights", k->weights, "share",
                                               w->share_fixed ? w->share : k->balance.share, "cpu_alone",
                                               !w->share_fixed && k->balance.cpu, "cpu_wake_seconds",
                                               k->balance.wake)) != 0)
      return json_decref(o), NULL;
  }
  return o;
}

/* How the open went: its seconds, and what it took from the cache. */
static json_t *open_json(json_t *o, const bml_worker *w) {
  json_t *open = json_pack("{s:f, s:s, s:s, s:s, s:b, s:b}", "seconds", w->open_seconds, "verdict",
                           w->verdict_remembered ? "remembered" : "verified", "batch_check",
                           w->batches_remembered ? "remembered" : "checked", "calibration",
                           w->share_fixed && !w->cpu_rate ? "none" : w->calibration_remembered ? "remembered" : "measured",
                           "engine_context", w->card->engine_context, "engine_queue", w->card->engine_queue);
  if (!o || !open || json_object_set_new(o, "open", open) != 0) {
    json_decref(o);
    return NULL;
  }
  return o;
}

int bml_worker_status_json(bml_worker *w, char **json) {
  if (!w || !json) return BML_EINVAL;
  *json = NULL;
  if (!enter(w)) return BML_EBUSY;
  json_t *o = open_json(balances_json(status_json(w), w), w);
  leave(w);
  if (!o) return BML_ENOMEM;
  *json = bml__json_text(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(o);
  return *json ? 0 : BML_ENOMEM;
}

