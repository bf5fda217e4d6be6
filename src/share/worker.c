/* worker.c -- a verified card and the CPU pool share each product: calibrated share, per-shape decision, limiter, faults. */
#include "base/hooks.h"
#include "share/worker.h"

#include "cpu/golden.h"
#include "share/settings.h"
#include "share/token.h"
#include "card/tune.h"
#include "card/verdict.h"

#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Errors in a row that retire the card for the process. */
#define RETIRE_AFTER 3
/* In-order queues a batch's launches are spread over (BANKML_GPU_QUEUES),
 * on NVIDIA's driver.  Elsewhere one, unless the variable asks for more:
 * with several, the main queue copies later activations into the buffer
 * that kernels on the side queues are reading, and those kernels write
 * other rows of one results buffer side by side.  OpenCL leaves a memory
 * object changed in one queue while another uses it undefined (the
 * specification's appendix on shared objects); NVIDIA's driver was
 * measured and checked at it (doc/PERFORMANCE.md: 4 queues took a
 * bonsai-8b token from 1.01 ms to 0.69, every row bit-exact), no other was;
 * every open checks the batches on the card's queues (check_batches), and
 * drops to one queue where several give other bits. */
#define QUEUES_DEFAULT 4
/* The calibration product. */
#define CAL_ROWS 4096
#define CAL_N 4096
#define CAL_RUNS 3
/* The round trip's product: next to no work. */
#define CAL_TRIP_ROWS 64
#define MIN_SHARE 0.02
/* How long a wait for the card polls its event before it sleeps: a
 * decode's group comes back in tens of microseconds, and a sleep's wake
 * costs more than that (choose_transfers). */
#define WAIT_SPIN 1e-3

/* One matrix of a group. */
typedef struct {
  char *name;
  const bml_block_q1_0 *ptr;
  size_t rows;
} member;

/* What the worker holds on the card for one matrix, or for one group of
 * matrices that share an activation (their card rows concatenated):
 * known by (n, and each member's name, pointer and rows). */
typedef struct {
  size_t n, nmembers;
  member *members;
  size_t *held;        /* card rows held of each member (0: none) */
  bml__card_matrix m;
  bool cpu_only;       /* an allocation failed: this entry stays on the CPU */
  int strikes;         /* products in a row whose balance asked for a split far from the held one */
  unsigned moves;      /* times the balance moved it (uploaded it again with another split) */
  int last_dir;        /* the last move's direction: +1 the card's part grew, -1 it shrank */
  size_t since_move;   /* products planned since it was uploaded */
  uint64_t planned;    /* the submission (bml_worker.plans) that last planned a group on it: a
                          group of the same matrix after it takes the rows it planned */
} entry;

/* One group of the submission in flight. */
typedef struct {
  size_t first, count; /* its products */
  entry *e;            /* NULL: the group runs on the CPU */
  bool forced;         /* the card was to take part, but memory, the offsets or an error said no */
  size_t act_off;      /* byte offset of its activation in w->acts */
  size_t out_off;      /* float offset of its results in w->outs */
} group;

/* Where the card's results land: rows [row0, row0 + rows) of a group's
 * card rows (its products' card rows, concatenated) at float `at` of the
 * results' buffer. */
typedef struct {
  size_t group, row0, rows, at;
} piece;

/* One read of results back to the host: pieces [first, first + count),
 * which are floats [at, at + len) of the results' buffer, and its event. */
typedef struct {
  size_t first, count, at, len;
  cl_event done;
} readback;

/* The submission in flight between begin and finish. */
typedef struct {
  bool active;
  const bml_product *p;
  size_t count;
  size_t *card_rows; /* per product */
  group *groups;
  size_t ngroups;
  piece *pieces;     /* the card's results, in the order of the results' buffer */
  size_t npieces;
  readback *reads;   /* in the order they complete on the card, more or less */
  size_t nreads;
  size_t reads_done; /* reads [0, reads_done) seen complete (card_done) */
  bool on_card;      /* something was enqueued */
  bml__shape *shape; /* a single product's shape, for its calibration */
  bml__balance *balance; /* where its share comes from and what it teaches (NULL: the open's share) */
  bool timed;
  bool uploaded; /* a matrix went to the card: its time is no measure of the card's rate */
  double forced_weights, forced_time; /* the CPU's work on forced groups: it does not follow the share */
  pthread_t owner; /* the thread that began it (a child of fork() has only the one that forked) */
  bool own_cpu;  /* the worker computes the CPU's rows (not the caller of bml_worker_begin): their
                    time is known */
  bool cpu_alone; /* they ran on the calling thread alone (another thread drove the pool) */
  double begin_time, dispatch_time;
  double ready_time; /* the card's part enqueued: the CPU's part starts */
  double seen_busy, seen_done; /* a batch's CPU part looked at the card: when it last saw it at work, when done (0: not) */
  uint64_t act_bytes, nrec, out_rows; /* the card's activations, records and results, as planned */
} submission;

typedef struct {
  uint64_t on_card, on_cpu_resting, on_cpu_memory, on_cpu_error, on_cpu_decided, on_cpu_share;
  uint64_t rests_waited; /* submissions that waited for the card's rest to end */
} counters;

/* Where a submission's time went, summed over submissions (seconds). */
typedef struct {
  uint64_t submissions;
  uint64_t launches; /* kernel launches on the card (a batched one computes many products) */
  double enqueue; /* plan + upload + launch: all of the card's part before the CPU's */
  double plan;    /* the groups planned, their matrices found (or uploaded), the launches laid out */
  double upload;  /* the activations repacked and their copies in enqueued */
  double launch;  /* the launches and the copies out enqueued */
  double flush;   /* the flushes of the queues that carry them */
  double cpu;     /* the CPU's rows */
  double wait;    /* waiting for the card once the CPU was done */
  double copy;    /* the card's results into the products' outputs */
  double rest;    /* waiting for the card's rest to end */
} timings;

/* A kind of batch (known by its products' count, the first one's shape and
 * the sums of rows and weights): its own balance, since a batch runs
 * pipelined and a model's token is one kind.  The worker remembers the
 * KINDS_MAX kinds used last. */
#define KINDS_MAX 64
typedef struct {
  size_t count, rows0, n0, rows;
  double weights;
  uint64_t used; /* the submission that last used it (the least recent makes room) */
  bml__balance balance;
} batch_kind;

struct bml_worker {
  bml_pool *pool;
  bml_devices *devices;
  size_t device;
  bml__card *card;
  bml__build build;
  bml__card_buf acts, outs; /* a submission's activations in, results out */
  double share;
  bool share_fixed; /* BANKML_GPU_SHARE or bml_worker_set_share: no per-shape calibration */
  bml__limiter limiter;
  entry **entries; /* each entry has its own allocation: groups in flight point at them */
  size_t nentries, cap;
  bml__shape *shapes;
  size_t nshapes, shapes_cap;
  batch_kind kinds[KINDS_MAX];
  size_t nkinds; /* kinds known, at most KINDS_MAX */
  double cpu_rate; /* the CPU's weights a second, as last measured (0: not yet) */
  double round_trip; /* the card's seconds for a product of next to no work (0: not measured) */
  double wait_spin;  /* how long a wait for the card polls its event before it sleeps (seconds) */
  bml_product single; /* the product of bml_worker_begin */
  size_t *card_rows, card_rows_cap;
  group *groups;
  size_t groups_cap;
  bml__batch_item *items; /* a batch's plan */
  bml__batch_rec *recs;
  bml__batch_run *runs;
  size_t items_cap, recs_cap, runs_cap;
  bml__cpu_piece *cpu_pieces; /* a submission's CPU rows, for the pool */
  size_t cpu_pieces_cap;
  piece *pieces, *piece_src; /* a batch's results: where they land, and in the records' first order */
  readback *reads;
  size_t pieces_cap, piece_src_cap, reads_cap;
  submission cur;
  counters count;
  timings time;
  int errors_in_row;
  uint64_t plans; /* submissions planned (entry.planned) */
  bool retired;
  bool child, child_said; /* a copy in a child of fork(), and whether it has said so */
  bool torn;              /* ... that another thread was changing at the fork: busy for good */
  bml__fork_watch watch;
  atomic_flag driving;
  bml__worker_hooks hooks;
  bml_token *tokens;   /* the tokens open on it (token.c) */
  bml_token *resident; /* the token whose kernel is on the card now */
  uint64_t token_bytes; /* what the tokens hold on the card */
  bool tokens_resident; /* tokens may run resident (the open's check said so) */
  bool tokens_unsure;   /* ... not, but for a reason other than their bits (an error, a timeout) */
  double open_seconds;         /* bml_worker_open's time */
  bool verdict_remembered;     /* the open took a remembered verdict, confirmed on the card */
  bool batches_remembered;     /* ... and the batch check remembered for its queues */
  bool calibration_remembered; /* ... and the calibration */
};

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

static void free_state(bml_worker *w);

/* ---- driving: one thread at a time ---------------------------------------------- */

static bool enter(bml_worker *w) { return !atomic_flag_test_and_set_explicit(&w->driving, memory_order_acquire); }
static void leave(bml_worker *w) { atomic_flag_clear_explicit(&w->driving, memory_order_release); }

/* Enters w, waiting while another thread is inside a call (a product's
 * CPU rows may take milliseconds): a short spin, then sleeps of 50 us,
 * not a spin that would take a core from the pool's threads. */
static void enter_waiting(bml_worker *w) {
  for (unsigned i = 0; !enter(w); i++) {
    if (i < 64) {
      bml__cpu_relax();
      continue;
    }
    const struct timespec pause = {0, 50000};
    nanosleep(&pause, NULL);
  }
}

void bml__worker_enter_waiting(bml_worker *w) { enter_waiting(w); }

/* What a call that meets a product in flight returns (inside enter): a
 * bml_worker_mat_vec's (own_cpu; it leaves the worker while its CPU rows
 * run, and finishes them itself) belongs to a call still running on
 * another thread, BML_EBUSY as any such call; one begun by
 * bml_worker_begin waits for the caller's finish, BML_ESTATE. */
static int in_flight_error(const bml_worker *w) { return w->cur.own_cpu ? BML_EBUSY : BML_ESTATE; }

/* Grows *p (of *cap elements of size) to hold need.  0 or BML_ENOMEM. */
static int reserve(void **p, size_t *cap, size_t need, size_t size) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 16;
  while (c < need) c *= 2;
  void *q = realloc(*p, c * size);
  if (!q) return BML_ENOMEM;
  *p = q;
  *cap = c;
  return 0;
}

/* ---- matrices and shapes -------------------------------------------------------- */

/* What the limiter counts of a staging buffer b of `bytes`: a staged one
 * is a buffer on the card and its pinned copy in host memory (on an
 * integrated card both are the RAM the limit counts), a zero-copy one a
 * single buffer. */
static uint64_t staging_bytes(const bml_worker *w, const bml__card_buf *b, uint64_t bytes) {
  return (!b->zero_copy && w->limiter.integrated ? 2 : 1) * bytes;
}

/* What the limiter counts as held: the slabs and a submission's staging on
 * the card (activations in, results out). */
static void sync_allocated(bml_worker *w) {
  w->limiter.allocated = (w->card ? bml__card_slab_bytes(w->card) : 0) + staging_bytes(w, &w->acts, w->acts.size) +
                         staging_bytes(w, &w->outs, w->outs.size) + w->token_bytes;
}

/* Sets how the activations go in and the results come back: zero-copy
 * (the kernels use host memory the host fills and reads) or copies; the
 * buffers of a mode left are freed (the next submission makes new ones). */
static void set_buffers(bml_worker *w, bool acts_zero_copy, bool outs_zero_copy) {
  if (w->acts.zero_copy != acts_zero_copy) bml__card_buf_free(&w->acts), w->acts.zero_copy = acts_zero_copy;
  if (w->outs.zero_copy != outs_zero_copy) bml__card_buf_free(&w->outs), w->outs.zero_copy = outs_zero_copy;
  sync_allocated(w);
}

/* "zero-copy", "copies" or which of the two is zero-copy: how w's
 * activations and results reach the card and come back. */
static const char *buffers_name(const bml_worker *w) {
  return w->acts.zero_copy && w->outs.zero_copy ? "zero-copy"
         : w->acts.zero_copy                    ? "zero-copy activations"
         : w->outs.zero_copy                    ? "zero-copy results"
                                                : "copies";
}

