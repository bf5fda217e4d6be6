/* load.c -- drives one worker from many threads for a bounded time, every result compared bit for bit with the CPU's.
 *
 * Not a Criterion suite: CI builds it with ThreadSanitizer (which Criterion
 * cannot run under) and runs it under valgrind, and tests/test_clfaults.c
 * runs it through tests/clshim, an ICD loader that fails OpenCL calls at
 * random.  Each thread loops until the time is up over single products
 * (bml_worker_mat_vec), batches, begin / its own CPU rows / finish, status,
 * set_limit and release on one worker, on matrices shared by all threads.
 * With --opens K, K workers are first opened and closed (under the shim's
 * faults: each open that gives no worker must have said why and left no
 * OpenCL object alive).  Prints one line per phase and a summary; exits 0
 * when every result was exact and every call returned what its
 * documentation allows, 1 otherwise, 2 on misuse.  Uses the quick oracle
 * (its small shapes: the full one has its own tests) unless --full-oracle,
 * and the remembered or default kernel shapes unless --tune (measuring
 * them builds a program per candidate: minutes under valgrind). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <getopt.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/hooks.h"
#include "base/bml.h"
#include "golden.h"
#include "card/oracle.h"
#include "card/tune.h"
#include "base/env.h"
#include "cpu/gen.h"

/* ---- options ------------------------------------------------------------------ */

static struct {
  int threads;
  double seconds;
  int opens;
  bool faults, full_oracle, tune;
  const char *open_rates, *load_rates;
} opt = {16, 10.0, 0, false, false, false, NULL, NULL};

static void usage(FILE *f) {
  fprintf(f, "usage: load [--threads N] [--seconds S] [--opens K] [--faults [--open-rates SPEC] [--load-rates SPEC]]\n"
             "            [--full-oracle] [--tune]\n"
             "Drives one worker (on the first selected card; PoCL with BANKML_GPU_SOFTWARE=1) from N threads\n"
             "(16) for S seconds (10), every result compared with the CPU's.  --faults: run through\n"
             "tests/clshim (LD_LIBRARY_PATH), its rates SPEC (class=rate,...) for the opens and the load.\n"
             "--full-oracle: the oracle's every shape (else its small ones); --tune: measure the card's\n"
             "kernel shapes as an open does (else the remembered or default ones).\n");
}

static int parse_options(int argc, char **argv) {
  static const struct option longopts[] = {
      {"threads", required_argument, NULL, 't'},   {"seconds", required_argument, NULL, 's'},
      {"opens", required_argument, NULL, 'o'},     {"faults", no_argument, NULL, 'f'},
      {"open-rates", required_argument, NULL, 'O'}, {"load-rates", required_argument, NULL, 'L'},
      {"full-oracle", no_argument, NULL, 'F'},     {"tune", no_argument, NULL, 'T'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  int c;
  long v;
  double d;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (c) {
    case 't': if (bml__parse_long(optarg, 1, 256, &v) != 0) goto bad; opt.threads = (int)v; break;
    case 's': if (bml__parse_double(optarg, 0, 3600, &d) != 0) goto bad; opt.seconds = d; break;
    case 'o': if (bml__parse_long(optarg, 0, 10000, &v) != 0) goto bad; opt.opens = (int)v; break;
    case 'f': opt.faults = true; break;
    case 'O': opt.open_rates = optarg; break;
    case 'L': opt.load_rates = optarg; break;
    case 'F': opt.full_oracle = true; break;
    case 'T': opt.tune = true; break;
    case 'h': usage(stdout); exit(0);
    default: usage(stderr); return 2;
    }
  }
  if (optind == argc) return 0;
bad:
  fprintf(stderr, "load: bad argument '%s'\n", optind < argc ? argv[optind] : optarg);
  usage(stderr);
  return 2;
}

/* ---- the fault-injecting loader's controls (tests/clshim) --------------------------- */

static struct {
  int (*set_rates)(const char *spec);
  void (*stats)(char *buf, size_t len, long *live, long *injected);
} shim;

/* Finds the shim, which is the libOpenCL.so.1 found first when it runs us:
 * opened here by that name, it is the one the library has (linked) or will
 * have (dlopened by the same name), loaded once.  The handle is kept. */
static int find_shim(void) {
  void *h = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h) {
    shim.set_rates = (int (*)(const char *))dlsym(h, "clshim_set_rates");
    shim.stats = (void (*)(char *, size_t, long *, long *))dlsym(h, "clshim_stats");
  }
  if (shim.set_rates && shim.stats) return 0;
  fprintf(stderr, "load: --faults: the libOpenCL.so.1 loaded is not tests/clshim's (set LD_LIBRARY_PATH)\n");
  return 1;
}

