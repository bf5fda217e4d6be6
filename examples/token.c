/* token.c -- an engine's tokens through bankml-cl: a pool and a worker opened with explicit options, each layer's
 * groups of products that share an activation, a host step between them, every result checked bit for bit.
 *
 * Copy it; build it with   cc token.c $(pkg-config --cflags --libs bankml-cl) -lm
 * Run it as   token [DEVICE]   where DEVICE names a card as BANKML_GPU does: an index of `bankml-cl devices`,
 * pci:ADDRESS or uuid:UUID (default: the environment's choice, else the first usable card).
 * Exit status: 0 every result bml_q1_0_mat_vec's bits; 1 a result differed; 2 a call failed. */
#include <bankml-cl.h>

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A small model: two layers of hidden 1024, key/value 256 and feed-forward 2816 (each n a multiple of 128). */
#define LAYERS 2
#define TOKENS 3
#define HIDDEN 1024
#define KV 256
#define FFN 2816

enum { Q, K, V, O, GATE, UP, DOWN, MATRICES };
static const struct {
  const char *name;
  size_t rows, n;
} shape[MATRICES] = {{"attn_q", HIDDEN, HIDDEN},      {"attn_k", KV, HIDDEN},     {"attn_v", KV, HIDDEN},
                     {"attn_output", HIDDEN, HIDDEN}, {"ffn_gate", FFN, HIDDEN}, {"ffn_up", FFN, HIDDEN},
                     {"ffn_down", HIDDEN, FFN}};

/* A layer's weights (Q1_0) and their names: the worker knows a matrix by its name and pointer. */
typedef struct {
  bml_block_q1_0 *w[MATRICES];
  char name[MATRICES][32];
} layer;

/* A token's state: the hidden state, the host's work, the activation (Q8_0) and each product's results. */
typedef struct {
  float x[HIDDEN], normed[FFN];
  bml_block_q8_0 act[FFN / BML_Q8_0_BLOCK];
  float out[MATRICES][FFN];
} state;

static int status; /* the exit status: 1 a result differed, 2 a call failed */

/* Whether a call succeeded; says the one that did not. */
static bool ok(int rc, const char *call) {
  if (rc != 0) fprintf(stderr, "token: %s: %s (%s)\n", call, bml_strerror(rc), bml_err_name(rc));
  if (rc != 0) status = 2;
  return rc == 0;
}

/* Whether each product's results are bml_q1_0_mat_vec's, bit for bit (a NaN equals a NaN: its sign and payload may
 * differ between a card and the CPU); says the first that is not. */
static bool same_bits(const bml_product *p, size_t count) {
  static float want[FFN];
  for (size_t i = 0; i < count; i++) {
    if (!ok(bml_q1_0_mat_vec(p[i].wts, p[i].rows, p[i].n, p[i].act, want), "bml_q1_0_mat_vec")) return false;
    for (size_t r = 0; r < p[i].rows; r++) {
      uint32_t a, b;
      memcpy(&a, &want[r], sizeof a);
      memcpy(&b, &p[i].out[r], sizeof b);
      if (a == b || (isnan(want[r]) && isnan(p[i].out[r]))) continue;
      fprintf(stderr, "token: %s row %zu: 0x%08x, not bml_q1_0_mat_vec's 0x%08x\n", p[i].name, r, b, a);
      status = 1;
      return false;
    }
  }
  return true;
}

/* README: begin submit */
/* One group of products that share an activation: one submission on the worker (the card takes its share
 * of the rows, the pool the rest), or on the pool alone where no card is used; then every row checked. */
static bool submit(bml_pool *pool, bml_worker *w, const bml_product *p, size_t count) {
  if (w && !ok(bml_worker_mat_vec_batch(w, p, count), "bml_worker_mat_vec_batch")) return false;
  for (size_t i = 0; !w && i < count; i++)
    if (!ok(bml_pool_q1_0_mat_vec(pool, p[i].wts, p[i].rows, p[i].n, p[i].act, p[i].out), "bml_pool_q1_0_mat_vec"))
      return false;
  return same_bits(p, count);
}
/* README: end */

/* x scaled to a root mean square of 1 (a norm) into s->normed, quantized into s->act. */
static bool norm(const float *x, state *s) {
  double ss = 0;
  for (size_t i = 0; i < HIDDEN; i++) ss += (double)x[i] * x[i];
  const float scale = (float)(1.0 / sqrt(ss / HIDDEN + 1e-6));
  for (size_t i = 0; i < HIDDEN; i++) s->normed[i] = x[i] * scale;
  return ok(bml_q8_0_quantize(s->normed, HIDDEN, s->act), "bml_q8_0_quantize");
}

/* Product m of layer l against the state's activation, into its results. */
static bml_product product(const layer *l, int m, state *s) {
  return (bml_product){l->name[m], l->w[m], shape[m].rows, shape[m].n, s->act, s->out[m]};
}

