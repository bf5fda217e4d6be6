/* test_plan.c -- the worker's pure decisions (share/plan.c), values in and a plan out: no card, no clock, no threads. */
#include <criterion/criterion.h>
#include <math.h>

#include "share/limiter.h"
#include "share/plan.h"

Test(plan, a_products_card_rows_are_its_share_rounded_and_at_most_its_rows) {
  cr_expect_eq(bml__plan_card_rows(0.0, 10), 0);
  cr_expect_eq(bml__plan_card_rows(0.5, 3), 2); /* 1.5 rounds up */
  cr_expect_eq(bml__plan_card_rows(0.25, 10), 3);
  cr_expect_eq(bml__plan_card_rows(1.0, 10), 10);
  cr_expect_eq(bml__plan_card_rows(1.2, 10), 10);
}

Test(plan, a_group_is_neighbours_with_one_activation_and_n_at_most_sixteen) {
  static bml_block_q8_0 a[2];
  bml_product p[20];
  for (size_t i = 0; i < 20; i++) p[i] = (bml_product){"m", NULL, 128, 128, &a[0], NULL};
  cr_expect_eq(bml__plan_group_end(p, 20, 0), BML_PLAN_GROUP_MOST);
  cr_expect_eq(bml__plan_group_end(p, 20, 16), 20);
  cr_expect_eq(bml__plan_group_end(p, 20, 19), 20);
  p[3].n = 256; /* another n: another group */
  cr_expect_eq(bml__plan_group_end(p, 20, 0), 3);
  cr_expect_eq(bml__plan_group_end(p, 20, 3), 4);
  p[6].act = &a[1]; /* another activation: another group */
  cr_expect_eq(bml__plan_group_end(p, 20, 4), 6);
}

static bool move(bml__moves *h, size_t held, size_t want) {
  const bml_product p = {"m", NULL, 1000, 128, NULL, NULL};
  return bml__plan_move(h, &p, &held, &want, 1, 0.0);
}

Test(plan, a_held_matrix_keeps_a_close_split_and_moves_at_once_for_a_far_one) {
  bml__moves h = {0};
  cr_expect(!move(&h, 500, 500));
  cr_expect(!move(&h, 500, 540), "a split within BML_HELD_LOSS keeps the rows held");
  cr_expect_eq(h.strikes, 0);
  cr_expect_eq(h.since_move, 2);
  cr_expect(bml__split_loss(1000, 500, 980) > BML_HELD_FAR);
  cr_expect(move(&h, 500, 980), "a split beyond BML_HELD_FAR moves at once");
  cr_expect_eq(h.strikes, 0);
}

Test(plan, a_split_not_close_moves_the_matrix_at_the_third_product_in_a_row) {
  bml__moves h = {0};
  const double loss = bml__split_loss(1000, 500, 400);
  cr_assert(loss > BML_HELD_LOSS && loss <= BML_HELD_FAR, "%f", loss);
  cr_expect(!move(&h, 500, 400));
  cr_expect(!move(&h, 500, 400));
  cr_expect_eq(h.strikes, 2);
  cr_expect(!move(&h, 500, 500), "a close one between ends the strikes");
  cr_expect_eq(h.strikes, 0);
  cr_expect(!move(&h, 500, 400));
  cr_expect(!move(&h, 500, 400));
  cr_expect(move(&h, 500, 400), "the third in a row moves it");
  cr_expect_eq(h.strikes, 0);
}

Test(plan, a_move_back_waits_longer_after_each_move) {
  /* two moves so far, the last one up: a move down waits 4 << 1 products */
  bml__moves h = {.moves = 2, .last_dir = 1};
  for (int i = 1; i < 8; i++) cr_expect(!move(&h, 500, 100), "product %d after the move", i);
  cr_expect(move(&h, 500, 100), "the eighth product after the move moves it back");
  /* the same way as the last move: at once */
  bml__moves up = {.moves = 2, .last_dir = 1};
  cr_expect(move(&up, 500, 980));
}

static bool move_for(bml__moves *h, size_t held, size_t want, double gain) {
  const bml_product p = {"m", NULL, 1000, 128, NULL, NULL};
  return bml__plan_move(h, &p, &held, &want, 1, gain);
}