static int set_rates(const char *spec) {
  if (!opt.faults || !spec) return 0;
  if (shim.set_rates(spec) == 0) return 0;
  fprintf(stderr, "load: the shim refused the rates \"%s\"\n", spec);
  return 1;
}

/* OpenCL objects alive, as the shim counts them (0 without the shim). */
static long live_objects(char *buf, size_t len) {
  long live = 0, injected = 0;
  buf[0] = '\0';
  if (opt.faults) shim.stats(buf, len, &live, &injected);
  return live;
}

static long injected_faults(void) {
  char buf[512];
  long live = 0, injected = 0;
  if (opt.faults) shim.stats(buf, sizeof buf, &live, &injected);
  return injected;
}

/* ---- the library's log, kept per open ------------------------------------------- */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char logged[16384];

static void capture(void *ctx, bml_log_level level, const char *cat, const char *msg) {
  (void)ctx, (void)cat;
  if (level == BML_LOG_DEBUG) return;
  pthread_mutex_lock(&log_lock);
  size_t used = strlen(logged);
  snprintf(logged + used, sizeof logged - used, "%s\n", msg);
  pthread_mutex_unlock(&log_lock);
}

/* ---- the matrices, shared by every thread --------------------------------------- */

typedef struct {
  char name[32];
  size_t rows, n;
  bml_block_q1_0 *w;
  const bml_block_q8_0 *a;
  float *want;
} matrix;

/* Rows odd and even, one block wide and many; two share an activation
 * (as Q and K do), so that batches group them. */
static const size_t shapes[][2] = {{256, 1024}, {251, 1024}, {1000, 2048}, {64, 128}, {4096, 512}, {33, 4096}};
#define NMAT (sizeof shapes / sizeof shapes[0])
static matrix mats[NMAT];
static bml_block_q8_0 *acts[NMAT];

static int make_matrices(void) {
  uint64_t seed = 0x10adf00dull;
  for (size_t i = 0; i < NMAT; i++) {
    matrix *m = &mats[i];
    snprintf(m->name, sizeof m->name, "load.%zu", i);
    m->rows = shapes[i][0], m->n = shapes[i][1];
    m->w = malloc(m->rows * (m->n / 128) * sizeof *m->w);
    m->want = malloc(m->rows * sizeof *m->want);
    if (i != 1 && !(acts[i] = malloc(m->n / 32 * sizeof *acts[i]))) return 1;
    if (!m->w || !m->want) return 1;
    bml__gen_q1_0(&seed, m->w, m->rows, m->n, i % 2);
    if (i != 1 && bml__gen_q8_0(&seed, acts[i], m->n, i % 2) != 0) return 1;
  }
  acts[1] = acts[0]; /* 0 and 1 (both n = 1024) share one activation, as Q and K do */
  for (size_t i = 0; i < NMAT; i++) {
    mats[i].a = acts[i];
    if (bml_q1_0_mat_vec(mats[i].w, mats[i].rows, mats[i].n, mats[i].a, mats[i].want) != 0) return 1;
  }
  return 0;
}

static void free_matrices(void) {
  for (size_t i = 0; i < NMAT; i++) {
    free(mats[i].w);
    free(mats[i].want);
    if (i != 1) free(acts[i]);
  }
}

/* ---- one thread's work ------------------------------------------------------------ */

enum { OP_MAT_VEC, OP_BATCH, OP_BEGIN_FINISH, OP_STATUS, OP_SET_LIMIT, OP_RELEASE, OP_COUNT };
static const char *const op_names[OP_COUNT] = {"mat_vec", "batch", "begin/finish", "status", "set_limit", "release"};
/* out of 100: products most often; a release makes the next products
 * upload their matrices again */
static const int op_weight[OP_COUNT] = {42, 26, 16, 8, 6, 2};

