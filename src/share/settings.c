/* settings.c -- a worker's settings: the caller's options, else the environment, else the defaults. */
#include "share/settings.h"

#include "base/env.h"
#include "base/log.h"
#include "base/options.h"
#include "share/limiter.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void bml_worker_options_init(bml_worker_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->size = sizeof *o;
  o->software = -1;
  o->share = -1.0;
  o->limit = -1.0;
  o->verify = BML_VERIFY_DEFAULT;
}

/* The last member of the first version: its size stays this. */
#define WORKER_OPTIONS_V1 (offsetof(bml_worker_options, cl_queue) + sizeof(void *))

static int out_of_range(const char *name, double v, const char *range, int rc) {
  bml__error(BML_CAT_ENV, "bml_worker_options.%s=%g: out of range (%s)", name, v, range);
  return rc;
}

/* The explicit options' ranges; each bad one is named. */
static int check_options(const bml_worker_options *o) {
  if (!(o->share < 0.0) && !(o->share <= 1.0)) return out_of_range("share", o->share, "0 to 1; below 0: unset", BML_ERANGE);
  if (!(o->limit < 0.0) && !(o->limit >= BML_LIMIT_MIN && o->limit <= 1.0))
    return out_of_range("limit", o->limit, "0.05 to 1; below 0: unset", BML_ERANGE);
  if (o->queues < 0 || o->queues > BML_MAX_QUEUES) return out_of_range("queues", o->queues, "1 to 8; 0: unset", BML_ERANGE);
  if (o->software < -1 || o->software > 1) return out_of_range("software", o->software, "-1: unset, 0 or 1", BML_EINVAL);
  if ((int)o->verify < BML_VERIFY_DEFAULT || o->verify > BML_VERIFY_ALWAYS)
    return out_of_range("verify", (int)o->verify, "BML_VERIFY_DEFAULT, _CACHED or _ALWAYS", BML_EINVAL);
  return 0;
}

/* Each setting: the option where the caller set it (its variable is not
 * read then: it overrides nothing the caller chose), else its variable,
 * else the default. */
int bml__worker_settings_read(const bml_worker_options *given, bml__worker_settings *s) {
  bml_worker_options o;
  bml_worker_options_init(&o);
  int rc = given ? bml__options_take(given, &o, sizeof o, WORKER_OPTIONS_V1, "bml_worker_options") : 0;
  if (rc == 0) rc = check_options(&o);
  if (rc != 0) return rc;
  *s = (bml__worker_settings){.device = o.device, .software = o.software, .share = o.share,
                              .share_from = "bml_worker_options.share", .limit = o.limit, .queues = o.queues,
                              .verify_always = o.verify == BML_VERIFY_ALWAYS, .ctx = o.cl_context,
                              .queue = o.cl_queue};
  if (o.share < 0.0) s->share_from = "BANKML_GPU_SHARE", rc = bml__env_gpu_share(&s->share);
  if (rc == 0 && o.limit < 0.0) s->limit = BML_LIMIT_DEFAULT, rc = bml__env_gpu_limit(&s->limit);
  if (rc == 0 && o.queues == 0) rc = bml__env_gpu_queues(&s->queues);
  if (rc == 0 && o.verify == BML_VERIFY_DEFAULT) rc = bml__env_verify(&s->verify_always);
  return rc;
}

int bml_worker_check_env(void) {
  bml__worker_settings s;
  return bml__worker_settings_read(NULL, &s);
}