/* One token through one layer: each host step needs the group before it. */
static bool layer_token(bml_pool *pool, bml_worker *w, const layer *l, state *s) {
  if (!norm(s->x, s)) return false;
  /* README: begin group */
  /* Q, K and V share one activation (the normed hidden state): one group, one submission; a matrix is
   * known by its name and pointer (its rows go to the card once) */
  const bml_product qkv[3] = {{l->name[Q], l->w[Q], HIDDEN, HIDDEN, s->act, s->out[Q]},
                              {l->name[K], l->w[K], KV, HIDDEN, s->act, s->out[K]},
                              {l->name[V], l->w[V], KV, HIDDEN, s->act, s->out[V]}};
  if (!submit(pool, w, qkv, 3)) return false;
  /* the host's step, which needs the group's results (attention; a stand-in here), quantized: the next
   * group's activation */
  for (size_t i = 0; i < HIDDEN; i++) s->normed[i] = s->out[Q][i] * tanhf(s->out[V][i % KV]);
  if (!ok(bml_q8_0_quantize(s->normed, HIDDEN, s->act), "bml_q8_0_quantize")) return false;
  const bml_product o[1] = {product(l, O, s)};
  if (!submit(pool, w, o, 1)) return false;
  /* README: end */
  for (size_t i = 0; i < HIDDEN; i++) s->x[i] += s->out[O][i];
  /* gate and up share the normed state; SiLU(gate) * up is the down projection's activation */
  if (!norm(s->x, s)) return false;
  const bml_product gate_up[2] = {product(l, GATE, s), product(l, UP, s)};
  if (!submit(pool, w, gate_up, 2)) return false;
  for (size_t i = 0; i < FFN; i++) s->normed[i] = s->out[GATE][i] / (1.0f + expf(-s->out[GATE][i])) * s->out[UP][i];
  if (!ok(bml_q8_0_quantize(s->normed, FFN, s->act), "bml_q8_0_quantize")) return false;
  const bml_product down[1] = {product(l, DOWN, s)};
  if (!submit(pool, w, down, 1)) return false;
  for (size_t i = 0; i < HIDDEN; i++) s->x[i] += s->out[DOWN][i];
  return true;
}

static uint64_t next(uint64_t *x) {
  *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
  return *x;
}

/* The model: random signs, scales 2^-8 .. 2^-7 (halves 0x1c00 .. 0x1fff). */
static bool load(layer *model, uint64_t *seed) {
  for (int l = 0; l < LAYERS; l++)
    for (int m = 0; m < MATRICES; m++) {
      const size_t blocks = shape[m].rows * (shape[m].n / BML_Q1_0_BLOCK);
      if (!(model[l].w[m] = malloc(blocks * sizeof(bml_block_q1_0)))) return ok(BML_ENOMEM, "malloc");
      for (size_t b = 0; b < blocks; b++) {
        model[l].w[m][b].d = (uint16_t)(0x1c00 + next(seed) % 0x400);
        for (int i = 0; i < 16; i++) model[l].w[m][b].qs[i] = (uint8_t)next(seed);
      }
      snprintf(model[l].name[m], sizeof model[l].name[m], "blk.%d.%s", l, shape[m].name);
    }
  return true;
}

/* Which does the work: the worker's card (its status says which, its share, how its open went), or the CPU. */
static void say_who(bml_worker *w) {
  char *json = NULL;
  if (!w)
    printf("token: no card is used (the log says why): the CPU pool computes every row\n");
  else if (bml_worker_status_json(w, &json) == 0)
    printf("token: a card takes a share of each group's rows; the worker: %s\n", json);
  free(json);
}

int main(int argc, char **argv) {
  static layer model[LAYERS];
  static state s;
  uint64_t seed = 0x9e3779b97f4a7c15u;
  /* README: begin open */
  bml_pool *pool = NULL;
  bml_worker *w = NULL;
  if (!ok(bml_pool_open(0, &pool), "bml_pool_open")) return status; /* BANKML_THREADS, else every CPU */
  bml_worker_options o;
  bml_worker_options_init(&o);  /* .size, and every field unset: its BANKML_* variable, else the default */
  o.device = argc > 1 ? argv[1] : NULL; /* set: BANKML_GPU does not override it */
  o.limit = 0.5;                /* at most half the card's memory and time */
  o.verify = BML_VERIFY_CACHED; /* a remembered verdict, once a spot check on the card confirms it */
  if (!ok(bml_worker_open_with(pool, &o, &w), "bml_worker_open_with")) { /* w NULL: no card; the log says why */
    bml_pool_close(pool);
    return status;
  }
  /* README: end */
  say_who(w);
  bool fine = load(model, &seed);
  for (int t = 0; fine && t < TOKENS; t++) {
    for (size_t i = 0; i < HIDDEN; i++) s.x[i] = (float)((int)(next(&seed) % 2001) - 1000) / 1000.0f; /* embedding */
    for (int l = 0; fine && l < LAYERS; l++) fine = layer_token(pool, w, &model[l], &s);
  }
  if (fine)
    printf("token: %d tokens through %d layers of %d products: every result bml_q1_0_mat_vec's bits (%s)\n", TOKENS,
           LAYERS, MATRICES, w ? "card and CPU" : "CPU only");
  bml_worker_close(w); /* frees the card's buffers; the weights stay the engine's */
  bml_pool_close(pool);
  for (int l = 0; l < LAYERS; l++)
    for (int m = 0; m < MATRICES; m++) free(model[l].w[m]);
  return status;
}