Test(plan, leaving_the_card_alone_waits_until_the_splits_saving_repays_an_upload) {
  /* an upload took 1 ms; the split saves 15 us a product: 67 products repay it */
  bml__moves h = {.upload_s = 1e-3};
  for (int i = 1; i <= 66; i++) cr_expect(!move_for(&h, 1000, 700, 15e-6), "product %d: %g s saved", i, 15e-6 * i);
  cr_expect(move_for(&h, 1000, 700, 15e-6), "the 67th product's saving repays the upload");
  /* no saving predicted, or none known: the card stays alone */
  bml__moves none = {.upload_s = 1e-3, .since_move = 100000};
  cr_expect(!move_for(&none, 1000, 700, 0.0));
  cr_expect(!move_for(&none, 1000, 700, NAN));
  /* an upload of unknown cost, as before: at the third product asking (a split not close) */
  bml__moves unknown = {0};
  cr_expect(!move_for(&unknown, 1000, 700, 0.0));
  cr_expect(!move_for(&unknown, 1000, 700, 0.0));
  cr_expect(move_for(&unknown, 1000, 700, 0.0));
  /* back to the card alone, and between two splits: not delayed by it */
  bml__moves back = {.upload_s = 1.0};
  cr_expect(move_for(&back, 700, 1000, 0.0), "to the card alone at once");
  bml__moves between = {.upload_s = 1.0};
  cr_expect(move_for(&between, 500, 980, 0.0), "a far split from a split at once");
}

/* A single product's shape on a card after idle gaps, as the worker runs
 * it: the balance learns from each product (share/limiter.c) and the
 * planner decides whether the held matrix moves to its wish, a move
 * costing `upload` seconds.  The card alone takes o + its rows over rg,
 * slower by scale[i % 4] after each gap (its clocks down); the CPU is
 * slower than the rate the balance last measured (cold after the gap), so
 * a split loses.  Returns the seconds of `products` products, moves
 * included; *moves: how many. */
static double gaps_run(double upload, int products, int *moves) {
  const double rg = 8.4e12, o = 19e-6, w = 1.68e7; /* 4096x4096 on an NVIDIA H100 */
  const double rc_seen = 3.2e11, rc_cold = 1.6e11;
  static const double scale[4] = {1.0, 2.0, 3.0, 1.5};
  const bml_product p = {"m", NULL, 4096, 4096, NULL, NULL};
  bml__balance b;
  bml__balance_init(&b, 1.0);
  b.cpu_rate = rc_seen;
  bml__moves h = {.upload_s = upload};
  size_t held = 4096;
  double total = 0;
  *moves = 0;
  for (int i = 0; i < products; i++) {
    size_t want = bml__plan_card_rows(b.share, 4096);
    if (want != held && bml__plan_move(&h, &p, &held, &want, 1, b.gain)) {
      h.moves++, h.last_dir = want > held ? 1 : -1, h.since_move = 0;
      held = want, total += upload, ++*moves;
    } else if (want == held) {
      h.since_move++;
    }
    const double f = (double)held / 4096.0, wg = f * w, wc = w - wg;
    const double tg = (o + wg / rg) * scale[i % 4], tc = wc > 0 ? wc / rc_cold : 0;
    const bool first = wc > 0 && tg <= tc;
    bml__balance_learn(&b, wg, wc, first, first ? tc : tg, tc, rc_seen, o, 0.0);
    total += tg > tc ? tg : tc;
  }
  return total;
}

Test(plan, after_idle_gaps_the_card_alone_is_not_left_for_a_split_that_cannot_repay_its_move) {
  int moves_free, moves;
  const double free_run = gaps_run(0.0, 200, &moves_free); /* a move's cost not known: as before */
  cr_assert_geq(moves_free, 2, "the scenario asks for splits: %d moves", moves_free);
  const double run = gaps_run(2e-3, 200, &moves); /* an upload of 2 ms, as the card's were */
  double alone = 0;
  for (int i = 0; i < 200; i++) alone += (19e-6 + 1.68e7 / 8.4e12) * (double[4]){1.0, 2.0, 3.0, 1.5}[i % 4];
  cr_expect_leq(moves, 1, "%d moves of 2 ms for splits that save microseconds", moves);
  cr_expect_leq(run, alone + 2e-3 * moves, "%g s against the card alone's %g and %d moves", run, alone, moves);
  cr_expect_lt(run + 2e-3 * (moves_free - moves), free_run + 2e-3 * moves_free, "with the rule %g s, %d moves; "
               "without %g s (before the moves' cost), %d moves", run, moves, free_run, moves_free);
}

Test(plan, the_queues_and_the_calibrated_share) {
  cr_expect_eq(bml__worker_queues(0, true, false), 4);
  cr_expect_eq(bml__worker_queues(0, false, false), 1);
  cr_expect_eq(bml__worker_queues(3, false, false), 3);
  cr_expect_eq(bml__worker_queues(8, true, true), 1, "a software device runs on one queue");
  cr_expect_eq(bml__calibrated_share(1.0, 3.0), 0.75);
  cr_expect_eq(bml__calibrated_share(1.0, 1.0), 0.5);
}
