/* open.c -- a worker opened: its settings read, its card found and verified, checked, calibrated; "GPU not used" said once. */
#include "share/worker_int.h"

#include "base/fork.h"
#include "base/log.h"
#include "base/util.h"
#include "devices/engine.h"
#include "card/card.h"
#include "card/program.h"
#include "share/settings.h"

#include <stdarg.h>
#include <stdio.h>

#define MIN_SHARE 0.02

/* ---- "GPU not used", logged once per reason per process ------------------------ */

static atomic_flag logged_no_card = ATOMIC_FLAG_INIT, logged_unverified = ATOMIC_FLAG_INIT,
                   logged_share = ATOMIC_FLAG_INIT, logged_calibration = ATOMIC_FLAG_INIT;

static void not_used(atomic_flag *once, const char *fmt, ...) BML_PRINTF(2, 3);
static void not_used(atomic_flag *once, const char *fmt, ...) {
  if (atomic_flag_test_and_set(once)) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  bml__warn(BML_CAT_WORKER, "GPU not used: %s", msg);
}

static size_t first_selected(const bml_devices *d) {
  for (size_t i = 0; i < d->len; i++)
    if (d->dev[i].pub.selected) return i;
  return d->len;
}

/* The device of the engine's context (or queue): the first of its devices
 * the listing has (options.device choosing, where set).  w->device is the
 * listing's length when it is not one bankml-cl may use (logged). */
static int engine_device(bml_worker *w, bml__worker_settings *s) {
  cl_device_id *devs;
  size_t ndevs;
  int rc = bml__engine_devices(&s->ctx, s->queue, &devs, &ndevs);
  if (rc != 0) return rc;
  const bml_devices *l = w->devices;
  size_t found = l->len;
  for (size_t i = 0; i < l->len && found == l->len; i++)
    for (size_t k = 0; k < ndevs; k++)
      if (l->dev[i].cl.id == devs[k] && (!s->device || l->dev[i].pub.selected)) found = i;
  free(devs);
  w->device = found < l->len && l->dev[found].pub.usable ? found : l->len;
  if (found == l->len)
    not_used(&logged_no_card, "%s (bankml-cl devices lists what bankml-cl finds)",
             s->device ? "bml_worker_options.device names none of the engine's context's devices"
                       : "none of the engine's context's devices is in bankml-cl's listing");
  else if (w->device == l->len)
    not_used(&logged_no_card, "the engine's device \"%s\" is not usable: %s", l->dev[found].cl.name,
             l->dev[found].why_not);
  return 0;
}

/* Opens and verifies the card the settings choose; 0 with w->card NULL
 * when none is used. */
static int open_card(bml_worker *w, bml__worker_settings *s, bml__verdict *v) {
  const bool engine = s->ctx || s->queue;
  bml_discover_options o;
  bml_discover_options_init(&o);
  o.gpu = s->device ? s->device : engine ? "" : NULL; /* BANKML_GPU chooses only where the engine does not */
  o.software = s->software;
  int rc = bml__devices_discover(&o, "bml_worker_options.device", &w->devices);
  if (rc != 0) return rc;
  if (engine) {
    if ((rc = engine_device(w, s)) != 0) return rc;
  } else {
    w->device = first_selected(w->devices);
    if (w->device == w->devices->len)
      not_used(&logged_no_card, "no usable GPU is selected (bankml-cl devices says why); everything runs on the CPU");
  }
  if (w->device == w->devices->len) return 0;
  const bml__device *d = &w->devices->dev[w->device];
  rc = bml__verdict_open(d, w->device, s->ctx, s->queue, s->verify_always, v, &w->card, &w->build);
  if (rc == 0 && !w->card) not_used(&logged_unverified, "\"%s\" NOT VERIFIED \u2014 %s", d->cl.name, v->why);
  w->verdict_remembered = v->remembered;
  return rc;
}

