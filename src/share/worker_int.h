/* worker_int.h -- the worker's own state and the calls between its files (share/: worker, matrices, dispatch, fault,
 * launch, complete, calibrate, check, open, status, access); never included outside them. */
#ifndef BML_WORKER_INT_H
#define BML_WORKER_INT_H

#include "base/fork.h"
#include "base/hooks.h"
#include "cpu/pool.h"
#include "card/card.h"
#include "card/kernels.h"
#include "card/verdict.h"
#include "share/limiter.h"
#include "share/plan.h"
#include "share/token.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* The calibration product. */
#define CAL_ROWS 4096
#define CAL_N 4096
#define CAL_RUNS 3
/* The round trip's product: next to no work. */
#define CAL_TRIP_ROWS 64

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
  bml__moves hist;     /* its history of moves (share/plan.h) */
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
  double wake; /* seconds the CPU part lost to the pool's helpers, asleep when it began (0: awake) */
  pthread_t owner; /* the thread that began it (a child of fork() has only the one that forked) */
  bool own_cpu;  /* the worker computes the CPU's rows (not the caller of bml_worker_begin): their
                    time is known */
  bool cpu_alone; /* they ran on the calling thread alone (another thread drove the pool) */
  bool cpu_chosen; /* a batch its kind sends whole to the CPU (bml__balance_cpu_first) */
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
  bool quieted; /* bml__pool_quiet(pool, true) at the open (a software card): undone at the close */
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

/* ---- one thread at a time, and what every file uses ---------------------------- */

static inline bool enter(bml_worker *w) { return !atomic_flag_test_and_set_explicit(&w->driving, memory_order_acquire); }
static inline void leave(bml_worker *w) { atomic_flag_clear_explicit(&w->driving, memory_order_release); }


/* What a call that meets a product in flight returns (inside enter): a
 * bml_worker_mat_vec's (own_cpu; it leaves the worker while its CPU rows
 * run, and finishes them itself) belongs to a call still running on
 * another thread, BML_EBUSY as any such call; one begun by
 * bml_worker_begin waits for the caller's finish, BML_ESTATE. */
static inline int in_flight_error(const bml_worker *w) { return w->cur.own_cpu ? BML_EBUSY : BML_ESTATE; }

/* Grows *p (of *cap elements of size) to hold need.  0 or BML_ENOMEM. */
static inline int reserve(void **p, size_t *cap, size_t need, size_t size) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 16;
  while (c < need) c *= 2;
  void *q = realloc(*p, c * size);
  if (!q) return BML_ENOMEM;
  *p = q;
  *cap = c;
  return 0;
}

/* What the limiter counts of a staging buffer b of `bytes`: a staged one
 * is a buffer on the card and its pinned copy in host memory (on an
 * integrated card both are the RAM the limit counts), a zero-copy one a
 * single buffer. */
static inline uint64_t staging_bytes(const bml_worker *w, const bml__card_buf *b, uint64_t bytes) {
  return (!b->zero_copy && w->limiter.integrated ? 2 : 1) * bytes;
}

/* Whether a submission's launches are batched, with records before the
 * activations: a test forcing q1_0_mat_vec or q1_0_mat_vec8 gets a launch
 * per group instead. */
static inline bool uses_records(const bml_worker *w) { return w->hooks.kernel >= BML_KERNEL_MAT_VEC_L; }

/* Counts the products of a group that run on the CPU, by reason. */
static inline void count_cpu(uint64_t *counter, size_t count) { *counter += count; }

/* ---- the calls between the worker's files ------------------------------------- */

/* matrices.c */
void bml__worker_sync_allocated(bml_worker *w);
void bml__worker_set_buffers(bml_worker *w, bool acts_zero_copy, bool outs_zero_copy);
const char *bml__worker_buffers_name(const bml_worker *w);
uint64_t bml__worker_staging_in_bytes(const bml_worker *w, uint64_t act, uint64_t nrec);
uint64_t bml__worker_staging_growth(const bml_worker *w, uint64_t in_bytes, uint64_t out_rows);
void bml__worker_drop_matrix(bml_worker *w, entry *e);
void bml__worker_free_entry(entry *e);
entry *bml__worker_new_entry(bml_worker *w, const bml_product *p, size_t count);
entry *bml__worker_known_entry(bml_worker *w, const bml_product *p, size_t count);
bml__shape *bml__worker_find_shape(bml_worker *w, size_t rows, size_t n);
bml__balance *bml__worker_find_kind(bml_worker *w, const bml_product *p, size_t count);
void bml__worker_shape_decided(bml_worker *w, const bml__shape *s);
int bml__worker_ensure_uploaded(bml_worker *w, entry *e, const size_t *want, uint64_t stage);

/* fault.c */
void bml__worker_say_child(bml_worker *w);
void bml__worker_card_error(bml_worker *w, int err);
void bml__worker_all_to_cpu(bml_worker *w, submission *s, int err);
void bml__worker_in_child(void *ctx);

/* dispatch.c */
int bml__worker_start(bml_worker *w, submission *s);
/* Whether s is a batch whose kind chooses between the CPU alone and the
 * card (bml__balance_cpu_first): not a single product, a fixed share, a
 * retired card, rows the caller computes, nor a test's hold. */
bool bml__worker_kind_chooses(const bml_worker *w, const submission *s);

/* launch.c */
int bml__worker_enqueue_groups(bml_worker *w, submission *s);
void bml__worker_release_reads(submission *s);
bml__kernel_id bml__worker_kernel_for(const bml_worker *w, size_t rows);

/* complete.c */
int bml__worker_complete(bml_worker *w, submission *s);
int bml__worker_cpu_rows(bml_worker *w, submission *s);
/* Runs np pieces of s's CPU rows in one run of the pool (watch: looking at
 * the card between them), noting in s whether they ran on the calling
 * thread alone and what helpers asleep at the start cost them (s->wake:
 * the pool's wake-up, at most the part's time, less the caller's share of
 * it, which it computed meanwhile).  Returns 0 or an error. */
int bml__worker_pool_part(bml_worker *w, submission *s, const bml__cpu_piece *pc, size_t np, bool watch);

/* calibrate.c */
int bml__worker_calibrate(bml_worker *w, double *card_s, double *cpu_s);

/* check.c */
int bml__worker_batches(bml_worker *w, bml__verdict *v, char *why, size_t len, bool *bits);
void bml__worker_choose_transfers(bml_worker *w, bool software);

/* worker.c */
void bml__worker_free_state(bml_worker *w);

#endif