typedef struct {
  bml_worker *w;
  bml_pool *pool;
  uint64_t rng;
  double until;
  long done[OP_COUNT], busy[OP_COUNT];
  long wrong, bad_rc;
  char first_error[256];
  float *out[NMAT];
} thread_state;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t next(uint64_t *s) {
  *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
  return *s;
}

/* Keeps the first failure a thread met, for the report. */
static void failure(thread_state *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void failure(thread_state *t, const char *fmt, ...) {
  if (t->first_error[0]) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t->first_error, sizeof t->first_error, fmt, ap);
  va_end(ap);
}

/* Whether rc is what a call may return while other threads drive the worker. */
static bool busy_rc(int rc) { return rc == BML_EBUSY || rc == BML_ESTATE; }

/* After a busy worker: 0.2 ms off it, as an engine would wait, rather than
 * spinning (under valgrind, which runs one thread at a time, 16 spinning
 * threads left the one with work a sliver of the time). */
static void back_off(void) { nanosleep(&(struct timespec){0, 200000}, NULL); }

static void check_rows(thread_state *t, size_t m, const float *got, const char *op) {
  long r = bml__first_difference(mats[m].want, got, mats[m].rows);
  if (r < 0) return;
  t->wrong++;
  failure(t, "%s: %s row %ld differs from the CPU's", op, mats[m].name, r);
}

static void after_call(thread_state *t, int op, int rc) {
  if (rc == 0) {
    t->done[op]++;
  } else if (busy_rc(rc)) {
    t->busy[op]++;
    back_off();
  } else {
    t->bad_rc++;
    failure(t, "%s returned %s", op_names[op], bml_err_name(rc));
  }
}

static void op_mat_vec(thread_state *t) {
  size_t m = next(&t->rng) % NMAT;
  memset(t->out[m], 0xff, mats[m].rows * sizeof(float));
  int rc = bml_worker_mat_vec(t->w, mats[m].name, mats[m].w, mats[m].rows, mats[m].n, mats[m].a, t->out[m]);
  after_call(t, OP_MAT_VEC, rc);
  if (rc == 0) check_rows(t, m, t->out[m], "mat_vec");
}

/* A batch of 2 to NMAT distinct matrices in a random order, 0 and 1 kept
 * side by side where both come (a group sharing one activation). */
static void op_batch(thread_state *t) {
  bml_product p[NMAT];
  size_t idx[NMAT], count = 2 + next(&t->rng) % (NMAT - 1);
  for (size_t i = 0; i < NMAT; i++) idx[i] = i;
  for (size_t i = NMAT - 1; i > 1; i--) { /* 0 and 1 stay first, together */
    size_t j = 2 + next(&t->rng) % (i - 1);
    size_t tmp = idx[i];
    idx[i] = idx[j], idx[j] = tmp;
  }
  for (size_t i = 0; i < count; i++) {
    const matrix *m = &mats[idx[i]];
    memset(t->out[idx[i]], 0xff, m->rows * sizeof(float));
    p[i] = (bml_product){m->name, m->w, m->rows, m->n, m->a, t->out[idx[i]]};
  }
  int rc = bml_worker_mat_vec_batch(t->w, p, count);
  after_call(t, OP_BATCH, rc);
  for (size_t i = 0; rc == 0 && i < count; i++) check_rows(t, idx[i], t->out[idx[i]], "batch");
}

/* begin, this thread's CPU rows on its own, finish (tried again while
 * another thread is inside a call). */
static void op_begin_finish(thread_state *t) {
  size_t m = next(&t->rng) % NMAT, card_rows = 0;
  const matrix *x = &mats[m];
  memset(t->out[m], 0xff, x->rows * sizeof(float));
  int rc = bml_worker_begin(t->w, x->name, x->w, x->rows, x->n, x->a, &card_rows);
  if (rc != 0) {
    after_call(t, OP_BEGIN_FINISH, rc);
    return;
  }
  const size_t nb = x->n / 128;
  if (card_rows < x->rows &&
      bml_q1_0_mat_vec(x->w + card_rows * nb, x->rows - card_rows, x->n, x->a, t->out[m] + card_rows) != 0)
    failure(t, "begin/finish: the CPU's rows failed");
  while ((rc = bml_worker_finish(t->w, t->out[m])) == BML_EBUSY) back_off();
  after_call(t, OP_BEGIN_FINISH, rc);
  if (rc == 0) check_rows(t, m, t->out[m], "begin/finish");
}