/* Whether a submission's launches are batched, with records before the
 * activations: a test forcing q1_0_mat_vec or q1_0_mat_vec8 gets a launch
 * per group instead. */
static bool uses_records(const bml_worker *w) { return w->hooks.kernel >= BML_KERNEL_MAT_VEC_L; }

/* The bytes of a submission's staging in: its nrec records (rounded up to
 * 64 bytes) and act bytes of activations, as enqueue_groups lays it out. */
static uint64_t staging_in_bytes(const bml_worker *w, uint64_t act, uint64_t nrec) {
  return (uses_records(w) ? (nrec * sizeof(bml__desc) + 63) / 64 * 64 : 0) + act;
}

/* The bytes the staging would grow by for a submission of in_bytes of
 * activations and records and out_rows results (bml__card_buf_reserve
 * replaces a buffer that is too small). */
static uint64_t staging_growth(const bml_worker *w, uint64_t in_bytes, uint64_t out_rows) {
  const uint64_t a = bml__card_buf_size(in_bytes), o = bml__card_buf_size(out_rows * sizeof(float));
  return staging_bytes(w, &w->acts, a > w->acts.size ? a - w->acts.size : 0) +
         staging_bytes(w, &w->outs, o > w->outs.size ? o - w->outs.size : 0);
}

/* Frees the matrix's card buffers (to upload it again with another split:
 * its history of moves stays, even when that upload fails). */
static void drop_held(bml_worker *w, entry *e) {
  if (!e->m.nchunks) return;
  bml__card_matrix_free(w->card, &e->m);
  sync_allocated(w);
  memset(e->held, 0, e->nmembers * sizeof *e->held);
}

/* Frees them for good (a shape decided for the CPU, a release): a later
 * upload starts a fresh history. */
static void drop_matrix(bml_worker *w, entry *e) {
  drop_held(w, e);
  e->strikes = 0, e->moves = 0, e->last_dir = 0, e->since_move = 0;
}

/* Frees e and what it owns (its card buffers are dropped before). */
static void free_entry(entry *e) {
  for (size_t i = 0; i < e->nmembers; i++) free(e->members[i].name);
  free(e->members);
  free(e->held);
  free(e);
}

static bool entry_is(const entry *e, const bml_product *p, size_t count) {
  if (e->nmembers != count || e->n != p->n) return false;
  for (size_t i = 0; i < count; i++)
    if (e->members[i].ptr != p[i].wts || e->members[i].rows != p[i].rows || strcmp(e->members[i].name, p[i].name))
      return false;
  return true;
}

static entry *new_entry(bml_worker *w, const bml_product *p, size_t count) {
  if (reserve((void **)&w->entries, &w->cap, w->nentries + 1, sizeof *w->entries)) return NULL;
  entry *e = calloc(1, sizeof *e);
  if (!e) return NULL;
  e->n = p->n;
  e->members = calloc(count, sizeof *e->members);
  e->held = calloc(count, sizeof *e->held);
  bool ok = e->members && e->held;
  for (size_t i = 0; ok && i < count; i++) {
    e->members[i] = (member){strdup(p[i].name), p[i].wts, p[i].rows};
    ok = e->members[i].name != NULL;
    e->nmembers = i + 1;
  }
  if (!ok) {
    free_entry(e);
    return NULL;
  }
  w->entries[w->nentries++] = e;
  return e;
}

static entry *known_entry(bml_worker *w, const bml_product *p, size_t count) {
  for (size_t i = 0; i < w->nentries; i++)
    if (entry_is(w->entries[i], p, count)) return w->entries[i];
  return NULL;
}

static bml__shape *find_shape(bml_worker *w, size_t rows, size_t n) {
  for (size_t i = 0; i < w->nshapes; i++)
    if (w->shapes[i].rows == rows && w->shapes[i].n == n) return &w->shapes[i];
  if (reserve((void **)&w->shapes, &w->shapes_cap, w->nshapes + 1, sizeof *w->shapes)) return NULL;
  bml__shape *s = &w->shapes[w->nshapes++];
  memset(s, 0, sizeof *s);
  s->rows = rows, s->n = n;
  s->state = BML_SHAPE_WARMUP;
  bml__balance_init(&s->balance, w->share);
  return s;
}

/* The balance of this batch's kind (the least recently used makes room). */
static bml__balance *find_kind(bml_worker *w, const bml_product *p, size_t count) {
  size_t rows = 0;
  double weights = 0;
  for (size_t i = 0; i < count; i++) rows += p[i].rows, weights += (double)p[i].rows * (double)p[i].n;
  const uint64_t now = w->time.submissions + 1;
  batch_kind *k = NULL;
  for (size_t i = 0; i < w->nkinds; i++) {
    batch_kind *x = &w->kinds[i];
    if (x->count == count && x->rows0 == p[0].rows && x->n0 == p[0].n && x->rows == rows && x->weights == weights)
      return x->used = now, &x->balance;
    if (!k || x->used < k->used) k = x;
  }
  if (w->nkinds < KINDS_MAX) k = &w->kinds[w->nkinds++];
  *k = (batch_kind){.count = count, .rows0 = p[0].rows, .n0 = p[0].n, .rows = rows, .weights = weights, .used = now};
  bml__balance_init(&k->balance, w->share);
  return &k->balance;
}

/* A shape decided for the CPU frees the card buffers of its matrices. */
static void shape_decided(bml_worker *w, const bml__shape *s) {
  bml__debug(BML_CAT_WORKER, "shape %zux%zu: %s (median split %.3f ms, cpu %.3f ms)", s->rows, s->n,
             bml__shape_state_name(s->state), bml__median(s->split, s->nsplit) * 1e3,
             bml__median(s->cpu, s->ncpu) * 1e3);
  if (s->state != BML_SHAPE_CPU) return;
  for (size_t i = 0; i < w->nentries; i++) {
    entry *e = w->entries[i];
    if (e->nmembers == 1 && e->members[0].rows == s->rows && e->n == s->n) drop_matrix(w, e);
  }
}

/* The card's rows of a product of the submission: the fixed share, or the
 * one its shape (a single product) or its kind of batch has learnt. */
static size_t rows_for(const bml_worker *w, const submission *s, size_t rows) {
  double share = w->share_fixed || !s->balance ? w->share : s->balance->share;
  size_t r = (size_t)(share * (double)rows + 0.5);
  return r > rows ? rows : r;
}

/* ---- faults ------------------------------------------------------------------------ */

static void retire(bml_worker *w, int err) {
  w->retired = true;
  /* each worker's retirement is said (a worker opened later verifies the
   * card again, and may use it) */
  bml__warn(BML_CAT_WORKER, "GPU not used: \"%s\" retired after %d OpenCL errors in a row (the last: %s (%d)); "
            "this worker's products run on the CPU", w->card->name, RETIRE_AFTER, bml_err_name(err), err);
  bml__card_finish(w->card);
  for (size_t i = 0; i < w->nentries; i++) drop_matrix(w, w->entries[i]);
  bml__card_buf_free(&w->acts);
  bml__card_buf_free(&w->outs);
  sync_allocated(w);
}

/* In a child of fork() (fork.c) the card, its queues and buffers are the
 * parent's (the driver's threads are not in the child, and a wait on them
 * would never end): the copy retires without a word to the driver, and
 * its products run on the CPU; a call another thread was inside (its
 * product with it) is not in the child either.  A product this thread
 * began is finished on the CPU; release and close leave the card's
 * objects alone.  It says so at its first product (not here: no logging
 * in a pthread_atfork handler). */
static void worker_in_child(void *ctx) {
  bml_worker *w = ctx;
  w->child = true;
  w->retired = true;
  w->limiter.allocated = 0; /* the card's buffers are the parent's */
  if (atomic_flag_test_and_set(&w->driving)) {
    /* another thread was inside a call, changing the worker's lists as it
     * went: the copy may be half changed, so it stays busy (BML_EBUSY)
     * and its close frees only the worker itself */
    w->torn = true;
    return;
  }
  if (w->cur.active && !pthread_equal(w->cur.owner, pthread_self()))
    w->cur.active = false; /* another thread's product (its mat_vec's CPU rows, or between its begin and finish) */
  atomic_flag_clear(&w->driving);
}

static void say_child(bml_worker *w) {
  if (w->child_said) return;
  w->child_said = true;
  bml__warn(BML_CAT_WORKER, "GPU not used: this process is a child of fork(), and \"%s\" belongs to its parent: "
            "this worker's products run on the CPU", w->card->name);
}

/* An OpenCL error: the submission's card rows go to the CPU. */
static void card_error(bml_worker *w, int err) {
  bml__debug(BML_CAT_WORKER, "card error %s (%d): the rows go to the CPU", bml_err_name(err), err);
  if (++w->errors_in_row >= RETIRE_AFTER) retire(w, err);
}

/* ---- planning a submission ---------------------------------------------------------- */

/* Makes e hold want[i] card rows of each member, where the limit leaves
 * room for them and `stage` more bytes of staging.  Returns 0, or
 * BML_ENOMEM when the limit or an allocation says no (the entry then runs
 * on the CPU), or an OpenCL error. */
static int ensure_uploaded(bml_worker *w, entry *e, const size_t *want, uint64_t stage) {
  if (e->cpu_only) return BML_ENOMEM;
  /* MemAvailable is read only where something would grow: a product whose
   * matrix and staging are held (a token's usual case) reads no file */
  const bool held = e->m.nchunks && memcmp(e->held, want, e->nmembers * sizeof *want) == 0;
  if (held && stage == 0) return 0;
  uint64_t avail = w->limiter.integrated ? bml__mem_available() : 0;
  if (held) return bml__limiter_fits(&w->limiter, stage, avail) ? 0 : BML_ENOMEM;
  size_t held_sum = 0; /* > 0: a move, whose direction the next one's cooldown needs */
  for (size_t i = 0; i < e->nmembers; i++) held_sum += e->held[i];
  drop_held(w, e);
  bml__rows_part parts[16];
  size_t rows = 0, np = 0;
  for (size_t i = 0; i < e->nmembers && np < BML_ARRAY_SIZE(parts); i++)
    if (want[i]) parts[np++] = (bml__rows_part){e->members[i].ptr, want[i]}, rows += want[i];
  /* a slab that doubles the card's matrix memory where the limit allows,
   * else one of just what this matrix needs */
  bool exact = !bml__limiter_fits(&w->limiter, bml__card_matrix_growth(w->card, rows, e->n, false) + stage, avail);
  if (exact && !bml__limiter_fits(&w->limiter, bml__card_matrix_growth(w->card, rows, e->n, true) + stage, avail))
    return BML_ENOMEM;
  int rc = w->hooks.fail_uploads > 0    ? (w->hooks.fail_uploads--, CL_MEM_OBJECT_ALLOCATION_FAILURE)
           : w->hooks.break_uploads > 0 ? (w->hooks.break_uploads--, CL_INVALID_OPERATION)
                                        : bml__card_matrix_upload(w->card, parts, np, e->n, exact, &e->m);
  if (rc == CL_MEM_OBJECT_ALLOCATION_FAILURE || rc == CL_OUT_OF_RESOURCES || rc == BML_ENOMEM) {
    bml__debug(BML_CAT_WORKER, "\"%s\": allocation failed (%s): it runs on the CPU", e->members[0].name,
               bml_err_name(rc));
    e->cpu_only = true;
    return BML_ENOMEM;
  }
  if (rc != 0) return rc;
  memcpy(e->held, want, e->nmembers * sizeof *want);
  sync_allocated(w);
  w->cur.uploaded = true;
  if (held_sum) {
    size_t sum = 0;
    for (size_t i = 0; i < e->nmembers; i++) sum += want[i];
    e->moves++, e->last_dir = sum > held_sum ? 1 : -1;
    bml__debug(BML_CAT_WORKER, "\"%s\" moved (%u moves): the card's rows %zu -> %zu", e->members[0].name, e->moves,
               held_sum, sum);
  }
  e->since_move = 0;
  return 0;
}

/* The card rows each product of a group asks for; *decided is set when a
 * per-shape decision (or a single product's calibration) kept one on the CPU.
 * A single product (bml_worker_begin, s->shape set) calibrates its shape; a
 * batch's products, a batch of one included, follow the decisions made. */