static int decide_share(bml_worker *w, bml__verdict *v) {
  if (w->share_fixed) return 0;
  double card_s, cpu_s;
  const int threads = bml_pool_threads(w->pool);
  w->calibration_remembered = bml__verdict_calibration(v, threads, &card_s, &cpu_s, &w->round_trip);
  if (!w->calibration_remembered) {
    int rc = bml__worker_calibrate(w, &card_s, &cpu_s);
    if (rc == BML_ENOMEM || rc == BML_EBUSY) return rc; /* the host's, or the caller's: said as the header says */
    if (rc != 0) { /* the card's: no worker, as for any other reason it is not used */
      not_used(&logged_calibration, "\"%s\": the calibration's product failed on the card: %s (%d)", w->card->name,
               bml_err_name(rc), rc);
      return 1;
    }
    bml__verdict_set_calibration(v, threads, card_s, cpu_s, w->round_trip);
  }
  w->share = bml__calibrated_share(card_s, cpu_s);
  w->cpu_rate = (double)CAL_ROWS * CAL_N / cpu_s;
  bml__debug(BML_CAT_WORKER, "calibration%s: card %.3f ms, CPU %.3f ms: share %.3f; the card's round trip %.3f ms",
             w->calibration_remembered ? " (remembered)" : "", card_s * 1e3, cpu_s * 1e3, w->share,
             w->round_trip * 1e3);
  if (w->share < MIN_SHARE) {
    not_used(&logged_share, "\"%s\": calibrated share %.3f is below %.2f (card %.3f ms, CPU %.3f ms for %dx%d)%s",
             w->card->name, w->share, MIN_SHARE, card_s * 1e3, cpu_s * 1e3, CAL_ROWS, CAL_N,
             w->calibration_remembered ? " (remembered; BANKML_VERIFY=always calibrates again)" : "");
    return 1;
  }
  return 0;
}

/* The verified card's queues, limiter, batch check and share.  0, 1 (no
 * worker: logged) or an error. */
static int set_up_card(bml_worker *w, const bml__worker_settings *s, bml__verdict *v) {
  /* a software card's threads run on the pool's CPUs: helpers waiting
   * awake through its part (the pool's cadence), the calibration's
   * first, would take them */
  if (bml__worker_software_card(w)) bml__pool_quiet(w->pool, true), w->quieted = true;
  /* A software device (PoCL) gains nothing from several queues (they run
   * on the same cores), and PoCL 3.1's pthread driver can fail an
   * assertion in its kernel cache when two queues finish kernels at once
   * (seen with two processes at work): one queue there. */
  const int queues = bml__worker_queues(s->queues, w->card->nvidia_driver, w->devices->dev[w->device].software);
  int made = bml__card_set_queues(w->card, (size_t)queues);
  if (made != 0)
    bml__debug(BML_CAT_WORKER, "\"%s\": %zu of %d queues (%s)", w->card->name, w->card->nside + 1, queues,
               bml_err_name(made));
  bml__limiter_init(&w->limiter, s->limit, w->card->global_mem, w->card->host_unified);
  bml__worker_choose_transfers(w, w->devices->dev[w->device].software != NULL);
  char why[400];
  bool bits;
  int rc = bml__worker_batches(w, v, why, sizeof why, &bits);
  if (rc == BML_EVERIFY) {
    not_used(&logged_unverified, "\"%s\" NOT VERIFIED \u2014 %s", w->card->name, why);
    if (bits) bml__verdict_refuse(v, why);
    rc = 1; /* no worker */
  }
  if (rc == 0) rc = decide_share(w, v);
  bml__worker_sync_allocated(w); /* the calibration's staging */
  return rc;
}

int bml_worker_open(bml_pool *pool, bml_worker **out) { return bml_worker_open_with(pool, NULL, out); }

int bml_worker_open_with(bml_pool *pool, const bml_worker_options *o, bml_worker **out) {
  if (!pool || !out) return BML_EINVAL;
  *out = NULL;
  bml__debug_load();
  const double t0 = bml__now();
  bml__worker_settings s;
  int rc = bml__worker_settings_read(o, &s);
  if (rc != 0) return rc;
  bml_worker *w = calloc(1, sizeof *w);
  if (!w) return BML_ENOMEM;
  w->pool = pool;
  atomic_flag_clear(&w->driving);
  w->hooks.kernel = BML_KERNEL_COUNT;
  if (s.share >= 0.0) w->share = s.share, w->share_fixed = true;
  bml__verdict v;
  memset(&v, 0, sizeof v);
  rc = open_card(w, &s, &v);
  if (rc == 0 && w->card) rc = set_up_card(w, &s, &v);
  bml__verdict_end(&v);
  if (rc != 0 || !w->card) {
    bml_worker_close(w);
    return rc > 0 ? 0 : rc; /* rc 1: a share too small, no worker */
  }
  w->open_seconds = bml__now() - t0;
  bml__debug(BML_CAT_WORKER, "GPU \"%s\": share %.3f%s%s, limit %.2f, %zu queues; opened in %.3f s (verdict %s)",
             w->card->name, w->share, w->share_fixed ? " fixed by " : "", w->share_fixed ? s.share_from : "",
             w->limiter.limit, w->card->nside + 1, w->open_seconds, w->verdict_remembered ? "remembered" : "found");
  bml__fork_watch_add(&w->watch, bml__worker_in_child, w);
  *out = w;
  return 0;
}