static void op_status(thread_state *t) {
  char *s = NULL;
  int rc = bml_worker_status_json(t->w, &s);
  after_call(t, OP_STATUS, rc);
  if (rc == 0) {
    json_t *root = json_loads(s, 0, NULL);
    if (!json_is_object(root) || !json_object_get(root, "products_on_card")) {
      t->bad_rc++;
      failure(t, "status: not the worker's JSON object: %.100s", s);
    }
    json_decref(root);
  }
  free(s);
}

static void op_set_limit(thread_state *t) {
  double limit = 0.05 + (double)(next(&t->rng) % 96) / 100.0;
  after_call(t, OP_SET_LIMIT, bml_worker_set_limit(t->w, limit));
}

static void op_release(thread_state *t) {
  bml_worker_release(t->w);
  t->done[OP_RELEASE]++;
}

static void *drive(void *arg) {
  thread_state *t = arg;
  static void (*const ops[OP_COUNT])(thread_state *) = {op_mat_vec, op_batch, op_begin_finish,
                                                          op_status,  op_set_limit, op_release};
  /* past until, on to the thread's first product (a short phase on a slow
   * host, the sanitizers', once did none: status and release alone) */
  for (double at; (at = now()) < t->until || (t->done[OP_MAT_VEC] + t->done[OP_BATCH] == 0 && at < t->until + 30.0);) {
    int pick = (int)(next(&t->rng) % 100), op = 0;
    while (pick >= op_weight[op]) pick -= op_weight[op++];
    ops[op](t);
  }
  return NULL;
}

/* ---- the phases --------------------------------------------------------------------- */

/* Runs opt.threads threads on w for seconds; 0 when every result was exact. */
static int run_load(bml_worker *w, bml_pool *pool, double seconds, const char *phase) {
  int n = opt.threads, bad = 0;
  thread_state *t = calloc((size_t)n, sizeof *t);
  pthread_t *tid = calloc((size_t)n, sizeof *tid);
  if (!t || !tid) return 1;
  const double until = now() + seconds;
  int started = 0;
  for (int i = 0; i < n; i++) {
    t[i] = (thread_state){.w = w, .pool = pool, .rng = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1), .until = until};
    for (size_t m = 0; m < NMAT; m++)
      if (!(t[i].out[m] = malloc(mats[m].rows * sizeof(float)))) bad = 1;
    if (!bad && pthread_create(&tid[i], NULL, drive, &t[i]) == 0) started++;
  }
  long done[OP_COUNT] = {0}, busy[OP_COUNT] = {0}, wrong = 0, bad_rc = 0;
  for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
  for (int i = 0; i < n; i++) {
    for (int o = 0; o < OP_COUNT; o++) done[o] += t[i].done[o], busy[o] += t[i].busy[o];
    wrong += t[i].wrong, bad_rc += t[i].bad_rc;
    if (t[i].first_error[0]) fprintf(stderr, "load: %s: thread %d: %s\n", phase, i, t[i].first_error);
    for (size_t m = 0; m < NMAT; m++) free(t[i].out[m]);
  }
  printf("%s: %d threads, %.1f s:", phase, started, seconds);
  for (int o = 0; o < OP_COUNT; o++) printf(" %s %ld (%ld busy)%s", op_names[o], done[o], busy[o], o + 1 < OP_COUNT ? "," : "");
  printf("; %ld rows wrong, %ld unexpected results\n", wrong, bad_rc);
  free(t);
  free(tid);
  return bad || started < n || wrong > 0 || bad_rc > 0 || done[OP_MAT_VEC] + done[OP_BATCH] == 0;
}

/* The worker's own counts: how many products the card took, and how many
 * an error on the card gave to the CPU. */
static void print_worker_counts(bml_worker *w, const char *phase) {
  char *s = NULL;
  if (bml_worker_status_json(w, &s) != 0) return;
  json_t *root = json_loads(s, 0, NULL);
  printf("%s: products_on_card %lld, products_on_cpu_error %lld, retired %s\n", phase,
         (long long)json_integer_value(json_object_get(root, "products_on_card")),
         (long long)json_integer_value(json_object_get(root, "products_on_cpu_error")),
         json_is_true(json_object_get(root, "retired")) ? "yes" : "no");
  json_decref(root);
  free(s);
}