static size_t want_rows(bml_worker *w, submission *s, size_t first, size_t count, bool *decided) {
  size_t total = 0;
  *decided = false;
  for (size_t i = first; i < first + count; i++) {
    const bml_product *p = &s->p[i];
    /* a single product follows its shape's calibration; a batch, its kind's balance alone */
    bool card = w->share_fixed || !s->shape || bml__shape_wants_card(s->shape);
    *decided |= !card;
    s->card_rows[i] = card ? rows_for(w, s, p->rows) : 0;
    total += s->card_rows[i];
  }
  return total;
}

/* Counts the products of a group that run on the CPU, by reason. */
static void count_cpu(uint64_t *counter, size_t count) { *counter += count; }

/* STRIKES products in a row whose balance asks for a split beyond
 * BML_HELD_LOSS from the one the card holds upload the matrix again with
 * it: a balance that probes a step past its mark and back does not, a
 * change that lasts does; one beyond BML_HELD_FAR moves it at once.  But
 * a move back (the other way from the last one) waits until COOLDOWN <<
 * (the moves so far less one, at most 8) products after the last upload:
 * a balance that swings (a noisy host) uploads the matrix a number of
 * times that grows with the log of the products, not with them (on the
 * H200 a 1.18 GB token moved at nearly every product took 3 s), while one
 * that converges moves it at once each time. */
#define STRIKES 3
#define COOLDOWN 4

/* The group's card rows: the ones its matrix holds on the card when the
 * balance's wish is close to them or not yet far (STRIKES, COOLDOWN);
 * else the wish.  Returns their sum. */
static size_t keep_held(bml_worker *w, submission *s, const group *g, entry *e, size_t total) {
  if (!e || !e->m.nchunks || w->share_fixed) return total;
  e->since_move++;
  double loss = 0;
  size_t wanted = 0, held_all = 0;
  for (size_t i = 0; i < g->count; i++) {
    size_t want = s->card_rows[g->first + i], held = e->held[i];
    wanted += want, held_all += held;
    double l = bml__split_loss(s->p[g->first + i].rows, held, want);
    if (l > loss) loss = l;
  }
  bool close = loss <= BML_HELD_LOSS;
  bool far = loss > BML_HELD_FAR || (!close && ++e->strikes >= STRIKES);
  int dir = wanted > held_all ? 1 : -1;
  bool cooled = e->moves == 0 || dir == e->last_dir ||
                e->since_move >= ((size_t)COOLDOWN << (e->moves - 1 < 8 ? e->moves - 1 : 8));
  if (far && cooled) {
    e->strikes = 0;
    return total; /* ensure_uploaded counts the move when it is made */
  }
  if (close) e->strikes = 0;
  total = 0;
  for (size_t i = 0; i < g->count; i++) total += s->card_rows[g->first + i] = e->held[i];
  return total;
}

/* Plans one group: which rows go to the card, its entry uploaded. */
static void plan_group(bml_worker *w, submission *s, group *g, bool resting) {
  g->e = NULL;
  g->forced = false;
  for (size_t i = g->first; i < g->first + g->count; i++) s->card_rows[i] = 0;
  if (w->retired) {
    count_cpu(&w->count.on_cpu_error, g->count);
    return;
  }
  bool decided;
  size_t total = want_rows(w, s, g->first, g->count, &decided);
  if (total == 0) {
    s->timed = s->shape && decided; /* a CPU-alone timing of a shape in calibration */
    count_cpu(decided ? &w->count.on_cpu_decided : &w->count.on_cpu_share, g->count);
    return;
  }
  if (resting) {
    memset(s->card_rows + g->first, 0, g->count * sizeof *s->card_rows);
    count_cpu(&w->count.on_cpu_resting, g->count);
    return;
  }
  entry *known = known_entry(w, s->p + g->first, g->count); /* looked up once: a token has hundreds */
  if (known && known->planned == w->plans) {
    /* the same matrix again in this submission, with another activation:
     * the rows it holds, as the group before planned them (keep_held
     * would count it twice, and a move would take that group's rows) */
    total = 0;
    for (size_t i = 0; i < g->count; i++) total += s->card_rows[g->first + i] = known->held[i];
  } else {
    total = keep_held(w, s, g, known, total);
  }
  /* The kernels' records hold offsets of 32 bits: a group whose activation
   * (after every record) or results would end past them runs on the CPU,
   * and is not uploaded for it. */
  const size_t n = s->p[g->first].n;
  const uint64_t act = s->act_bytes + bml__card_act_bytes(n), nrec = s->nrec + bml__card_matrix_chunks(w->card, total, n);
  const uint64_t in = staging_in_bytes(w, act, nrec);
  const uint64_t lim = w->hooks.offset_limit ? w->hooks.offset_limit : UINT32_MAX;
  entry *e = in > lim || s->out_rows + total > lim ? NULL : known ? known : new_entry(w, s->p + g->first, g->count);
  int rc = e ? ensure_uploaded(w, e, s->card_rows + g->first, staging_growth(w, in, s->out_rows + total))
             : BML_ENOMEM;
  if (rc != 0) {
    memset(s->card_rows + g->first, 0, g->count * sizeof *s->card_rows);
    g->forced = true;
    if (rc == BML_ENOMEM) {
      count_cpu(&w->count.on_cpu_memory, g->count);
      return;
    }
    card_error(w, rc);
    count_cpu(&w->count.on_cpu_error, g->count);
    return;
  }
  g->e = e;
  e->planned = w->plans;
  s->act_bytes = act, s->nrec = nrec, s->out_rows += total; /* e->m: total rows, in the chunks counted */
}

/* Waits until `until` (a rest's end, monotonic seconds).  A sleep ends
 * some 50-60 us late (the kernel's timer slack), longer than a round
 * trip's rest (on the H200 a product's 25-30 us rest 6-8 us): the last
 * SPIN_LAST seconds are spun. */
#define SPIN_LAST 1e-3

static void wait_until(double until) {
  double left = until - bml__now();
  if (left > SPIN_LAST) {
    double sleep = left - SPIN_LAST;
    struct timespec t = {(time_t)sleep, (long)((sleep - (double)(time_t)sleep) * 1e9)};
    while (nanosleep(&t, &t) != 0) continue; /* EINTR: the rest of it */
  }
  while (bml__now() < until) continue;
}

/* Is the card resting for this submission?  Not when the rest left is
 * shorter than the CPU would take for the whole submission: the worker
 * then waits for it to end, and the card takes its part as usual. */
static bool rest_or_wait(bml_worker *w, submission *s) {
  double now = bml__now(), left = w->limiter.rest_until - now;
  if (!bml__limiter_resting(&w->limiter, now)) return false;
  if (w->retired) return true;
  double weights = 0;
  for (size_t i = 0; i < s->count; i++) weights += (double)s->p[i].rows * (double)s->p[i].n;
  double cpu_rate = w->hooks.cpu_rate > 0 ? w->hooks.cpu_rate : w->cpu_rate;
  bool decided;
  if (!bml__rest_worth_waiting(left, weights, cpu_rate) || want_rows(w, s, 0, s->count, &decided) == 0) return true;
  wait_until(w->limiter.rest_until);
  double waited = bml__now() - now;
  w->count.rests_waited++;
  w->time.rest += waited;
  s->begin_time += waited; /* a calibration timing and the enqueue's time leave the wait out */
  return false;
}

/* Splits the products into groups (neighbours with one activation) and plans each. */
static int plan(bml_worker *w, submission *s) {
  if (w->child) say_child(w);
  if (reserve((void **)&w->card_rows, &w->card_rows_cap, s->count, sizeof *w->card_rows) ||
      reserve((void **)&w->groups, &w->groups_cap, s->count, sizeof *w->groups) ||
      reserve((void **)&w->cpu_pieces, &w->cpu_pieces_cap, s->count, sizeof *w->cpu_pieces))
    return BML_ENOMEM;
  s->card_rows = w->card_rows;
  s->groups = w->groups;
  s->ngroups = 0;
  w->plans++;
  s->act_bytes = s->nrec = s->out_rows = 0;
  bool resting = rest_or_wait(w, s);
  for (size_t i = 0; i < s->count;) {
    size_t j = i + 1;
    while (j < s->count && j - i < 16 && s->p[j].act == s->p[i].act && s->p[j].n == s->p[i].n) j++;
    group *g = &s->groups[s->ngroups++];
    g->first = i, g->count = j - i;
    plan_group(w, s, g, resting);
    i = j;
  }
  /* A group's error may have retired the card (the third in a row), which
   * dropped the matrices of the groups planned before it: they go to the
   * CPU too, or their card rows would be computed by no one. */
  for (size_t i = 0; w->retired && i < s->ngroups; i++) {
    group *g = &s->groups[i];
    if (!g->e) continue;
    g->e = NULL;
    memset(s->card_rows + g->first, 0, g->count * sizeof *s->card_rows);
    count_cpu(&w->count.on_cpu_error, g->count);
  }
  return 0;
}

/* ---- the card's part: copies in, batched launches, a read back after each -------- */

static bml__kernel_id kernel_for(const bml_worker *w, size_t rows) {
  return w->hooks.kernel < BML_KERNEL_COUNT ? w->hooks.kernel : bml__tune_kernel_for(w->card, rows);
}

/* The activations of groups [first, last) into the staging, spread over
 * the pool's threads when there are many (a model's token has a megabyte). */
typedef struct {
  bml_worker *w;
  const submission *s;
  size_t first, last;
} repack_job;

static void repack_part(void *ctx, int tid, int nthreads) {
  const repack_job *j = ctx;
  for (size_t i = j->first + (size_t)tid; i < j->last; i += (size_t)nthreads) {
    const group *g = &j->s->groups[i];
    if (g->e) bml__card_act_repack(j->s->p[g->first].act, g->e->n, (char *)j->w->acts.host + g->act_off);
  }
}

#define REPACK_PARALLEL_BYTES (256 * 1024) /* below this, one thread repacks */

static void repack_acts(bml_worker *w, const submission *s, size_t first, size_t last, size_t bytes) {
  repack_job j = {w, s, first, last};
  if (bytes >= REPACK_PARALLEL_BYTES && bml_pool_threads(w->pool) > 1) bml__pool_run(w->pool, repack_part, &j);
  else repack_part(&j, 0, 1);
}

/* The plan of the batched launches: a record per chunk of the card's
 * groups, at the start of the activations' buffer.  The results
 * are laid out in the launches' order, so each launch's results are one
 * range of the results' buffer, read back as soon as the launch is done. */
static int plan_launches(bml_worker *w, submission *s, size_t nrec, bml__desc *desc, size_t *nruns) {
  int rc = reserve((void **)&w->items, &w->items_cap, s->ngroups, sizeof *w->items);
  if (rc == 0) rc = reserve((void **)&w->recs, &w->recs_cap, nrec, sizeof *w->recs);
  if (rc == 0) rc = reserve((void **)&w->runs, &w->runs_cap, nrec, sizeof *w->runs);
  if (rc == 0) rc = reserve((void **)&w->pieces, &w->pieces_cap, nrec, sizeof *w->pieces);
  if (rc == 0) rc = reserve((void **)&w->piece_src, &w->piece_src_cap, nrec, sizeof *w->piece_src);
  if (rc == 0) rc = reserve((void **)&w->reads, &w->reads_cap, nrec, sizeof *w->reads);
  if (rc != 0) return rc;
  /* The kernel is chosen by the rows of the whole launch, not of each
   * product: many small products in one launch fill the card as one big
   * one does, and q1_0_mat_vec_lr serves more rows per table. */
  size_t n = 0, rows = 0, k = 0;
  for (size_t i = 0; i < s->ngroups; i++) rows += s->groups[i].e ? s->groups[i].e->m.rows : 0;
  const bml__batched_id kind = kernel_for(w, rows) == BML_KERNEL_MAT_VEC_LR ? BML_BATCHED_LR : BML_BATCHED_L;
  for (size_t i = 0; i < s->ngroups; i++) {
    const group *g = &s->groups[i];
    if (!g->e) continue;
    w->items[n++] = (bml__batch_item){&g->e->m, kind, g->act_off, 0};
    for (size_t c = 0; c < g->e->m.nchunks; c++) /* the records' first order: groups, then chunks */
      w->piece_src[k++] = (piece){i, g->e->m.chunks[c].row0, g->e->m.chunks[c].rows, 0};
  }
  *nruns = bml__batch_plan(w->card, w->items, n, w->recs, desc, w->runs);
  size_t at = 0;
  for (size_t i = 0; i < nrec; i++) {
    piece *pc = &w->pieces[i];
    *pc = w->piece_src[w->recs[i].order];
    pc->at = at;
    desc[i].out_off = (uint32_t)at;
    at += pc->rows;
  }
  s->pieces = w->pieces, s->npieces = nrec;
  return 0;
}

