/* token_int.h -- a token's own state, shared by token.c (its groups run), token_load.c (its card copy), resident.c (its kernel). */
#ifndef BML_TOKEN_INT_H
#define BML_TOKEN_INT_H

#include "card/card.h"
#include "share/token.h"

/* cl/q1_0_batch.cl's q1_0_token: its words in host and device memory. */
#define TOKEN_REQ 0u
#define TOKEN_EXIT 32u
#define TOKEN_DONES 16u /* in dev: the host word of work-group 0's done word (done_at) */
#define TOKEN_GROUPS 17u /* in dev: the token's groups */
#define TOKEN_TABLE 64u
#define TOKEN_GROUP_WORDS 8u
#define TOKEN_ABORT 0xffffffffu
/* A request: the ticket's low 20 bits above the group's 12 (cl/q1_0_batch.cl's
 * BML_TOKEN_WORD); tickets run 1 .. TOKEN_TICKET_MOST, groups below
 * TOKEN_GROUPS_MOST. */
#define TOKEN_WORD(ticket, group) (((ticket) << 12) | (uint32_t)(group))
#define TOKEN_TICKET_MOST 0xffffeu
#define TOKEN_GROUPS_MOST 4096u
#define TOKEN_HEAD 256u /* bytes of the words above, in both */
#define TOKEN_FLAG_BYTES 64u /* dev's bytes a launch zeroes: the flag's (not TOKEN_DONES) */
#define TOKEN_TRIALS 5 /* a group's timed runs each way before it decides (token.c) */
#define TOKEN_CHECKS 5 /* whole tokens timed each way in a token's check (token.c) */

struct bml_token {
  bml_worker *w; /* NULL once the worker closed before the token */
  bml_product *p;
  size_t count, ngroups;
  size_t *first; /* ngroups + 1: each group's first product */
  bool resident; /* its groups may run resident on the card */
  bool loaded;   /* its matrices are on the card */
  /* on the card */
  bml__card *card;
  const bml__build *build;
  cl_mem bits, d0, dev, host;
  uint32_t *h; /* host's mapping */
  size_t card_bytes;
  size_t out_at;     /* byte offset of the results in host */
  size_t done_at;    /* word offset in host of the work-groups' done words (nwg) */
  size_t *act_off;   /* each group's activation: byte offset in host and dev */
  uint8_t *plan;     /* each group's bml__token_rows, as its card copy planned it */
  size_t nwg;
  uint32_t spins;
  /* the launch on the card */
  cl_event running; /* NULL: none */
  uint32_t launch;  /* launches made (the one running, when one is) */
  uint32_t *ran;    /* each group: the launch it last ran in (a launch runs a group once) */
  uint32_t ticket;  /* the next group's ticket */
  uint32_t ticket0; /* the running launch's first (one below it: the tickets wrapped, a new launch) */
  /* where each group runs: learnt from its first runs (card or CPU) */
  uint8_t *where;   /* WHERE_* */
  float *times;     /* TOKEN_TRIALS card times, then as many CPU times, per group (seconds) */
  uint8_t *tried;   /* runs timed so far, per group */
  bool check_only;  /* resident or nothing (bml__token_check_only) */
  /* the whole token's check of the groups' decisions (token.c) */
  bool learns;            /* its open or last run found its groups learning where they run */
  uint8_t check;          /* CHECK_* */
  bool all_card;          /* this token runs every group on the card: the check's other half */
  unsigned checked;       /* whole tokens timed in the check */
  size_t token_runs;      /* groups run since group 0 */
  double token_s;         /* and their seconds */
  float check_s[2][TOKEN_CHECKS]; /* the check's tokens' seconds: as decided, every group on the card */
  /* results the token keeps (products whose out is NULL: bml_token_out) */
  float *kept;        /* a group's rows at most, for runs not resident; NULL: none kept */
  const float *last;  /* where the last run's group's results are (NULL: none yet) */
  size_t last_group;  /* that group */
  bml_token *link;  /* the worker's list of tokens */
};

/* Where a group runs: learning, on the card (resident), on the CPU pool,
 * or as the worker's batches. */
enum { WHERE_LEARN = 0, WHERE_CARD, WHERE_CPU, WHERE_BATCH };

/* ---- token_learn.c --------------------------------------------------------- */
/* Where group g runs now (WHERE_*): its decision, or its next trial; a
 * run of group 0 begins a token (of the check's, or not). */
int bml__token_where(bml_token *t, size_t g);
/* Group g ran at `ran` (WHERE_*) in seconds: its trials, and the whole
 * token's check (which may send every group to the card). */
void bml__token_learn(bml_token *t, size_t g, int ran, double seconds);

/* ---- token_load.c ---------------------------------------------------------- */
/* The token's matrices, records and buffers on the card.  Returns 0, or an
 * error (then nothing is held and the token runs through batches). */
int bml__token_load(bml_token *t);

/* ---- resident.c ----------------------------------------------------------- */
/* Launches the kernel, its first ticket t->ticket.  Returns 0 or an OpenCL error. */
int bml__token_launch(bml_token *t);
/* The launch's event released where its kernel ended by itself (it gave
 * up waiting).  Returns its error, or 0; *started (may be NULL): whether it
 * has started (a software device compiles a kernel at its first launch). */
cl_int bml__token_reap(bml_token *t, bool *started);
/* Whether t's running kernel wrote that it gave up waiting (it ends, or
 * has ended, by itself): the host word, no call into the driver. */
bool bml__token_gave_up(const bml_token *t);
/* Waits for the group whose ticket is ticket: 0 when done, 1 when the
 * kernel gave up before it (to launch again), or an error. */
int bml__token_await(bml_token *t, uint32_t ticket);
/* Stores value in word for the card to see: fenced on both sides. */
void bml__token_post(uint32_t *word, uint32_t value);
/* Frees t's buffers on the card (its kernel parked first). */
void bml__token_free_card(bml_token *t);
/* Frees them where it has any. */
void bml__token_drop(bml_token *t);

#endif
