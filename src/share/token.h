/* token.h -- a decode's token resident on the card: what the worker and the token say to each other. */
#ifndef BML_TOKEN_H
#define BML_TOKEN_H

#include "card/card.h"

/* ---- the worker's side, for token.c (share/access.c, share/worker.c) ------ */

/* Enters w as a call does (one thread at a time): false when another
 * thread is inside.  leave ends it. */
bool bml__worker_enter(bml_worker *w);
void bml__worker_leave(bml_worker *w);
/* Enters w, waiting (a spin, then sleeps) while another thread is inside. */
void bml__worker_enter_waiting(bml_worker *w);
/* What a token may run resident on: w's card and build, the work-groups a
 * resident launch runs (all on the card at once) and the reads of host
 * memory its first work-group makes before it gives up waiting; NULL when
 * none may (no card, retired, a child of fork(), zero-copy memory not to
 * be had, or the open's check refused resident tokens).  Inside a call. */
bml__card *bml__worker_token_card(bml_worker *w, const bml__build **build, size_t *nwg, uint32_t *spins);
/* Whether w's card is a software device, whose kernels run on the host's
 * own cores (a resident kernel's wait takes one from the pool). */
bool bml__worker_software_card(const bml_worker *w);
/* Whether `bytes` more on the card stay within w's limit; hold counts them
 * as the worker's (negative: freed). */
bool bml__worker_token_fits(bml_worker *w, uint64_t bytes);
void bml__worker_token_hold(bml_worker *w, int64_t bytes);
/* The token whose kernel is on the card now (NULL: none): the worker parks
 * it before anything else of its own goes to the card. */
void bml__worker_set_resident(bml_worker *w, bml_token *t);
/* Where a group of a token took its time: upload, launch, wait, copy out,
 * the CPU's rows (seconds). */
#define BML_TOKEN_PHASES 5
/* Counts a group's products and its time: err 0, on the card (resident);
 * BML_EVERIFY, on the CPU by the token's decision; another, the card's
 * error (which may retire it; they run as batches then, counted there). */
void bml__worker_token_ran(bml_worker *w, size_t products, int err, const double sec[BML_TOKEN_PHASES]);
/* Where every token's groups run when the share is fixed (BANKML_GPU_SHARE,
 * bml_worker_set_share): 1 on the card (a share of BML_SHARE_ALONE or
 * more), 2 on the CPU (below BML_SHARE_MIN), 3 as batches (in between: the
 * fixed split); 0 where each group learns its own.  (token.c's WHERE_*.) */
int bml__worker_token_where(const bml_worker *w);
/* A token's trial's seconds as the decision takes them: `measured`, or a
 * test hook's (base/hooks.h, token_seconds). */
double bml__worker_token_seconds(const bml_worker *w, bool on_card, double measured);
/* A whole token's seconds in a token's check, as decided or every group on
 * the card, by a test hook (base/hooks.h, token_check_seconds): 0 where unset. */
double bml__worker_token_check_seconds(const bml_worker *w, bool all_card);
/* A test hook's choice of a token's rows a work-item (base/hooks.h, token_rows). */
int bml__worker_token_rows(const bml_worker *w);
/* Whether a test hook fails this resident run (base/hooks.h, fail_tokens). */
bool bml__worker_token_fault(bml_worker *w);
/* The worker's pool. */
bml_pool *bml__worker_pool(bml_worker *w);
/* The list of tokens open on w (token.c links them), so that release and
 * close reach them. */
bml_token **bml__worker_tokens(bml_worker *w);
/* The group's products through the worker's batches (enter taken). */
int bml__worker_batch_entered(bml_worker *w, const bml_product *products, size_t count);

/* ---- the token's side, for the worker (share/resident.c) ------------------ */

/* Makes t run every group resident (the open's check of tokens): no
 * learning, no batches (a group that cannot run resident fails). */
void bml__token_check_only(bml_token *t);
/* How a group's records are planned for the resident kernel (its table
 * entry's word 5, cl/q1_0_batch.cl's q1_0_token): at the card's rows a
 * work-item; at one row; at one row and one lane, in groups of half the
 * card's lr rows (a card of two lanes a work-item). */
typedef enum { BML_TOKEN_ROWS_CARD = 0, BML_TOKEN_ROWS_ONE = 1, BML_TOKEN_ROWS_ONE_LANE = 2 } bml__token_rows;
/* How a group of `rows` rows runs resident on nwg work-groups of a card
 * whose shape is lr rows a slice, rpt slices, lpt lanes a work-item: the
 * finest plan whose groups are no more than nwg, so that a work-group takes
 * one (coarser, fewer groups leave work-groups idle: cl/q1_0_batch.cl,
 * q1_0_token); else the card's. */
bml__token_rows bml__token_rows_plan(size_t rows, size_t lr, size_t rpt, size_t lpt, size_t nwg);
/* Group g of t's plan (BML_TOKEN_ROWS_CARD before its card copy), and its
 * rows a work-item as planned (0 before its card copy). */
bml__token_rows bml__token_plan(const bml_token *t, size_t g);
size_t bml__token_rpt(const bml_token *t, size_t g);
/* Whether a launch of t's kernel is on the card now, waiting for its next
 * group or running one (for tests). */
bool bml__token_running(const bml_token *t);
/* The resident launches t has made (for tests: a token's first group
 * again needs one; nothing else should). */
uint32_t bml__token_launches(const bml_token *t);
/* Ends t's resident kernel, if it is on the card, and waits for it. */
void bml__token_park(bml_token *t);
/* Frees the matrices on the card of the tokens of a list (bml_worker_release):
 * a later run uploads them again. */
void bml__tokens_drop(bml_token *list);
/* Their worker is closing before them: each parks, frees what it has on
 * the card and runs nothing more (its calls return BML_ESTATE). */
void bml__tokens_detach(bml_token *list);

#endif