/* Enqueues the read of rb's results on queue q, non-blocking, with an
 * event; with zero-copy results there is none to make (the launch's event
 * stands for it). */
static int read_back(bml_worker *w, cl_command_queue q, readback *rb) {
  cl_event ev = NULL;
  int rc = bml__card_buf_read_on(q, &w->outs, rb->at * sizeof(float), rb->len * sizeof(float), &ev);
  if (ev) rb->done = ev;
  return rc;
}

static void release_reads(submission *s) {
  for (size_t i = 0; i < s->nreads; i++)
    if (s->reads[i].done) clReleaseEvent(s->reads[i].done);
  s->nreads = 0;
  s->reads_done = 0;
}

/* A launch per group, for the kernels that have no batched form (a test's
 * choice), and one read of every result after them. */
static int launch_each(bml_worker *w, submission *s, cl_command_queue *q, size_t nq, size_t out_rows) {
  bml__card *c = w->card;
  int rc = reserve((void **)&w->pieces, &w->pieces_cap, s->ngroups, sizeof *w->pieces);
  if (rc == 0) rc = reserve((void **)&w->reads, &w->reads_cap, 1, sizeof *w->reads);
  s->pieces = w->pieces, s->npieces = 0;
  size_t launched = 0;
  for (size_t i = 0; rc == 0 && i < s->ngroups; i++) {
    const group *g = &s->groups[i];
    if (!g->e) continue;
    s->pieces[s->npieces++] = (piece){i, 0, g->e->m.rows, g->out_off};
    cl_command_queue on = q[launched % nq];
    rc = bml__card_mat_vec_enqueue_on(c, on, &w->build, kernel_for(w, g->e->m.rows), 0, &g->e->m, &w->acts,
                                      g->act_off, &w->outs, g->out_off);
    if (rc == 0 && ++launched % 8 == 0) rc = clFlush(on);
  }
  /* the read (or, with zero-copy results, a marker: the event to wait
   * for), on the main queue, waits for the side queues' launches */
  cl_event done[BML_MAX_QUEUES] = {NULL};
  for (size_t i = 1; rc == 0 && i < nq; i++) rc = clEnqueueMarkerWithWaitList(q[i], 0, NULL, &done[i - 1]);
  if (rc == 0 && nq > 1) rc = clEnqueueBarrierWithWaitList(c->queue, (cl_uint)(nq - 1), done, NULL);
  for (size_t i = 0; i + 1 < nq; i++)
    if (done[i]) clReleaseEvent(done[i]);
  s->reads = w->reads;
  if (rc == 0) {
    readback *rb = &s->reads[0];
    *rb = (readback){0, s->npieces, 0, out_rows, NULL};
    rc = read_back(w, c->queue, rb);
    if (rc == 0 && !rb->done) rc = clEnqueueMarkerWithWaitList(c->queue, 0, NULL, &rb->done);
    if (rc == 0) s->nreads = 1;
  }
  return rc;
}

/* The batched launches, each one's results read back right after it on its
 * queue.  The activations go in by prefixes: a launch needs the groups up
 * to its last record's activation (the first slabs hold the first
 * matrices, so the first launch needs few), and those are repacked and
 * copied in just before it, so the card starts early and the host repacks
 * the rest while it computes.  The records lie before the activations and
 * go in with the first prefix.  With several queues the copies in have the
 * main queue to themselves (behind no launch) and the launches and reads
 * go round the side queues, each waiting for the copy it needs.  A copy in
 * is flushed at once where launches follow it (the card copies while the
 * host enqueues them), each launch and its read as they are enqueued: a
 * batch of one launch (a decode's group) is one flush.  Zero-copy
 * activations or results have no copy in or read to enqueue: the kernels
 * read and write the host's memory, and a launch's own event marks its
 * results ready. */
static int launch_batched(bml_worker *w, submission *s, cl_command_queue *q, size_t nq, size_t launches) {
  bml__card *c = w->card;
  const bml__desc *desc = w->acts.host;
  cl_event in = NULL;                      /* the latest copy in (with side queues) */
  size_t copied = 0, next = 0;             /* bytes copied in; the first group not yet repacked */
  size_t waited[BML_MAX_QUEUES] = {0};     /* bytes of the copy in each queue has waited for */
  int rc = 0;
  double up = 0, fl = 0, t = bml__now();
  s->reads = w->reads;
  for (size_t i = 0; rc == 0 && i < launches; i++) {
    const bml__batch_run *run = &w->runs[i];
    size_t need = copied;
    for (size_t k = run->first; k < run->first + run->count; k++) {
      size_t end = desc[k].act_off + bml__card_act_bytes((size_t)desc[k].nb * BML_Q1_0_BLOCK);
      if (end > need) need = end;
    }
    if (need > copied) {
      size_t last = next;
      while (last < s->ngroups && (!s->groups[last].e || s->groups[last].act_off < need)) last++;
      const double t0 = bml__now();
      repack_acts(w, s, next, last, need - copied);
      next = last;
      if (in) clReleaseEvent(in), in = NULL;
      rc = bml__card_buf_write_on(c->queue, &w->acts, copied, need - copied, nq > 1 ? &in : NULL);
      if (rc == 0 && (i + 1 < launches || in)) rc = clFlush(c->queue); /* in: another queue waits for it */
      copied = need;
      up += bml__now() - t0;
    }
    const size_t qi = nq > 1 ? 1 + i % (nq - 1) : 0;
    if (rc == 0 && qi != 0 && in && waited[qi] < copied) {
      rc = clEnqueueBarrierWithWaitList(q[qi], 1, &in, NULL);
      waited[qi] = copied;
    }
    if (rc == 0 && w->hooks.fail_launch > 0 && (size_t)w->hooks.fail_launch == i + 1)
      w->hooks.fail_launch = 0, rc = CL_OUT_OF_RESOURCES;
    readback *rb = &s->reads[i];
    *rb = (readback){run->first, run->count, s->pieces[run->first].at, 0, NULL};
    for (size_t k = run->first; k < run->first + run->count; k++) rb->len += s->pieces[k].rows;
    if (rc == 0)
      rc = bml__card_batched_enqueue(c, q[qi], &w->build, run->kind, run->slab, &w->acts,
                                     run->first * sizeof(bml__desc), run->count, run->groups, &w->outs,
                                     w->outs.zero_copy ? &rb->done : NULL);
    if (rc == 0) rc = read_back(w, q[qi], rb);
    if (rb->done) s->nreads++;
    const double t0 = bml__now();
    if (rc == 0) rc = clFlush(q[qi]);
    fl += bml__now() - t0;
  }
  if (in) clReleaseEvent(in);
  w->time.upload += up;
  w->time.flush += fl;
  w->time.launch += bml__now() - t - up - fl;
  return rc;
}

/* The card's part of a submission: the activations (and the records of the
 * batched launches) in, the launches, and the results read back.  The
 * table kernels run batched: one launch per slab and kernel (cut every
 * BML_RUN_BYTES of weights) computes every product of the batch there (a
 * launch costs the host some microseconds,
 * and a model's token has hundreds of products).  The launches are spread
 * over the card's queues, which may run them side by side.  Flushed as it
 * goes, so the card starts while the host enqueues the rest, and the host
 * copies a launch's results out while the card computes the next ones
 * (complete). */
static int enqueue_groups(bml_worker *w, submission *s) {
  const bool batched = uses_records(w);
  size_t act_bytes = 0, nrec = 0;
  for (size_t i = 0; i < s->ngroups; i++) {
    const group *g = &s->groups[i];
    if (g->e) act_bytes += bml__card_act_bytes(g->e->n), nrec += g->e->m.nchunks;
  }
  if (act_bytes == 0) return 0;
  if (w->hooks.fail_enqueues > 0) return w->hooks.fail_enqueues--, CL_OUT_OF_RESOURCES;
  /* the records first (rounded up to 64 bytes), then the activations, as planning counted them */
  const size_t in_bytes = (size_t)staging_in_bytes(w, act_bytes, nrec), head = in_bytes - act_bytes;
  size_t at = head, out_rows = 0;
  for (size_t i = 0; i < s->ngroups; i++) {
    group *g = &s->groups[i];
    if (!g->e) continue;
    g->act_off = at, g->out_off = out_rows;
    at += bml__card_act_bytes(g->e->n);
    out_rows += g->e->m.rows;
  }
  int rc = bml__card_buf_reserve(w->card, &w->acts, in_bytes);
  if (rc == 0) rc = bml__card_buf_reserve(w->card, &w->outs, out_rows * sizeof(float));
  sync_allocated(w);
  double t_plan = bml__now();
  size_t launches = 0;
  if (rc == 0 && batched) {
    rc = plan_launches(w, s, nrec, w->acts.host, &launches);
  } else {
    for (size_t i = 0; i < s->ngroups; i++) launches += s->groups[i].e != NULL;
  }
  w->time.plan += bml__now() - t_plan;
  bml__card *c = w->card;
  /* batched, several launches: the main queue for the copies in and the
   * side queues for the launches; else the launches round all queues */
  const size_t want = batched && launches > 1 ? launches + 1 : launches;
  size_t nq = c->nside + 1 < want ? c->nside + 1 : want;
  if (nq == 0) nq = 1;
  cl_command_queue q[BML_MAX_QUEUES];
  q[0] = c->queue;
  for (size_t i = 1; i < nq; i++) q[i] = c->side[i - 1];
  double t_launch = bml__now();
  if (rc == 0 && batched) {
    rc = launch_batched(w, s, q, nq, launches);
  } else if (rc == 0) {
    repack_acts(w, s, 0, s->ngroups, act_bytes);
    cl_event copied_in = NULL;
    rc = bml__card_buf_write_on(c->queue, &w->acts, 0, in_bytes, nq > 1 ? &copied_in : NULL);
    for (size_t i = 1; rc == 0 && copied_in && i < nq; i++) rc = clEnqueueBarrierWithWaitList(q[i], 1, &copied_in, NULL);
    if (copied_in) clReleaseEvent(copied_in);
    double t_up = bml__now();
    w->time.upload += t_up - t_launch;
    if (rc == 0) rc = launch_each(w, s, q, nq, out_rows);
    for (size_t i = 0; rc == 0 && i < nq; i++) rc = clFlush(q[i]);
    w->time.launch += bml__now() - t_up;
  }
  double t_end = bml__now();
  if (s->count >= 64) /* a model's token: where the host's time goes */
    bml__debug(BML_CAT_WORKER, "batch of %zu: plan %.1f us, %zu launches with their copies in and reads %.1f us",
               s->count, (t_launch - t_plan) * 1e6, launches, (t_end - t_launch) * 1e6);
  s->on_card = true;
  if (rc == 0) w->time.launches += launches;
  return rc;
}

/* The card failed: every card row of the submission goes to the CPU. */
static void all_to_cpu(bml_worker *w, submission *s, int err) {
  if (s->on_card) bml__card_finish(w->card);
  release_reads(s);
  card_error(w, err);
  size_t n = 0;
  for (size_t i = 0; i < s->ngroups; i++)
    if (s->groups[i].e) n += s->groups[i].count, s->groups[i].e = NULL;
  count_cpu(&w->count.on_cpu_error, n);
  memset(s->card_rows, 0, s->count * sizeof *s->card_rows);
  s->on_card = false;
  s->timed = false;
}

static int start(bml_worker *w, submission *s) {
  bml__token_park(w->resident); /* a token's kernel holds the card's queue */
  s->begin_time = bml__now();
  int rc = plan(w, s);
  if (rc != 0) return rc;
  s->dispatch_time = bml__now();
  w->time.plan += s->dispatch_time - s->begin_time;
  rc = enqueue_groups(w, s);
  s->ready_time = bml__now();
  w->time.submissions++;
  w->time.enqueue += bml__now() - s->begin_time;
  if (rc != 0) all_to_cpu(w, s, rc);
  else if (s->on_card && s->shape) s->timed = true; /* a single product's trial on the card */
  return 0;
}

/* A read's results into the products' outputs: one copy per product and
 * piece, spread over the pool's threads when there is much to copy (a
 * model's token brings back megabytes of results). */
typedef struct {
  const bml_worker *w;
  const submission *s;
  const readback *rb;
} copy_out;

