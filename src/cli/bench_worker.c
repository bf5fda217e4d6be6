/* bench_worker.c -- the worker every card mode of `bankml-cl bench` opens, and the card it names in the report. */
#define _POSIX_C_SOURCE 200809L

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bankml-cl.h"
#include "bench.h"
#include "progress.h"

int bench_worker_open(const struct bench_config *cfg, bool card_alone, bml_pool **pool, bml_worker **w,
                      struct bench_report *rep) {
  int threads = bench_threads_largest(cfg);
  int rc = bml_pool_open(threads, pool);
  if (rc != 0) {
    fprintf(stderr, "bankml-cl bench: cannot open a pool of %d threads: %s\n", threads, bml_strerror(rc));
    return rc;
  }
  progress_step("opening the worker: the card's checks and calibration");
  rc = bml_worker_open(*pool, w);
  if (rc == 0 && !*w) {
    fprintf(stderr, "bankml-cl bench --%s: no card is used here (the message above says why)\n",
            card_alone ? "card" : "split");
    rc = BML_ENODEV;
  } else if (rc != 0) {
    fprintf(stderr, "bankml-cl bench: cannot open the worker: %s\n", bml_strerror(rc));
  }
  if (rc == 0 && card_alone) rc = bml_worker_set_share(*w, 1.0);
  if (rc == 0 && card_alone) rc = bml_worker_set_limit(*w, 1.0); /* the card's own speed: never resting */
  if (rc == 0) bench_note_device(rep, *w, card_alone);
  if (rc != 0) {
    bml_worker_close(*w);
    bml_pool_close(*pool);
    *w = NULL, *pool = NULL;
  }
  return rc;
}

void bench_set_device(struct bench_report *rep, const char *name) {
  if (rep->device[0]) return; /* the first mode's: every mode names the same card */
  size_t len = strlen(name);
  if (len >= sizeof rep->device) { /* cut at a whole UTF-8 character: the JSON must stay valid */
    len = sizeof rep->device - 1;
    while (len > 0 && ((unsigned char)name[len] & 0xC0) == 0x80) len--; /* name[len] starts a character */
  }
  memcpy(rep->device, name, len);
  rep->device[len] = '\0';
}

void bench_note_device(struct bench_report *rep, bml_worker *w, bool card_alone) {
  char *status = NULL;
  if (!rep->device[0] && bml_worker_status_json(w, &status) == 0) {
    /* the status's "card", parsed (a name may hold an escaped quote) */
    json_t *j = json_loads(status, 0, NULL);
    const char *name = json_string_value(json_object_get(j, "card"));
    if (name) bench_set_device(rep, name);
    const json_int_t mem = json_integer_value(json_object_get(j, "card_memory_bytes"));
    if (mem > 0) rep->card_memory = (uint64_t)mem;
    /* how long the open took, and whether its verdict was the cache's */
    json_t *open = json_object_get(j, "open");
    const char *verdict = json_string_value(json_object_get(open, "verdict"));
    rep->open_seconds = json_number_value(json_object_get(open, "seconds"));
    snprintf(rep->open_verdict, sizeof rep->open_verdict, "%s", verdict ? verdict : "");
    json_decref(j);
    free(status);
  }
  /* only the card's own rows have a card GB/s to set against it */
  if (card_alone && rep->card_read_gbps == 0) rep->card_read_gbps = bench_card_read_gbps();
}