/* Opens a worker with the library's log captured in logged. */
static int open_worker(bml_pool *pool, bml_worker **w) {
  pthread_mutex_lock(&log_lock);
  logged[0] = '\0';
  pthread_mutex_unlock(&log_lock);
  bml_log_set_sink(capture, NULL);
  int rc = bml_worker_open(pool, w);
  bml_log_set_sink(NULL, NULL);
  return rc;
}

/* After a worker is closed (or was never opened): no OpenCL object of it
 * may be alive. */
static int expect_nothing_alive(const char *when) {
  char objects[512];
  if (live_objects(objects, sizeof objects) == 0) return 0;
  fprintf(stderr, "load: %s: OpenCL objects still alive: %s\n", when, objects);
  return 1;
}

/* --opens K: each open under the open rates.  One that gives no worker
 * must say why: in its own log, or (the library says each kind of reason
 * once a process: bml_worker_open) in an earlier open's. */
static int run_opens(bml_pool *pool) {
  int bad = 0, opened = 0, said = 0;
  if (set_rates(opt.open_rates)) return 1;
  for (int k = 0; k < opt.opens; k++) {
    bml_worker *w = NULL;
    int rc = open_worker(pool, &w);
    char when[64];
    snprintf(when, sizeof when, "open %d", k);
    if (rc != 0 && rc != BML_ENOMEM) {
      fprintf(stderr, "load: %s returned %s\n", when, bml_err_name(rc));
      bad = 1;
    } else if (!w) {
      const char *why = strstr(logged, "GPU not used: ");
      said += why != NULL;
      printf("%s: no worker: %.*s\n", when, why ? (int)strcspn(why, "\n") : 20, why ? why : "(said before)");
      if (!why && said == 0) {
        fprintf(stderr, "load: %s gave no worker and did not say why: %s\n", when, logged);
        bad = 1;
      }
    } else {
      opened++;
      bad |= run_load(w, pool, 0.2, when);
      bml_worker_close(w);
    }
    bad |= expect_nothing_alive(when);
  }
  printf("opens: %d of %d gave a worker\n", opened, opt.opens);
  return bad;
}

static int run(void) {
  bml_pool *pool = NULL;
  int rc = bml_pool_open(0, &pool), bad = 0;
  if (rc != 0) {
    fprintf(stderr, "load: cannot open a pool: %s\n", bml_strerror(rc));
    return 1;
  }
  if (opt.opens > 0) bad |= run_opens(pool);
  bml_worker *w = NULL;
  if (set_rates("all=0")) bad = 1;
  rc = open_worker(pool, &w);
  if (!w) {
    fprintf(stderr, "load: no worker (%s): %s", bml_strerror(rc), logged);
    bml_pool_close(pool);
    return 1;
  }
  const long before = injected_faults();
  if (set_rates(opt.load_rates)) bad = 1;
  bad |= run_load(w, pool, opt.seconds, "load");
  if (set_rates("all=0")) bad = 1;
  print_worker_counts(w, "load");
  if (opt.faults) printf("faults injected under load: %ld\n", injected_faults() - before);
  bml_worker_close(w);
  bad |= expect_nothing_alive("after the load");
  bml_pool_close(pool);
  return bad;
}

int main(int argc, char **argv) {
  int rc = parse_options(argc, argv);
  if (rc != 0) return rc;
  if (opt.faults && find_shim() != 0) return 2;
  static const bml__oracle_hooks quick = {.quick = true};
  if (!opt.full_oracle) bml__oracle_set_hooks(&quick);
  bml__tune_disable(!opt.tune);
  if (make_matrices() != 0) {
    fprintf(stderr, "load: %s\n", bml_strerror(BML_ENOMEM));
    return 1;
  }
  rc = run();
  free_matrices();
  if (opt.faults) {
    char stats[512];
    live_objects(stats, sizeof stats);
    printf("shim: %s\n", stats);
  }
  printf("load: %s\n", rc == 0 ? "every result exact" : "FAILED");
  return rc == 0 ? 0 : 1;
}