/* Rows [a, b) of piece pc into the outputs of the products they belong to. */
static void copy_piece(const copy_out *c, const piece *pc, size_t a, size_t b) {
  const group *g = &c->s->groups[pc->group];
  const float *src = (const float *)c->w->outs.host + pc->at;
  const size_t lo = pc->row0 + a, hi = pc->row0 + b; /* in the group's card rows */
  size_t at = 0;                                      /* the group row of product i's first card row */
  for (size_t i = g->first; i < g->first + g->count && at < hi; i++) {
    const size_t rows = c->s->card_rows[i], x = at > lo ? at : lo, y = at + rows < hi ? at + rows : hi;
    if (x < y) memcpy(c->s->p[i].out + (x - at), src + (x - pc->row0), (y - x) * sizeof *src);
    at += rows;
  }
}

/* Floats [lo, hi) of the read (its pieces lie back to back). */
static void copy_slice(const copy_out *c, size_t lo, size_t hi) {
  for (size_t k = c->rb->first; k < c->rb->first + c->rb->count; k++) {
    const piece *pc = &c->s->pieces[k];
    const size_t off = pc->at - c->rb->at;
    if (hi <= off) break;
    const size_t a = lo > off ? lo - off : 0, b = hi - off < pc->rows ? hi - off : pc->rows;
    if (a < b) copy_piece(c, pc, a, b);
  }
}

static void copy_job(void *ctx, int tid, int nthreads) {
  const copy_out *c = ctx;
  size_t per = (c->rb->len + (size_t)nthreads - 1) / (size_t)nthreads;
  size_t lo = per * (size_t)tid, hi = lo + per < c->rb->len ? lo + per : c->rb->len;
  if (lo < hi) copy_slice(c, lo, hi);
}

#define COPY_PARALLEL_FLOATS (64 * 1024) /* below this, one thread copies */

static void scatter(bml_worker *w, const submission *s, const readback *rb) {
  copy_out c = {w, s, rb};
  if (rb->len >= COPY_PARALLEL_FLOATS && bml_pool_threads(w->pool) > 1) bml__pool_run(w->pool, copy_job, &c);
  else copy_slice(&c, 0, rb->len);
}

/* Whether the card is done with the submission: every read complete.
 * With several queues the last read enqueued can end before another
 * queue's; reads once seen complete are not asked again.  False when
 * there is none, or the driver cannot say. */
static bool card_done(submission *s) {
  for (; s->reads_done < s->nreads; s->reads_done++) {
    cl_int state = CL_QUEUED;
    if (clGetEventInfo(s->reads[s->reads_done].done, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof state, &state,
                       NULL) != CL_SUCCESS ||
        state != CL_COMPLETE)
      return false;
  }
  return s->nreads > 0;
}

/* Waits for ev, polling its status for up to `spin` seconds before it
 * sleeps in clWaitForEvents: a decode's group comes back within tens of
 * microseconds, less than a sleep's wake-up takes, and the calling thread
 * has nothing else to do (it costs that thread's CPU for at most `spin`).
 * *was_done: the event was complete at the first look.  Returns
 * CL_SUCCESS, or the error the command ended with or the wait gave. */
static cl_int wait_event(cl_event ev, double spin, bool *was_done) {
  const double until = spin > 0 ? bml__now() + spin : 0;
  for (unsigned i = 0;; i++) {
    cl_int state = CL_QUEUED;
    const cl_int rc = clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof state, &state, NULL);
    if (rc != CL_SUCCESS) return rc;
    if (state < 0) return state; /* the command failed */
    if (i == 0) *was_done = state == CL_COMPLETE;
    if (state == CL_COMPLETE) return CL_SUCCESS;
    if (spin <= 0 || bml__now() > until) break;
    bml__cpu_relax();
  }
  return clWaitForEvents(1, &ev);
}

/* What a submission that ran teaches: the CPU's rate, and the balance of
 * its shape or kind (unless the share is fixed).  t_card: from the
 * dispatch to the card's last result (card_first: it finished first and
 * t_card is only a bound); t_cpu: from the card's part enqueued to the
 * CPU's part done. */
static void learn(bml_worker *w, const submission *s, bool card_first, double t_card, double t_cpu) {
  if (!s->own_cpu) return; /* the caller's time between begin and finish is not the CPU's rows' */
  if (s->cpu_alone) return; /* the pool driven by another thread: the rows ran on this one alone */
  double wg = 0, wc = 0;
  for (size_t i = 0; i < s->count; i++) {
    wg += (double)s->card_rows[i] * (double)s->p[i].n;
    wc += (double)(s->p[i].rows - s->card_rows[i]) * (double)s->p[i].n;
  }
  double cpu_rate = w->cpu_rate;
  if (wc > 0 && t_cpu > 0) w->cpu_rate = wc / t_cpu;
  if (w->share_fixed || !s->balance || !s->on_card || s->uploaded || w->hooks.hold_balance) return;
  /* the groups the card was to take and did not: their CPU work does not
   * follow the share (the card finishing first at every submission once
   * made the learnt rate grow without bound) */
  wc -= s->forced_weights, t_cpu -= s->forced_time;
  if (wc < 0) wc = 0;
  if (t_cpu < 0) t_cpu = 0;
  /* the card first, and the CPU had only those: its bound is theirs */
  if (card_first && wc == 0) return;
  double before = s->balance->share;
  bml__balance_learn(s->balance, wg, wc, card_first, t_card, t_cpu, cpu_rate, w->round_trip);
  if (fabs(s->balance->share - before) >= 0.005)
    bml__debug(BML_CAT_WORKER, "share %.3f -> %.3f: the card %s %.3f ms for %.0f%%, the CPU %.3f ms", before,
               s->balance->share, card_first ? "first, at most" : "took", t_card * 1e3, 100 * wg / (wg + wc),
               t_cpu * 1e3);
}

/* Waits for the card's reads, in order, copying each one's results out as
 * it arrives (while the card computes later launches), and completes every
 * product; on a card error its rows are computed on the pool (out stays
 * complete and exact). */
static int complete(bml_worker *w, submission *s) {
  int rc = 0;
  const double arrived = bml__now(); /* the CPU's part is done */
  bool card_first = false;
  if (s->on_card) {
    int err = CL_SUCCESS;
    card_first = card_done(s);
    /* busy: the last moment the card is known to have been at work (for
     * the limiter; the copies out in between are the host's time) */
    double waited = 0, copied = 0, busy = bml__now();
    for (size_t r = 0; err == CL_SUCCESS && r < s->nreads; r++) {
      bool was_done = false;
      double t0 = bml__now();
      err = w->hooks.fail_waits > 0 ? (w->hooks.fail_waits--, CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
                                    : wait_event(s->reads[r].done, w->wait_spin, &was_done);
      double t = bml__now();
      const cl_int state = was_done ? CL_COMPLETE : CL_QUEUED;
      waited += t - t0;
      if (state != CL_COMPLETE) busy = t;
      if (err == CL_SUCCESS) {
        scatter(w, s, &s->reads[r]);
        copied += bml__now() - t;
      }
    }
    w->time.wait += waited;
    w->time.copy += copied;
    /* the rest: where the card finished first and a batch's CPU part saw
     * it done, its work ended by then, and the rest runs from then, as long
     * as the time from the dispatch to then (the CPU's part after it is not
     * the card's); else from the end known, which a single product's CPU
     * part or a late bml_worker_finish still lengthens (nothing looks at
     * the card then).  The driver's own clock would say more, but profiled
     * queues cost the H200 microseconds a product (doc/WORKER.md). */
    const double done = card_first && s->seen_done > 0 && s->seen_done < busy ? s->seen_done : busy;
    bml__limiter_busy(&w->limiter, done - s->dispatch_time, done);
    release_reads(s);
    size_t on_card = 0;
    for (size_t i = 0; i < s->ngroups; i++) on_card += s->groups[i].e ? s->groups[i].count : 0;
    if (err != CL_SUCCESS) {
      bml__card_finish(w->card); /* nothing of the card's still running */
      /* the card's rows of every product, in one run of the pool */
      size_t np = 0;
      for (size_t i = 0; i < s->count; i++)
        if (s->card_rows[i])
          w->cpu_pieces[np++] = (bml__cpu_piece){s->p[i].wts, s->card_rows[i], s->p[i].n, s->p[i].act, s->p[i].out};
      rc = bml__pool_mat_vec_many(w->pool, w->cpu_pieces, np, NULL, NULL, NULL);
      s->on_card = false; /* the queues are drained already */
      all_to_cpu(w, s, err);
    } else {
      w->count.on_card += on_card;
      w->errors_in_row = 0;
      /* the card's time: measured (it finished last, or the CPU saw it
       * done within a quarter of it), or bounded (by when the CPU saw it
       * done, or was done itself) */
      double end = !card_first ? busy : s->seen_done > 0 ? s->seen_done : arrived;
      double since = s->seen_busy > s->dispatch_time ? s->seen_busy : s->dispatch_time;
      bool measured = !card_first || (s->seen_done > 0 && s->seen_done - since <= 0.25 * (end - s->dispatch_time));
      learn(w, s, !measured, end - s->dispatch_time, arrived - s->ready_time);
    }
  } else
    learn(w, s, false, 0.0, arrived - s->ready_time); /* the CPU's rate alone */
  if (s->timed && !w->share_fixed && s->shape &&
      bml__shape_record(s->shape, s->on_card && s->card_rows[0] > 0, bml__now() - s->begin_time))
    shape_decided(w, s->shape);
  return rc;
}

/* Between a batch's products the CPU looks at the card's reads (at most
 * every WATCH_EVERY seconds, until all are done): when the card finishes
 * first, its time is then known within the CPU's step rather than bounded
 * by the CPU's whole part. */
#define WATCH_EVERY 20e-6

static void watch_card(submission *s) {
  if (!s->on_card || s->seen_done > 0) return;
  double now = bml__now();
  if (now - s->seen_busy < WATCH_EVERY) return;
  if (card_done(s)) s->seen_done = now;
  else s->seen_busy = now;
}

static void watch_tick(void *ctx) { watch_card(ctx); }

/* The CPU's rows of group g's products into pc; returns how many pieces. */
static size_t cpu_pieces(const submission *s, const group *g, bml__cpu_piece *pc) {
  size_t np = 0;
  for (size_t i = g->first; i < g->first + g->count; i++) {
    const bml_product *p = &s->p[i];
    const size_t r0 = s->card_rows[i];
    if (r0 < p->rows)
      pc[np++] = (bml__cpu_piece){p->wts + r0 * (p->n / BML_Q1_0_BLOCK), p->rows - r0, p->n, p->act, p->out + r0};
  }
  return np;
}

/* The CPU's rows: those of the groups the card shares in one run of the
 * pool (a run a product cost a token of small CPU parts milliseconds), then
 * each forced group's in its own, timed apart (its time does not follow the
 * share). */
static int cpu_rows(bml_worker *w, submission *s) {
  size_t np = 0;
  for (size_t k = 0; k < s->ngroups; k++)
    if (!s->groups[k].forced) np += cpu_pieces(s, &s->groups[k], w->cpu_pieces + np);
  bool alone = false;
  int rc = bml__pool_mat_vec_many(w->pool, w->cpu_pieces, np, watch_tick, s, &alone);
  s->cpu_alone |= alone;
  for (size_t k = 0; rc == 0 && k < s->ngroups; k++) {
    const group *g = &s->groups[k];
    if (!g->forced) continue;
    const double t0 = bml__now();
    np = cpu_pieces(s, g, w->cpu_pieces);
    rc = bml__pool_mat_vec_many(w->pool, w->cpu_pieces, np, watch_tick, s, &alone);
    s->cpu_alone |= alone;
    for (size_t i = 0; i < np; i++) s->forced_weights += (double)w->cpu_pieces[i].rows * (double)w->cpu_pieces[i].n;
    s->forced_time += bml__now() - t0;
  }
  return rc;
}

/* ---- the public calls --------------------------------------------------------------- */

static int check_product(const bml_product *p) {
  if (!p->name) return BML_EINVAL;
  return bml__q1_0_check(p->wts, p->rows, p->n, p->act, p->out);
}

/* bml_worker_begin; own_cpu: the worker computes the CPU's rows itself. */
static int begin(bml_worker *w, const char *name, const bml_block_q1_0 *wts, size_t rows, size_t n,
                 const bml_block_q8_0 *act, size_t *card_rows, bool own_cpu) {
  if (!w || !card_rows || !name) return BML_EINVAL;
  bml_product p = {name, wts, rows, n, act, NULL /* finish's */};
  int rc = bml__q1_0_check_shape(wts, rows, n, act);
  if (rc != 0) return rc;
  if (!enter(w)) return BML_EBUSY;
  if (w->cur.active) {
    rc = in_flight_error(w);
    leave(w);
    return rc;
  }
  w->single = p;
  submission *s = &w->cur;
  memset(s, 0, sizeof *s);
  s->p = &w->single;
  s->count = 1;
  s->own_cpu = own_cpu;
  s->owner = pthread_self();
  s->shape = find_shape(w, rows, n);
  s->balance = s->shape ? &s->shape->balance : NULL;
  rc = s->shape ? start(w, s) : BML_ENOMEM;
  if (rc == 0) {
    s->active = true;
    *card_rows = s->card_rows[0];
  }
  leave(w);
  return rc;
}

int bml_worker_begin(bml_worker *w, const char *name, const bml_block_q1_0 *wts, size_t rows, size_t n,
                     const bml_block_q8_0 *act, size_t *card_rows) {
  return begin(w, name, wts, rows, n, act, card_rows, false);
}

/* bml_worker_finish; own: bml_worker_mat_vec finishing its own product,
 * which no other thread's finish may take (its rows would go to that
 * thread's out, and the call that began it would find none in flight). */
static int finish(bml_worker *w, float *out, bool own) {
  if (!w || !out) return BML_EINVAL;
  if (w->hooks.busy_finishes > 0) return w->hooks.busy_finishes--, BML_EBUSY;
  if (!enter(w)) return BML_EBUSY;
  if (!w->cur.active || (w->cur.own_cpu && !own)) {
    const int rc = w->cur.active ? BML_EBUSY : BML_ESTATE;
    leave(w);
    return rc;
  }
  /* the card's rows land in out, and after an error the CPU computes them
   * from wts and act; the caller's rows are there too (whatever the split,
   * the same answer) */
  const bml_product *p = &w->single;
  if (bml__q1_0_check(p->wts, p->rows, p->n, p->act, out) != 0) {
    leave(w);
    return BML_EINVAL;
  }
  w->single.out = out;
  int rc = 0;
  if (w->child) { /* nothing of the card's, nor a timing of the parent's, is used here */
    say_child(w);
    if (w->cur.on_card) /* begun in the parent: its card rows are computed here */
      rc = bml_q1_0_mat_vec(p->wts, w->cur.card_rows[0], p->n, p->act, out);
    w->cur.on_card = false, w->cur.nreads = 0; /* the parent's events, left alone */
  } else {
    rc = complete(w, &w->cur);
  }
  w->cur.active = false;
  leave(w);
  return rc;
}

int bml_worker_finish(bml_worker *w, float *out) { return finish(w, out, false); }

int bml_worker_mat_vec(bml_worker *w, const char *name, const bml_block_q1_0 *wts, size_t rows, size_t n,
                       const bml_block_q8_0 *act, float *out) {
  if (!w || !name) return BML_EINVAL;
  int rc = bml__q1_0_check(wts, rows, n, act, out);
  if (rc != 0) return rc;
  size_t card_rows = 0;
  rc = begin(w, name, wts, rows, n, act, &card_rows, true);
  if (rc != 0) return rc;
  if (w->hooks.in_mat_vec) w->hooks.in_mat_vec(w->hooks.in_mat_vec_ctx);
  const bml__cpu_piece pc = {wts + card_rows * (n / BML_Q1_0_BLOCK), rows - card_rows, n, act, out + card_rows};
  bool alone = false;
  int cpu = rows > card_rows ? bml__pool_mat_vec_many(w->pool, &pc, 1, NULL, NULL, &alone) : 0;
  w->cur.cpu_alone = alone; /* this thread's product: complete() reads it in finish */
  /* the product must not stay in flight: a finish that met another thread's
   * short call (status, share) is tried again */
  while ((rc = finish(w, out, true)) == BML_EBUSY) sched_yield();
  return cpu ? cpu : rc;
}

int bml_worker_mat_vec_batch(bml_worker *w, const bml_product *products, size_t count) {
  if (!w || (!products && count)) return BML_EINVAL;
  for (size_t i = 0; i < count; i++) {
    int rc = check_product(&products[i]);
    if (rc != 0) { /* the return says what, this says which */
      bml__debug(BML_CAT_WORKER, "batch of %zu refused: product %zu (\"%s\", %zux%zu): %s", count, i,
                 products[i].name ? products[i].name : "(no name)", products[i].rows, products[i].n,
                 bml_strerror(rc));
      return rc;
    }
  }
  if (count == 0) return 0;
  if (!enter(w)) return BML_EBUSY;
  const int rc = bml__worker_batch_entered(w, products, count);
  leave(w);
  return rc;
}

int bml__worker_batch_entered(bml_worker *w, const bml_product *products, size_t count) {
  if (w->cur.active) return in_flight_error(w);
  submission *s = &w->cur;
  memset(s, 0, sizeof *s);
  s->p = products;
  s->count = count;
  s->own_cpu = true;
  s->owner = pthread_self();
  s->balance = find_kind(w, products, count);
  int rc = start(w, s);
  double t0 = bml__now();
  int cpu = rc == 0 ? cpu_rows(w, s) : 0;
  w->time.cpu += bml__now() - t0;
  if (rc == 0) rc = complete(w, s);
  return cpu ? cpu : rc;
}

/* ---- open: verify, calibrate -------------------------------------------------------- */

/* Best of CAL_RUNS of m's product (rows) on the card with its wait, after
 * one untimed. */
static int best_card_seconds(bml_worker *w, const bml__card_matrix *m, size_t rows, const bml_block_q8_0 *act,
                             float *out, double *best) {
  int rc = 0;
  *best = 1e30;
  for (int i = 0; rc == 0 && i <= CAL_RUNS; i++) {
    double t0 = bml__now();
    rc = bml__card_product(w->card, &w->build, kernel_for(w, rows), 0, m, act, &w->acts, &w->outs, out);
    double t1 = bml__now();
    if (i > 0 && t1 - t0 < *best) *best = t1 - t0;
  }
  return rc;
}

/* Best of CAL_RUNS of one CAL_ROWS x CAL_N product on the card and on the
 * pool, each after one untimed, and of a CAL_TRIP_ROWS x CAL_N product on
 * the card (its round trip: w->round_trip). */
static int calibrate(bml_worker *w, double *card_s, double *cpu_s) {
  const size_t rows = CAL_ROWS, n = CAL_N;
  bml_block_q1_0 *wts = malloc(rows * (n / BML_Q1_0_BLOCK) * sizeof *wts);
  bml_block_q8_0 *act = malloc(n / BML_Q8_0_BLOCK * sizeof *act);
  float *out = malloc(rows * sizeof *out);
  uint64_t seed = 0xca11b7a7e;
  bml__card_matrix m = {0}, trip = {0};
  int rc = wts && act && out ? 0 : BML_ENOMEM;
  if (rc == 0) {
    bml__gen_q1_0(&seed, wts, rows, n, true);
    rc = bml__gen_q8_0(&seed, act, n, true);
  }
  bml__rows_part part = {wts, rows}, small = {wts, CAL_TRIP_ROWS};
  if (rc == 0) rc = bml__card_matrix_upload(w->card, &part, 1, n, true, &m);
  if (rc == 0) rc = bml__card_matrix_upload(w->card, &small, 1, n, true, &trip);
  /* Each side is timed in a run of its own, after an untimed product: a
   * CPU product timed right after a card's wait found the pool's threads
   * asleep, or the driver's threads still spinning, and moved 3-6x between
   * opens (0.30-0.95 ms on PoCL here, 0.05-0.31 ms on the H200). The CPU
   * goes first, before the driver's threads have work. */
  *card_s = *cpu_s = 1e30;
  for (int i = 0; rc == 0 && i <= CAL_RUNS; i++) {
    double t0 = bml__now();
    rc = bml_pool_q1_0_mat_vec(w->pool, wts, rows, n, act, out);
    double t1 = bml__now();
    if (i > 0 && t1 - t0 < *cpu_s) *cpu_s = t1 - t0;
  }
  if (rc == 0 && bml__oracle_get_hooks()->fail_calibration) rc = CL_OUT_OF_RESOURCES;
  if (rc == 0) rc = best_card_seconds(w, &m, rows, act, out, card_s);
  double best_trip = 1e30;
  if (rc == 0) rc = best_card_seconds(w, &trip, CAL_TRIP_ROWS, act, out, &best_trip);
  if (rc == 0) w->round_trip = best_trip;
  bml__card_matrix_free(w->card, &trip);
  bml__card_matrix_free(w->card, &m);
  free(wts), free(act), free(out);
  return rc;
}

/* ---- open: the worker's own batches, checked on the card ----------------------------
 *
 * The oracle checks each kernel, batched ones included, on the card's own
 * queue.  A batch runs otherwise: its activations are copied in by
 * prefixes on that queue while earlier launches run on the side queues,
 * several launches write one results buffer and each one's results are
 * read back as it ends.  OpenCL leaves a buffer so shared between queues
 * undefined (QUEUES_DEFAULT above), and the scatter of the results is the
 * worker's own.  So before the card takes a product the open runs a small
 * model's batch through this very path, a launch per group, with each
 * batched kernel, and compares every row with the CPU kernel's bits.
 * Other bits on several queues: one queue, checked again; other bits on
 * one queue, or the card failing to take the batch: the card is not used. */
#define CHECK_LAYERS 2
#define CHECK_PER_LAYER 7
#define CHECK_PRODUCTS (CHECK_LAYERS * CHECK_PER_LAYER)
#define CHECK_LAYER_ACTS 4 /* activations a layer of the check's model has (check_layer's act) */

/* A layer of the check's model (hidden 512, key/value 128, intermediate
 * 1536): q, k and v share one activation, gate and up another. */
static const struct {
  const char *name;
  size_t rows, n;
  int act; /* the layer's activation: 0 (the normed hidden state), 1 (attention), 2 (normed), 3 (the MLP's) */
} check_layer[CHECK_PER_LAYER] = {{"q", 512, 512, 0},    {"k", 128, 512, 0},  {"v", 128, 512, 0},
                                  {"o", 512, 512, 1},    {"gate", 1536, 512, 2}, {"up", 1536, 512, 2},
                                  {"down", 512, 1536, 3}};

typedef struct {
  bml_product p[CHECK_PRODUCTS];
  char names[CHECK_PRODUCTS][24];
  bml_block_q1_0 *wts;
  bml_block_q8_0 *acts;
  float *want, *got;
} batch_check;

static void check_free(batch_check *b) { free(b->wts), free(b->acts), free(b->want), free(b->got); }

/* The check's products again, a batch a group (its products that share an
 * activation) as a decode submits them: each group one launch, its
 * results awaited before the next.  Returns 0 or an error of a batch. */
static int round_trips(bml_worker *t, batch_check *b, size_t rows) {
  memset(b->got, 0xff, rows * sizeof *b->got);
  int rc = 0;
  for (size_t i = 0, j; rc == 0 && i < CHECK_PRODUCTS; i = j) {
    for (j = i + 1; j < CHECK_PRODUCTS && b->p[j].act == b->p[i].act; j++) continue;
    rc = bml_worker_mat_vec_batch(t, b->p + i, j - i);
  }
  return rc;
}

/* The check's products: random weights and activations (-128 quants among
 * them) in the first layer, layer-shaped ones in the second; the CPU
 * kernel's results in b->want. */
static int check_make(batch_check *b) {
  size_t blocks = 0, act_blocks = 0, rows = 0;
  for (int i = 0; i < CHECK_PER_LAYER; i++) {
    blocks += check_layer[i].rows * (check_layer[i].n / BML_Q1_0_BLOCK);
    rows += check_layer[i].rows;
  }
  size_t act_n[CHECK_LAYER_ACTS] = {0};
  for (int i = 0; i < CHECK_PER_LAYER; i++) act_n[check_layer[i].act] = check_layer[i].n;
  for (int a = 0; a < CHECK_LAYER_ACTS; a++) act_blocks += act_n[a] / BML_Q8_0_BLOCK;
  memset(b, 0, sizeof *b);
  b->wts = malloc(CHECK_LAYERS * blocks * sizeof *b->wts);
  b->acts = malloc(CHECK_LAYERS * act_blocks * sizeof *b->acts);
  b->want = malloc(CHECK_LAYERS * rows * sizeof *b->want);
  b->got = malloc(CHECK_LAYERS * rows * sizeof *b->got);
  if (!b->wts || !b->acts || !b->want || !b->got) return BML_ENOMEM;
  uint64_t seed = 0xba7c4ec7;
  bml_block_q1_0 *wt = b->wts;
  bml_block_q8_0 *at = b->acts;
  float *want = b->want, *got = b->got;
  int rc = 0;
  for (int layer = 0; rc == 0 && layer < CHECK_LAYERS; layer++) {
    const bool shaped = layer % 2 == 1;
    bml_block_q8_0 *act[CHECK_LAYER_ACTS];
    for (int a = 0; rc == 0 && a < CHECK_LAYER_ACTS; a++) {
      act[a] = at;
      rc = bml__gen_q8_0(&seed, at, act_n[a], shaped);
      at += act_n[a] / BML_Q8_0_BLOCK;
    }
    for (int i = 0; rc == 0 && i < CHECK_PER_LAYER; i++) {
      const size_t r = check_layer[i].rows, n = check_layer[i].n, k = (size_t)layer * CHECK_PER_LAYER + (size_t)i;
      bml__gen_q1_0(&seed, wt, r, n, shaped);
      snprintf(b->names[k], sizeof b->names[k], "check.%d.%s", layer, check_layer[i].name);
      b->p[k] = (bml_product){b->names[k], wt, r, n, act[check_layer[i].act], got};
      rc = bml_q1_0_mat_vec(wt, r, n, act[check_layer[i].act], want);
      wt += r * (n / BML_Q1_0_BLOCK), want += r, got += r;
    }
  }
  return rc;
}

/* One round of the check: the batch on w's card with each batched kernel,
 * through a worker of its own that gives the card every row.  Returns 0,
 * BML_EVERIFY (why says what), BML_ENOMEM or an error of the batch. */
static int check_round(bml_worker *w, batch_check *b, unsigned round, char *why, size_t len, bool *bits) {
  static const bml__kernel_id kernels[] = {BML_KERNEL_MAT_VEC_L, BML_KERNEL_MAT_VEC_LR};
  const unsigned spoil = bml__oracle_get_hooks()->spoil_batch_check;
  size_t rows = 0;
  for (size_t i = 0; i < CHECK_PRODUCTS; i++) rows += b->p[i].rows;
  int rc = 0;
  for (size_t k = 0; rc == 0 && k < BML_ARRAY_SIZE(kernels); k++) {
    bml_worker *t = calloc(1, sizeof *t);
    if (!t) return BML_ENOMEM;
    t->pool = w->pool, t->card = w->card, t->build = w->build, t->device = w->device;
    t->share = 1.0, t->share_fixed = true;
    t->acts.zero_copy = w->acts.zero_copy, t->outs.zero_copy = w->outs.zero_copy, t->wait_spin = w->wait_spin;
    atomic_flag_clear(&t->driving);
    bml__limiter_init(&t->limiter, 1.0, w->card->global_mem, w->card->host_unified);
    t->hooks.kernel = kernels[k];
    t->errors_in_row = INT_MIN / 2; /* it never retires the card: an error refuses it (below) */
    const size_t queues = w->card->nside + 1;
    w->card->run_bytes = 1; /* a launch per record */
    memset(b->got, 0xff, rows * sizeof *b->got);
    const double t0 = bml__now();
    rc = bml_worker_mat_vec_batch(t, b->p, CHECK_PRODUCTS);
    const double took = bml__now() - t0;
    const uint64_t launches = t->time.launches;
    w->card->run_bytes = 0;
    if (rc == 0 && (spoil >> round) & 1u) {
      uint32_t u;
      memcpy(&u, &b->got[rows / 2], sizeof u);
      u ^= 1u;
      memcpy(&b->got[rows / 2], &u, sizeof u);
    }
    /* the batch right: then as a decode runs them, a batch a group */
    const bool trips = rc == 0 && t->count.on_card == CHECK_PRODUCTS && bml__first_difference(b->want, b->got, rows) < 0;
    if (trips) rc = round_trips(t, b, rows);
    char what[160]; /* what a refusal names */
    snprintf(what, sizeof what, "the worker's batch%s with %s on %zu queue%s, %s", trips ? "es of one group" : "",
             bml__kernel_name(kernels[k]), queues, queues == 1 ? "" : "s", buffers_name(t));
    if (rc == 0 && t->count.on_card != (trips ? 2 : 1) * CHECK_PRODUCTS) {
      snprintf(why, len, "%s: the card did not take it (%s)", what,
               t->count.on_cpu_error ? "an OpenCL error; BANKML_DEBUG=worker names it" : "not enough memory");
      rc = BML_EVERIFY;
    }
    const float *want = b->want, *got = b->got;
    for (size_t i = 0; rc == 0 && i < CHECK_PRODUCTS; want += b->p[i].rows, got += b->p[i].rows, i++) {
      const long bad = bml__first_difference(want, got, b->p[i].rows);
      if (bad < 0) continue;
      snprintf(why, len, "%s: %s (%zux%zu) row %ld differs (cpu 0x%08x, card 0x%08x)", what, b->p[i].name, b->p[i].rows,
               b->p[i].n, bad, bml__float_bits(want[bad]), bml__float_bits(got[bad]));
      rc = BML_EVERIFY;
      *bits = true;
    }
    if (rc == 0)
      bml__debug(BML_CAT_WORKER,
                 "\"%s\": the worker's batch with %s, %d products in %" PRIu64 " launches on %zu queue%s, %s, "
                 "and a batch a group: bit-exact (%.2f ms)",
                 w->card->name, bml__kernel_name(kernels[k]), CHECK_PRODUCTS, launches, queues,
                 queues == 1 ? "" : "s", buffers_name(t), took * 1e3);
    free_state(t);
    free(t);
  }
  return rc;
}

/* The check's products as a resident token (token.c), twice round, every
 * row compared: a card whose resident tokens give other bits, or do not
 * run resident, runs them as batches (said once).  Returns 0 or
 * BML_ENOMEM. */
static int check_tokens(bml_worker *w, batch_check *b) {
  w->tokens_resident = true;
  const bml__build *build;
  size_t nwg;
  uint32_t spins;
  if (!bml__worker_token_card(w, &build, &nwg, &spins)) return w->tokens_resident = false, 0;
  size_t rows = 0;
  for (size_t i = 0; i < CHECK_PRODUCTS; i++) rows += b->p[i].rows;
  bml_token *t = NULL;
  int rc = bml_worker_token_open(w, b->p, CHECK_PRODUCTS, &t);
  if (rc == 0) bml__token_check_only(t);
  char why[200] = "";
  for (int round = 0; rc == 0 && !why[0] && round < 2; round++) {
    memset(b->got, 0xff, rows * sizeof *b->got);
    for (size_t g = 0; rc == 0 && g < bml_token_groups(t); g++) rc = bml_token_run(t, g);
    if (rc == 0 && !bml_token_resident(t))
      snprintf(why, sizeof why, "it did not run resident (BANKML_DEBUG=worker says why)");
    const float *want = b->want, *got = b->got;
    for (size_t i = 0; rc == 0 && !why[0] && i < CHECK_PRODUCTS; want += b->p[i].rows, got += b->p[i].rows, i++) {
      long bad = bml__first_difference(want, got, b->p[i].rows);
      if (bad < 0 && bml__oracle_get_hooks()->spoil_token_check) bad = 0;
      if (bad >= 0)
        snprintf(why, sizeof why, "%s (%zux%zu) row %ld differs (cpu 0x%08x, card 0x%08x)", b->p[i].name,
                 b->p[i].rows, b->p[i].n, bad, bml__float_bits(want[bad]), bml__float_bits(got[bad]));
    }
  }
  bml_token_close(t);
  /* the check's products are the open's, not the engine's: uncounted */
  memset(&w->count, 0, sizeof w->count);
  memset(&w->time, 0, sizeof w->time);
  w->errors_in_row = 0;
  if (rc == BML_ENOMEM) return rc;
  if (rc != 0 && !why[0]) snprintf(why, sizeof why, "%s", bml_strerror(rc));
  if (why[0]) {
    bml__warn(BML_CAT_WORKER, "\"%s\": a decode's token resident on the card: %s; tokens run as batches",
              w->card->name, why);
    w->tokens_resident = false;
    w->tokens_unsure = rc != 0 || !strstr(why, " differs ("); /* not for other bits: not to remember */
  } else {
    bml__debug(BML_CAT_WORKER, "\"%s\": a decode's token resident on the card, %zu work-groups: bit-exact",
               w->card->name, nwg);
  }
  return 0;
}

/* The check at open (above).  Returns 0 (the card may be used, perhaps on
 * one queue now), BML_EVERIFY (it may not: why says why; *bits: a row
 * differed) or BML_ENOMEM. */
static int check_batches(bml_worker *w, char *why, size_t len, bool *bits) {
  batch_check b;
  why[0] = '\0';
  *bits = false;
  int rc = check_make(&b);
  unsigned round = 0;
  if (rc == 0) rc = check_round(w, &b, round++, why, len, bits);
  if (rc != 0 && rc != BML_ENOMEM && (w->acts.zero_copy || w->outs.zero_copy)) {
    bml__warn(BML_CAT_WORKER, "\"%s\": %s; its activations and results are copied", w->card->name,
              why[0] ? why : bml_strerror(rc));
    set_buffers(w, false, false);
    why[0] = '\0';
    *bits = false;
    rc = check_round(w, &b, round++, why, len, bits);
  }
  if (rc != 0 && rc != BML_ENOMEM && w->card->nside > 0) {
    bml__warn(BML_CAT_WORKER, "\"%s\": %s; it runs on one queue", w->card->name,
              why[0] ? why : bml_strerror(rc));
    bml__card_drop_side_queues(w->card);
    why[0] = '\0';
    *bits = false;
    rc = check_round(w, &b, round++, why, len, bits);
  }
  if (rc == 0) rc = check_tokens(w, &b);
  check_free(&b);
  if (rc != 0 && rc != BML_ENOMEM && rc != BML_EVERIFY) {
    if (!why[0]) snprintf(why, len, "the worker's batch failed on the card: %s", bml_strerror(rc));
    rc = BML_EVERIFY;
  }
  return rc;
}

/* How a submission's activations and results travel, and how its waits
 * wait.  Zero-copy both ways where the card shares the host's memory (an
 * integrated GPU, a software device): nothing is copied.  On NVIDIA's
 * driver, where it places buffers in host memory (cl_nv_create_buffer),
 * the results are zero-copy (the kernels write them over the bus) and the
 * activations copied: every work-group reads the whole activation, which
 * over the bus took a bonsai-8b token with round trips from 4.1-4.5 ms to
 * 12.4-14.4 ms on the H200, where zero-copy results took it from 4.9-5.2
 * to 4.1-4.5 (tools/harness/tripfit.c; doc/WORKER.md).  Copies elsewhere.  The open's check runs the
 * batches through these, and falls back to copies where they give other
 * bits.  A wait polls its event for WAIT_SPIN first, except on a software
 * device, whose own threads would lose the core it spins on. */
static void choose_transfers(bml_worker *w, bool software) {
  const bool unified = w->card->host_unified;
  set_buffers(w, unified, unified || w->card->create_buffer_nv);
  w->wait_spin = software ? 0 : WAIT_SPIN;
}

int bml__worker_queues(int asked, bool nvidia_driver, bool software) {
  if (software) return 1;
  return asked > 0 ? asked : nvidia_driver ? QUEUES_DEFAULT : 1;
}

/* The batch check, or the one remembered for the card's queues.  What is
 * remembered can only take away (queues, zero-copy transfers, resident
 * tokens), and what it leaves on is confirmed on the card at each open:
 * a round of the check through the transfers kept (where any is
 * zero-copy) and a resident token (where tokens are); a failure there
 * runs the whole check. */
static int batches(bml_worker *w, bml__verdict *v, char *why, size_t len, bool *bits) {
  const size_t queues = w->card->nside + 1;
  bml__batch_verdict kept;
  *bits = false;
  if (bml__verdict_batches(v, queues, &kept)) {
    if (kept.kept < queues) bml__card_drop_side_queues(w->card); /* several gave other bits, one did not */
    set_buffers(w, w->acts.zero_copy && kept.acts_zero_copy, w->outs.zero_copy && kept.outs_zero_copy);
    batch_check b;
    int rc = 0;
    if (w->acts.zero_copy || w->outs.zero_copy || kept.tokens) {
      rc = check_make(&b);
      if (rc == 0 && (w->acts.zero_copy || w->outs.zero_copy)) rc = check_round(w, &b, 0, why, len, bits);
      if (rc == 0 && kept.tokens) rc = check_tokens(w, &b);
      check_free(&b);
    }
    if (rc == BML_ENOMEM) return rc;
    if (rc == 0 && (!kept.tokens || w->tokens_resident)) {
      w->batches_remembered = true;
      bml__debug(BML_CAT_WORKER, "\"%s\": the remembered check of its batches (%zu queue%s, %s%s) confirmed on the card",
                 w->card->name, w->card->nside + 1, w->card->nside ? "s" : "", buffers_name(w),
                 kept.tokens ? ", resident tokens" : "");
      return 0;
    }
    bml__warn(BML_CAT_WORKER, "\"%s\": the remembered check of its batches did not hold (%s): checking again",
              w->card->name, why[0] ? why : "a resident token");
    choose_transfers(w, w->devices->dev[w->device].software != NULL);
    why[0] = '\0';
    *bits = false;
  }
  int rc = check_batches(w, why, len, bits);
  const bml__batch_verdict found = {w->card->nside + 1, w->acts.zero_copy, w->outs.zero_copy, w->tokens_resident};
  if (rc == 0 && !w->tokens_unsure) bml__verdict_set_batches(v, queues, &found);
  return rc;
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
  int rc = bml__engine_devices(s, &devs, &ndevs);
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

double bml__calibrated_share(double card_s, double cpu_s) {
  return cpu_s / (card_s + cpu_s); /* card rate / (card rate + CPU rate), the rates 1/time */
}

static int decide_share(bml_worker *w, bml__verdict *v) {
  if (w->share_fixed) return 0;
  double card_s, cpu_s;
  const int threads = bml_pool_threads(w->pool);
  w->calibration_remembered = bml__verdict_calibration(v, threads, &card_s, &cpu_s, &w->round_trip);
  if (!w->calibration_remembered) {
    int rc = calibrate(w, &card_s, &cpu_s);
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
  choose_transfers(w, w->devices->dev[w->device].software != NULL);
  char why[400];
  bool bits;
  int rc = batches(w, v, why, sizeof why, &bits);
  if (rc == BML_EVERIFY) {
    not_used(&logged_unverified, "\"%s\" NOT VERIFIED \u2014 %s", w->card->name, why);
    if (bits) bml__verdict_refuse(v, why);
    rc = 1; /* no worker */
  }
  if (rc == 0) rc = decide_share(w, v);
  sync_allocated(w); /* the calibration's staging */
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
  bml__fork_watch_add(&w->watch, worker_in_child, w);
  *out = w;
  return 0;
}

/* ---- settings, status, release -------------------------------------------------------- */

int bml_worker_set_share(bml_worker *w, double share) {
  if (!w) return BML_EINVAL;
  if (!(share >= 0.0 && share <= 1.0)) return BML_ERANGE;
  if (!enter(w)) return BML_EBUSY;
  int rc = w->cur.active ? in_flight_error(w) : 0;
  if (rc == 0) {
    w->share = share;
    w->share_fixed = true;
  }
  leave(w);
  return rc;
}

int bml_worker_set_limit(bml_worker *w, double limit) {
  if (!w) return BML_EINVAL;
  if (!(limit >= BML_LIMIT_MIN && limit <= 1.0)) return BML_ERANGE;
  if (!enter(w)) return BML_EBUSY;
  w->limiter.limit = limit;
  w->limiter.rest_until = 0;
  leave(w);
  return 0;
}

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
      "cpu_weights_per_second", w->cpu_rate, "round_trip_seconds", w->round_trip, "transfers", buffers_name(w),
      "wait_spin_seconds", w->wait_spin, "seconds",
      "submissions", (json_int_t)w->time.submissions, "enqueue", w->time.enqueue, "plan", w->time.plan, "upload",
      w->time.upload, "launch", w->time.launch, "flush", w->time.flush, "cpu", w->time.cpu, "wait", w->time.wait, "copy_out", w->time.copy,
      "rest", w->time.rest);
}

/* Each shape's state and share, and each kind of batch's share (the ones
 * in use: the fixed share when there is one). */
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
    if (json_array_append_new(shapes, json_pack("{s:I, s:I, s:s, s:f}", "rows", (json_int_t)sh->rows, "n",
                                                (json_int_t)sh->n, "state", state, "share",
                                                w->share_fixed ? w->share : sh->balance.share)) != 0)
      return json_decref(o), NULL;
  }
  for (size_t i = 0; i < w->nkinds && i < KINDS_MAX; i++) {
    const batch_kind *k = &w->kinds[i];
    if (json_array_append_new(kinds, json_pack("{s:I, s:I, s:f, s:f}", "products", (json_int_t)k->count, "rows",
                                               (json_int_t)k->rows, "weights", k->weights, "share",
                                               w->share_fixed ? w->share : k->balance.share)) != 0)
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

/* Whether the product in flight has a group on entry e. */
static bool in_flight(const bml_worker *w, const entry *e) {
  for (size_t i = 0; w->cur.active && i < w->cur.ngroups; i++)
    if (w->cur.groups[i].e == e) return true;
  return false;
}

static void release_all(bml_worker *w) {
  bml__tokens_drop(w->tokens); /* their kernels parked, their matrices freed */
  if (w->card) bml__card_finish(w->card); /* a product in flight keeps its staged rows */
  /* the matrices are forgotten too (an engine that loads model after model
   * would otherwise keep every name it ever used, and look each up), except
   * those of a product in flight, whose groups point at them */
  size_t kept = 0;
  for (size_t i = 0; i < w->nentries; i++) {
    entry *e = w->entries[i];
    drop_matrix(w, e);
    e->cpu_only = false;
    if (in_flight(w, e)) w->entries[kept++] = e;
    else free_entry(e);
  }
  w->nentries = kept;
  /* a product in flight keeps its results: they were read into outs' host
   * staging, which is only freed when no product is in flight */
  bml__card_buf_free(&w->acts);
  if (!w->cur.active) bml__card_buf_free(&w->outs);
  sync_allocated(w);
}

void bml_worker_release(bml_worker *w) {
  if (!w || w->child) return; /* the card's buffers are the parent's */
  enter_waiting(w); /* another thread is inside a call: wait it out */
  release_all(w);
  leave(w);
}

/* Frees what w holds on the card and on the heap, but not the card, its
 * build and the devices (a worker of the open's check shares them). */
static void free_state(bml_worker *w) {
  w->cur.active = false;
  if (!w->child) {
    release_all(w);
    release_reads(&w->cur); /* a product begun and never finished: the card is drained now */
  }
  for (size_t i = 0; i < w->nentries; i++) free_entry(w->entries[i]);
  free(w->entries);
  free(w->shapes);
  free(w->card_rows);
  free(w->groups);
  free(w->cpu_pieces);
  free(w->items);
  free(w->recs);
  free(w->runs);
  free(w->pieces);
  free(w->piece_src);
  free(w->reads);
}

void bml_worker_close(bml_worker *w) {
  if (!w) return;
  bml__fork_watch_remove(&w->watch);
  if (w->torn) { /* its lists may be half changed: left, with the card's objects */
    free(w);
    return;
  }
  bml__tokens_detach(w->tokens);
  free_state(w);
  if (!w->child) { /* in a child the card's objects are the parent's: left as they are */
    bml__build_release(&w->build);
    bml__card_close(w->card);
  }
  bml_devices_free(w->devices);
  free(w);
}

/* ---- tokens (token.c) ---------------------------------------------------------------------- */

bool bml__worker_enter(bml_worker *w) { return enter(w); }
void bml__worker_leave(bml_worker *w) { leave(w); }

/* A resident launch runs a work-group on each compute unit (all held at
 * once: a launch's work-groups wait for each other), one on a software
 * device (whose threads run work-groups in turn).  Its first work-group
 * waits for the next group this long before it gives up (the host then
 * launches it again when the group comes): on NVIDIA's build, microseconds
 * of the card's clock (cl/q1_0.cl); elsewhere reads of host memory (2^30 in
 * the host's own memory: seconds, for a software device's thread may wait
 * long for a core while the host's threads hold them). */
#define TOKEN_SPIN_US 50000u
#define TOKEN_SPINS_BUS (1u << 20)
#define TOKEN_SPINS_HOST (1u << 30)

bml__card *bml__worker_token_card(bml_worker *w, const bml__build **build, size_t *nwg, uint32_t *spins) {
  if (!w->card || w->retired || w->child || !w->tokens_resident || !w->build.token) return NULL;
  if (!w->card->create_buffer_nv && !w->card->host_unified) return NULL; /* no memory both reach */
  const bool software = w->devices->dev[w->device].software != NULL;
  *build = &w->build;
  *nwg = software ? 1 : w->card->max_groups / BML_GROUPS_PER_UNIT;
  if (*nwg == 0) *nwg = 1;
  *spins = w->card->nvidia_build ? TOKEN_SPIN_US : w->card->create_buffer_nv ? TOKEN_SPINS_BUS : TOKEN_SPINS_HOST;
  return w->card;
}

bool bml__worker_token_fits(bml_worker *w, uint64_t bytes) {
  const uint64_t avail = w->limiter.integrated ? bml__mem_available() : 0;
  return bml__limiter_fits(&w->limiter, bytes, avail);
}

void bml__worker_token_hold(bml_worker *w, int64_t bytes) {
  w->token_bytes = (uint64_t)((int64_t)w->token_bytes + bytes);
  sync_allocated(w);
}

void bml__worker_set_resident(bml_worker *w, bml_token *t) { w->resident = t; }

void bml__worker_token_ran(bml_worker *w, size_t products, int err, const double sec[BML_TOKEN_PHASES]) {
  if (err == 0) {
    w->count.on_card += products;
    w->errors_in_row = 0;
  } else if (err == BML_EVERIFY) {
    w->count.on_cpu_decided += products;
  } else if (err != BML_ENOMEM) {
    card_error(w, err);
  }
  w->time.submissions++;
  w->time.upload += sec[0], w->time.launch += sec[1], w->time.wait += sec[2], w->time.copy += sec[3];
  w->time.cpu += sec[4];
  w->time.enqueue += sec[0] + sec[1];
}

int bml__worker_token_where(const bml_worker *w) {
  if (!w->share_fixed) return 0;
  return w->share >= BML_SHARE_ALONE ? 1 : w->share < BML_SHARE_MIN ? 2 : 3;
}

bml_pool *bml__worker_pool(bml_worker *w) { return w->pool; }

double bml__worker_token_seconds(const bml_worker *w, bool on_card, double measured) {
  const double fixed = w->hooks.token_seconds[on_card ? 0 : 1];
  return fixed > 0 ? fixed : measured;
}

bool bml__worker_token_fault(bml_worker *w) { return w->hooks.fail_tokens > 0 && w->hooks.fail_tokens-- > 0; }

bml_token **bml__worker_tokens(bml_worker *w) { return &w->tokens; }

/* ---- test hooks -------------------------------------------------------------------------- */

void bml__worker_set_hooks(bml_worker *w, const bml__worker_hooks *h) { w->hooks = *h; }

void bml__worker_set_transfers(bml_worker *w, int acts_zero_copy, int outs_zero_copy, double wait_spin) {
  set_buffers(w, acts_zero_copy < 0 ? w->acts.zero_copy : acts_zero_copy > 0,
              outs_zero_copy < 0 ? w->outs.zero_copy : outs_zero_copy > 0);
  if (wait_spin >= 0) w->wait_spin = wait_spin;
}

void bml__worker_set_card_mem(bml_worker *w, uint64_t bytes) { w->limiter.card_mem = bytes; }

const bml__limiter *bml__worker_limiter(const bml_worker *w) { return &w->limiter; }

size_t bml__worker_held_rows(const bml_worker *w, const char *name) {
  for (size_t i = 0; i < w->nentries; i++)
    if (strcmp(w->entries[i]->members[0].name, name) == 0) return w->entries[i]->m.nchunks ? w->entries[i]->held[0] : 0;
  return 0;
}

void bml__worker_set_share_calibrated(bml_worker *w, double share) {
  w->share = share;
  w->share_fixed = false;
  for (size_t i = 0; i < w->nshapes; i++) bml__balance_init(&w->shapes[i].balance, share);
  w->nkinds = 0;
}
