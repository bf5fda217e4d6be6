/* test_limiter.c -- the limiter and the per-shape decision as plain logic: time and memory passed in. */
#include <criterion/criterion.h>

#include <math.h>

#include "share/limiter.h"

Test(limiter, limit_is_clamped) {
  cr_expect_eq(bml__limit_clamp(0.0), 0.05);
  cr_expect_eq(bml__limit_clamp(-3.0), 0.05);
  cr_expect_eq(bml__limit_clamp(7.0), 1.0);
  cr_expect_eq(bml__limit_clamp(0.5), 0.5);
  cr_expect_eq(bml__limit_clamp(0.0 / 0.0), 0.05, "NaN takes the safe end");
}

Test(limiter, memory_stays_within_the_limit_of_the_card) {
  bml__limiter l;
  bml__limiter_init(&l, 0.5, 1000, false);
  cr_expect(bml__limiter_fits(&l, 500, 0));
  cr_expect(!bml__limiter_fits(&l, 501, 0));
  bml__limiter_hold(&l, 400);
  cr_expect(bml__limiter_fits(&l, 100, 0));
  cr_expect(!bml__limiter_fits(&l, 101, 0), "what is held counts");
  bml__limiter_drop(&l, 400);
  cr_expect_eq(l.allocated, 0);
  bml__limiter_drop(&l, 10);
  cr_expect_eq(l.allocated, 0, "never below zero");
}

Test(limiter, integrated_card_also_respects_free_ram) {
  bml__limiter l;
  bml__limiter_init(&l, 0.8, 1000000, true);
  bml__limiter_hold(&l, 100);
  /* the card says a lot, but the RAM they could use is 100 held + 400 free */
  cr_expect(bml__limiter_fits(&l, 300, 400));  /* 400 <= 0.8 * 500 */
  cr_expect(!bml__limiter_fits(&l, 301, 400));
  /* no MemAvailable (0: /proc/meminfo did not say): the card's memory alone */
  cr_expect(bml__limiter_fits(&l, 799900, 0), "an unknown MemAvailable sent every matrix to the CPU"); /* 800000 */
  cr_expect(!bml__limiter_fits(&l, 799901, 0));
  bml__limiter_init(&l, 0.8, 1000000, false);
  cr_expect(bml__limiter_fits(&l, 700000, 0), "a discrete card ignores host RAM");
}

Test(limiter, card_rests_after_each_dispatch) {
  bml__limiter l;
  bml__limiter_init(&l, 0.8, 1, false);
  cr_expect(!bml__limiter_resting(&l, 0.0));
  bml__limiter_busy(&l, 0.4, 10.4); /* d = 0.4: rest 0.4 * 0.2 / 0.8 = 0.1 */
  cr_expect(bml__limiter_resting(&l, 10.45));
  cr_expect(bml__limiter_resting(&l, 10.4999));
  cr_expect(!bml__limiter_resting(&l, 10.5001));
  bml__limiter_init(&l, 1.0, 1, false);
  bml__limiter_busy(&l, 1.0, 2.0);
  cr_expect(!bml__limiter_resting(&l, 2.0), "limit 1: no rest");
  bml__limiter_init(&l, 0.05, 1, false);
  bml__limiter_busy(&l, 1.0, 1.0);
  cr_expect(bml__limiter_resting(&l, 19.9) && !bml__limiter_resting(&l, 20.1), "limit 0.05: rest 19 d");
}

/* The card's own time, where the driver says it, sets the rest; it starts
 * from the bound of the card's end that the host has. */
Test(limiter, the_rest_follows_the_cards_busy_time_from_the_end_known) {
  bml__limiter l;
  bml__limiter_init(&l, 0.5, 1, false);
  bml__limiter_busy(&l, 0.002, 10.3); /* 2 ms of work, seen done at 10.3: rest 2 ms from there */
  cr_expect(bml__limiter_resting(&l, 10.3019) && !bml__limiter_resting(&l, 10.3021), "rest until %.4f",
            l.rest_until);
  bml__limiter_busy(&l, -1.0, 11.0);
  cr_expect(!bml__limiter_resting(&l, 11.0), "no time, no rest");
  bml__limiter_busy(&l, 0.0 / 0.0, 12.0);
  cr_expect(!bml__limiter_resting(&l, 12.0), "NaN, no rest");
}

Test(limiter, median_of_even_and_odd_counts) {
  double odd[] = {5, 1, 3};
  double even[] = {4, 1, 3, 2, 6, 5};
  cr_expect_eq(bml__median(odd, 3), 3);
  cr_expect_eq(bml__median(even, 6), 3.5);
  cr_expect_eq(bml__median(even, 0), 0);
}

static void feed(bml__shape *s, double card_s, double cpu_s) {
  while (s->state == BML_SHAPE_TUNING) {
    bool card = bml__shape_wants_card(s);
    bml__shape_record(s, card, card ? card_s : cpu_s);
  }
}

Test(limiter, shape_warms_up_on_the_card_untimed) {
  bml__shape s = {.rows = 4, .n = 128, .state = BML_SHAPE_WARMUP};
  for (int i = 0; i < BML_SHAPE_WARMUPS; i++) {
    cr_expect_eq(s.state, BML_SHAPE_WARMUP, "warm-up %d", i);
    cr_expect(bml__shape_wants_card(&s));
    cr_expect(!bml__shape_record(&s, true, 99.0));
    if (i == 1) cr_expect(!bml__shape_record(&s, false, 99.0), "a product the card skipped");
  }
  cr_expect_eq(s.state, BML_SHAPE_TUNING, "after %d warm-ups", BML_SHAPE_WARMUPS);
  cr_expect_eq(s.nsplit + s.ncpu, 0, "a warm-up (with its upload) is not a timing");
}

Test(limiter, shape_alternates_card_and_cpu_six_times_each) {
  bml__shape s = {.state = BML_SHAPE_TUNING};
  bool seq[12];
  for (int i = 0; i < 12; i++) {
    seq[i] = bml__shape_wants_card(&s);
    bool decided = bml__shape_record(&s, seq[i], 1.0);
    cr_expect_eq(decided, i == 11, "decided at product %d", i);
  }
  for (int i = 0; i < 12; i++) cr_expect_eq(seq[i], i % 2 == 0, "product %d", i);
  cr_expect_eq(s.nsplit, 6);
  cr_expect_eq(s.ncpu, 6);
}

Test(limiter, faster_median_wins) {
  bml__shape a = {.state = BML_SHAPE_TUNING}, b = {.state = BML_SHAPE_TUNING};
  feed(&a, 1.0, 2.0);
  cr_expect_eq(a.state, BML_SHAPE_CARD);
  cr_expect(bml__shape_wants_card(&a));
  feed(&b, 2.0, 1.0);
  cr_expect_eq(b.state, BML_SHAPE_CPU);
  cr_expect(!bml__shape_wants_card(&b));
  cr_expect(!bml__shape_record(&b, false, 1.0), "a decided shape stays decided");
}

Test(limiter, medians_not_means_decide) {
  /* the card is faster five times in six; one outlier must not flip it */
  bml__shape s = {.state = BML_SHAPE_TUNING};
  double card[] = {1, 1, 1, 1, 1, 100};
  int k = 0;
  while (s.state == BML_SHAPE_TUNING) {
    bool on = bml__shape_wants_card(&s);
    bml__shape_record(&s, on, on ? card[k++] : 2.0);
  }
  cr_expect_eq(s.state, BML_SHAPE_CARD);
}

Test(limiter, skipped_products_are_not_timings) {
  /* the worker records nothing for a product the card skipped: the same
   * request stays pending until the card really runs one */
  bml__shape s = {.state = BML_SHAPE_TUNING};
  cr_expect(bml__shape_wants_card(&s));
  cr_expect(bml__shape_wants_card(&s), "asking twice does not advance");
  bml__shape_record(&s, true, 1.0);
  cr_expect(!bml__shape_wants_card(&s));
  cr_expect_str_eq(bml__shape_state_name(BML_SHAPE_CPU), "cpu");
}

/* ---- the balance, against a simulated card and CPU ------------------------
 * The card takes o + x / rg seconds for x weights (o: its round trip), the
 * CPU wake + x / rc (wake: its pool's helpers woken from sleep after an
 * idle gap, paid by any CPU part); a product of w weights split at share f
 * takes the longer of the two.  The CPU runs while the card computes, so
 * the card's bound when it finished first is the CPU's time. */
typedef struct {
  double rg, rc, o, w, wake;
  double hidden; /* seconds any CPU part costs that the balance is not told of (the pool's job, the caller's share) */
} sim;

static double sim_cpu(const sim *m, double wc) { return wc > 0 ? m->wake + m->hidden + wc / m->rc : 0; }

static double sim_time(const sim *m, double f) {
  double tg = f > 0 ? m->o + f * m->w / m->rg : 0, tc = sim_cpu(m, (1 - f) * m->w);
  return tg > tc ? tg : tc;
}

static double sim_best(const sim *m) {
  double best = 1e300;
  for (int i = 0; i <= 100000; i++) {
    double t = sim_time(m, i / 100000.0);
    if (t < best) best = t;
  }
  return best;
}

/* One product at the balance's share, learnt from; its time returned. */
static double sim_step(const sim *m, bml__balance *b, double t_card_scale) {
  double f = b->share, wg = f * m->w, wc = m->w - wg;
  double tg = (m->o + wg / m->rg) * t_card_scale, tc = sim_cpu(m, wc);
  bool first = tg <= tc;
  bml__balance_learn(b, wg, wc, first, first ? tc : tg, tc, m->rc, m->o, wc > 0 ? m->wake : 0.0);
  return tg > tc ? tg : tc;
}

/* b from share `from` after 30 products of m. */
static void settle(const sim *m, bml__balance *b, double from) {
  bml__balance_init(b, from);
  for (int i = 0; i < 30; i++) sim_step(m, b, 1.0);
}

/* From share `from`, the products' time settles within 10 % of the best
 * split's (the mean of products 20..59), and gets there within `within`. */
static void expect_settles(sim m, double from, int within, const char *what) {
  bml__balance b;
  bml__balance_init(&b, from);
  double best = sim_best(&m), sum = 0;
  int reached = -1;
  for (int i = 0; i < 60; i++) {
    double t = sim_step(&m, &b, 1.0);
    if (reached < 0 && t <= 1.1 * best) reached = i;
    if (i >= 20) sum += t;
  }
  cr_expect(reached >= 0 && reached <= within, "%s from share %.2f: within 10 %% of the best after %d products",
            what, from, reached);
  cr_expect_leq(sum / 40, 1.1 * best, "%s from share %.2f: %g s a product against the best %g", what, from,
                sum / 40, best);
}

Test(balance, a_card_forty_times_the_cpu_takes_nearly_all_rows) {
  sim h200 = {.rg = 1.3e13, .rc = 3.3e11, .o = 20e-6, .w = 8.9e9}; /* a bonsai-8b token */
  for (double from = 0.1; from < 1.0; from += 0.2) expect_settles(h200, from, 8, "a token");
  bml__balance b;
  settle(&h200, &b, 0.6);
  cr_expect_gt(b.share, 0.95, "share %f", b.share);
}

Test(balance, devices_of_one_speed_split_about_evenly) {
  sim igpu = {.rg = 2e11, .rc = 2e11, .o = 50e-6, .w = 6.7e7};
  for (double from = 0.1; from < 1.0; from += 0.2) expect_settles(igpu, from, 8, "an even pair");
}

Test(balance, a_split_keeps_the_saving_it_predicts_and_the_card_alone_none) {
  sim igpu = {.rg = 2e11, .rc = 2e11, .o = 50e-6, .w = 6.7e7};
  bml__balance b;
  settle(&igpu, &b, 0.5);
  cr_assert_lt(b.share, 1.0);
  const double saved = sim_time(&igpu, 1.0) - sim_time(&igpu, b.share); /* the sim's own */
  cr_expect(b.gain > 0.75 * saved && b.gain < 1.25 * saved, "predicted %g s saved a product, the sim's %g", b.gain,
            saved);
  sim h200 = {.rg = 1.3e13, .rc = 3.3e11, .o = 20e-6, .w = 8.9e9}; /* a bonsai-8b token: the card alone */
  settle(&h200, &b, 0.6);
  cr_assert_eq(b.share, 1.0);
  cr_expect_eq(b.gain, 0.0);
}

Test(balance, a_slow_card_takes_a_small_part) {
  sim slow = {.rg = 5e10, .rc = 4e11, .o = 100e-6, .w = 6.7e7};
  for (double from = 0.1; from < 1.0; from += 0.2) expect_settles(slow, from, 8, "a slow card");
}

Test(balance, a_round_trip_bound_product_loses_nothing) {
  /* 4096x4096 on the H200: the card's 25 us are nearly all round trip */
  sim small = {.rg = 5e12, .rc = 3.4e11, .o = 22e-6, .w = 1.68e7};
  for (double from = 0.1; from < 1.0; from += 0.2) expect_settles(small, from, 8, "a small product");
}

Test(balance, one_disturbed_product_is_forgotten_and_a_lasting_change_learnt) {
  sim h200 = {.rg = 1.3e13, .rc = 3.3e11, .o = 20e-6, .w = 8.9e9};
  bml__balance b;
  settle(&h200, &b, 0.6);
  cr_assert_eq(b.share, 1.0);
  sim_step(&h200, &b, 20.0); /* the card twenty times slower once (another process on it) */
  cr_expect_eq(b.share, 1.0, "one disturbed product moves the card alone: %f", b.share);
  sim_step(&h200, &b, 1.0);
  int left = -1;
  for (int i = 0; i < 10 && left < 0; i++) {
    sim_step(&h200, &b, 20.0); /* ... and then for good */
    if (b.share < 0.8) left = i;
  }
  cr_expect_eq(left, BML_LEAVE_AFTER - 1, "a lasting slowdown is learnt after %d products (want %d)", left + 1,
               BML_LEAVE_AFTER);
  double best = sim_best(&h200);
  int back = -1;
  for (int i = 0; i < 20 && back < 0; i++)
    if (sim_step(&h200, &b, 1.0) <= 1.1 * best) back = i;
  cr_expect(back >= 0 && back <= 6, "back within 10 %% of the best after %d products", back);
}

/* Every product after an idle gap, the pool's helpers asleep: its CPU part
 * pays their wake-up first (13-750 us on a 2-vCPU VM), and the balance
 * learns it apart from the CPU's rate.  From any share, no product after
 * the first `within` is slower than the card alone, and the products
 * settle within 10 % of the best split with that wake-up: a
 * round-trip-bound product goes alone, a slow card keeps a smaller split
 * that still beats it. */
static void expect_gaps_never_lose(sim m, double from, int within, const char *what) {
  const double alone = sim_time(&m, 1.0), best = sim_best(&m);
  bml__balance b;
  bml__balance_init(&b, from);
  int last_slower = -1;
  double sum = 0;
  for (int i = 0; i < 100; i++) {
    const double t = sim_step(&m, &b, 1.0);
    if (t > alone) last_slower = i;
    if (i >= 60) sum += t;
  }
  cr_expect_lt(last_slower, within, "%s (wake %g s) from share %.2f: product %d slower than the card alone", what,
               m.wake, from, last_slower);
  cr_expect_leq(sum / 40, 1.1 * best, "%s (wake %g s) from share %.2f: %g s a product against the best split %g",
                what, m.wake, from, sum / 40, best);
}

Test(balance, after_idle_gaps_a_split_is_never_slower_than_the_card_alone) {
  const double wakes[] = {100e-6, 400e-6, 750e-6};
  for (size_t k = 0; k < sizeof wakes / sizeof wakes[0]; k++) {
    sim small = {.rg = 5e12, .rc = 3.4e11, .o = 22e-6, .w = 1.68e7, .wake = wakes[k]}; /* 4096x4096, H200 */
    sim token = {.rg = 1.3e13, .rc = 3.3e11, .o = 20e-6, .w = 8.9e9, .wake = wakes[k]}; /* bonsai-8b in one */
    sim slow = {.rg = 5e10, .rc = 4e11, .o = 100e-6, .w = 6.7e7, .wake = wakes[k]};     /* PoCL-like card */
    sim even = {.rg = 2e11, .rc = 2e11, .o = 50e-6, .w = 6.7e7, .wake = wakes[k]};      /* an iGPU */
    for (double from = 0.1; from < 1.0; from += 0.2) {
      expect_gaps_never_lose(small, from, 6, "a small product");
      expect_gaps_never_lose(token, from, 6, "a token");
      expect_gaps_never_lose(slow, from, 6, "a slow card");
      expect_gaps_never_lose(even, from, 6, "an even pair");
    }
  }
}

/* A CPU part that costs more than the balance's model knows of: on an
 * NVIDIA H100 a 4096x4096 split predicted at 19.7 us against the card
 * alone's 22 (its CPU rate from one part of 17 us) took 52-90 us, and the
 * balance, seeing the card finish first, stepped back to the card alone
 * over three slow splits.  Here every CPU part costs `hidden` more than
 * its rate says, which the balance is not told of: the first split
 * measured after the card alone was left loses to it and the card goes
 * back alone at once. */
static int slower_than_alone(double hidden, int *leaves) {
  const sim h100 = {.rg = 2.8e12, .rc = 3.2e11, .o = 16e-6, .w = 1.68e7, .hidden = hidden};
  bml__balance b;
  bml__balance_init(&b, 1.0);
  b.cpu_rate = h100.rc; /* its CPU rate from an earlier split, the hidden cost left out */
  const double alone = sim_time(&h100, 1.0);
  int slower = 0;
  *leaves = 0;
  for (int i = 0; i < 2000; i++) {
    const bool was_alone = b.share >= 1.0;
    slower += sim_step(&h100, &b, 1.0) > alone;
    *leaves += was_alone && b.share < 1.0;
  }
  return slower;
}

Test(balance, a_split_that_does_not_beat_the_card_alone_goes_back_at_once) {
  int leaves;
  const int slower = slower_than_alone(40e-6, &leaves);
  cr_expect_eq(leaves, 1, "the card alone left %d times", leaves);
  cr_expect_eq(slower, 1, "%d of 2000 products slower than the card alone", slower);
  /* where the split saves what it predicts, it stays */
  cr_expect_eq(slower_than_alone(0.0, &leaves), 0);
  cr_expect_eq(leaves, 1);
}

/* After a split that lost, the card stays alone for BML_HOLD_FIRST
 * submissions, then twice as many after each further loss, however often
 * its CPU rate (renewed from another kind's) asks for a split. */
Test(balance, each_lost_split_holds_the_card_alone_twice_as_long) {
  const double w = 1.68e7, rt = 16e-6, alone = 22e-6;
  bml__balance b;
  bml__balance_init(&b, 1.0);
  for (int round = 0; round < 4; round++) {
    const int hold = BML_HOLD_FIRST << round;
    b.cpu_rate = 3.2e11; /* a rate that asks for a split */
    int asked = -1;
    for (int i = 0; i < hold + BML_LEAVE_AFTER + 1 && asked < 0; i++) {
      bml__balance_learn(&b, w, 0, false, alone, 0, 0.0, rt, 0.0);
      if (b.share < 1.0) asked = i;
    }
    cr_expect_eq(asked, (round ? hold / 2 : 0) + BML_LEAVE_AFTER - 1, "round %d: left after %d", round, asked + 1);
    /* the split: the card first, the CPU's part 60 us */
    const double wg = b.share * w;
    bml__balance_learn(&b, wg, w - wg, true, 60e-6, 60e-6, 0.0, rt, 0.0);
    cr_expect_eq(b.share, 1.0, "round %d: the lost split kept", round);
    cr_expect_eq(b.hold, hold, "round %d", round);
  }
}

/* The H200's round trip of a small product: the card alone takes 25.4 us,
 * the best split 23.7 (7 % less), and the driver makes every seventh
 * round trip twice as long.  The card stays alone: a split would save
 * little and move the kind's matrices at every slow round trip. */
Test(balance, a_noisy_round_trip_keeps_the_card_alone) {
  sim small = {.rg = 5e12, .rc = 3.4e11, .o = 22e-6, .w = 1.68e7};
  bml__balance b;
  bml__balance_init(&b, 1.0);
  b.cpu_rate = small.rc; /* its CPU rate known from an earlier split */
  for (int i = 0; i < 300; i++) {
    sim_step(&small, &b, i % 7 == 6 ? 2.0 : 1.0);
    cr_assert_eq(b.share, 1.0, "product %d: the card alone left for %f", i, b.share);
  }
  /* a smaller product, whose CPU alone beats the round trip: the card's
   * least share still costs the round trip, so the card stays alone */
  sim smaller = {.rg = 5e12, .rc = 3.4e11, .o = 22e-6, .w = 4e6};
  bml__balance_init(&b, 1.0);
  b.cpu_rate = smaller.rc;
  for (int i = 0; i < 30; i++) {
    sim_step(&smaller, &b, 1.0);
    cr_assert_eq(b.share, 1.0, "product %d: the card alone left for %f", i, b.share);
  }
  /* without the round trip, the same products look like a card of a
   * seventh of its rate, and a split */
  bml__balance_learn(&b, small.w, 0, false, 25.4e-6, 0, 0, 0.0, 0.0);
  bml__balance_learn(&b, small.w, 0, false, 25.4e-6, 0, 0, 0.0, 0.0);
  bml__balance_learn(&b, small.w, 0, false, 25.4e-6, 0, 0, 0.0, 0.0);
  cr_expect_lt(b.share, 0.95, "%f", b.share);
}

/* A kind of batch of a few small products and a token differ by 10x in
 * the CPU's rate on a host driving a card: each balance keeps its own. */
Test(balance, a_balance_takes_its_own_cpu_rate_before_another_measured_last) {
  bml__balance b;
  bml__balance_init(&b, 0.5);
  bml__balance_learn(&b, 1e6, 1e6, false, 1e-3, 1e-3, 0.0, 0.0, 0.0); /* both 1e9 a second */
  cr_expect_float_eq(b.share, 0.5, 1e-12);
  cr_expect_float_eq(b.cpu_rate, 1e9, 1e-3);
  bml__balance_learn(&b, 2e6, 0, false, 1e-3, 0.0, 1e11, 0.0, 0.0); /* the card 2e9 a second alone */
  cr_expect_float_eq(b.share, 2.0 / 3.0, 1e-12, "the CPU's rate of another kind taken: %f", b.share);
  bml__balance c;
  bml__balance_init(&c, 0.5);
  bml__balance_learn(&c, 2e6, 0, false, 1e-3, 0.0, 1e9, 0.0, 0.0);
  cr_expect_float_eq(c.share, 2.0 / 3.0, 1e-12, "none of its own yet: the one given");
}

/* One submission's CPU measured slow (another process on the host) sends
 * an even pair's balance to the card alone; its own rate then ages, and
 * the rate measured elsewhere brings the split back. */
Test(balance, a_cpu_rate_measured_slow_once_does_not_keep_the_card_alone) {
  sim igpu = {.rg = 2e11, .rc = 2e11, .o = 50e-6, .w = 6.7e7};
  bml__balance b;
  bml__balance_init(&b, 0.5);
  for (int i = 0; i < 20; i++) sim_step(&igpu, &b, 1.0);
  cr_assert_lt(b.share, 0.9);
  const double wg = b.share * igpu.w, wc = igpu.w - wg;
  bml__balance_learn(&b, wg, wc, false, igpu.o + wg / igpu.rg, wc / (igpu.rc / 20), igpu.rc, igpu.o, 0.0);
  cr_assert_eq(b.share, 1.0, "the CPU twenty times slower: the card alone (%f)", b.share);
  int back = -1;
  for (int i = 0; i < BML_RATE_AGE + 100 && back < 0; i++) {
    sim_step(&igpu, &b, 1.0);
    if (b.share < 0.9) back = i;
  }
  cr_expect_eq(back, BML_RATE_AGE + BML_LEAVE_AFTER - 1, "split again after %d products", back + 1);
  double best = sim_best(&igpu);
  for (int i = 0; i < 10; i++) sim_step(&igpu, &b, 1.0);
  cr_expect_leq(sim_step(&igpu, &b, 1.0), 1.1 * best);
}

/* A round trip measured long at the open (45 us for 20): the CPU alone
 * (30 us) looks faster than the card could ever be, and the balance sat
 * at its least share, 29.4 us a product against 20.6 for the card alone.
 * A card that beats the round trip believed goes alone, where its time
 * bounds the round trip the balance takes. */
Test(balance, a_round_trip_measured_long_does_not_keep_the_card_at_the_least_share) {
  sim m = {.rg = 1.7e13, .rc = 3.4e11, .o = 20e-6, .w = 1.02e7};
  bml__balance b;
  bml__balance_init(&b, BML_SHARE_MIN);
  const double rt = 45e-6;
  double t = 0;
  for (int i = 0; i < 20; i++) {
    const double wg = b.share * m.w, wc = m.w - wg, tg = m.o + wg / m.rg, tc = wc / m.rc;
    const bool first = tg <= tc;
    bml__balance_learn(&b, wg, wc, first, first ? tc : tg, tc, m.rc, rt, 0.0);
    t = tg > tc ? tg : tc;
  }
  cr_expect_eq(b.share, 1.0, "share %f", b.share);
  cr_expect_leq(t, 1.1 * sim_best(&m), "%g s a product against the best %g", t, sim_best(&m));
}

/* Stays split for a predicted gain of 5 %, leaves the card alone for 10 %. */
Test(balance, a_split_must_save_time_to_be_kept_and_more_to_be_taken) {
  bml__balance b;
  bml__balance_init(&b, 0.5);
  /* the card 15e9 a second, the CPU 1e9: split 0.9375, saving 6.25 % */
  bml__balance_learn(&b, 15e6, 1e6, false, 1e-3, 1e-3, 0.0, 0.0, 0.0);
  cr_expect_float_eq(b.share, 0.9375, 1e-12);
  /* the card 25e9: saving 3.8 % */
  bml__balance_learn(&b, 25e6, 1e6, false, 1e-3, 1e-3, 0.0, 0.0, 0.0);
  cr_expect_eq(b.share, 1.0);
  /* alone, the card 15e9 again: 6.25 % is not enough to leave */
  for (int i = 0; i < 10; i++) bml__balance_learn(&b, 15e6, 0, false, 1e-3, 0.0, 0.0, 0.0, 0.0);
  cr_expect_eq(b.share, 1.0);
  /* the card 8e9: saving 11 %, three times in a row */
  bml__balance_learn(&b, 8e6, 0, false, 1e-3, 0.0, 0.0, 0.0, 0.0);
  bml__balance_learn(&b, 8e6, 0, false, 1e-3, 0.0, 0.0, 0.0, 0.0);
  cr_expect_eq(b.share, 1.0);
  bml__balance_learn(&b, 15e6, 0, false, 1e-3, 0.0, 0.0, 0.0, 0.0); /* not in a row */
  bml__balance_learn(&b, 8e6, 0, false, 1e-3, 0.0, 0.0, 0.0, 0.0);
  bml__balance_learn(&b, 8e6, 0, false, 1e-3, 0.0, 0.0, 0.0, 0.0);
  cr_expect_eq(b.share, 1.0);
  bml__balance_learn(&b, 8e6, 0, false, 1e-3, 0.0, 0.0, 0.0, 0.0);
  cr_expect_float_eq(b.share, 8.0 / 9.0, 1e-12);
}

Test(balance, nothing_is_learnt_without_the_card_or_a_cpu_rate) {
  bml__balance b;
  bml__balance_init(&b, 0.5);
  bml__balance_learn(&b, 0, 100, false, 1.0, 1.0, 1e9, 0.0, 0.0);
  cr_expect_eq(b.share, 0.5, "the card had no part");
  bml__balance_learn(&b, 100, 0, false, 1.0, 0.0, 0.0, 0.0, 0.0);
  cr_expect_eq(b.share, 0.5, "the CPU had no rows and its rate is unknown");
  bml__balance_learn(&b, 100, 0, false, 1.0, 0.0, 100.0, 0.0, 0.0);
  cr_expect_eq(b.share, 0.5, "equal rates: an even split");
  bml__balance_learn(&b, 100, 100, false, 25.0, 100.0, 0.0, 0.0, 0.0);
  cr_expect_float_eq(b.share, 0.8, 1e-12, "the card's 4 a second against the CPU's 1");
  bml__balance_learn(&b, 100, 100, false, 1.0, 100.0, 0.0, 0.0, 0.0);
  cr_expect_eq(b.share, 1.0, "the card's 100 a second against the CPU's 1: the CPU's part is not worth it");
  bml__balance_init(&b, 7.0);
  cr_expect_eq(b.share, 1.0);
  bml__balance_init(&b, 0.0);
  cr_expect_eq(b.share, BML_SHARE_MIN);
  bml__balance_learn(&b, 1, 1e9, false, 1e9, 1.0, 0.0, 0.0, 0.0);
  cr_expect_eq(b.share, BML_SHARE_MIN, "never below the least share");
}

Test(balance, a_rest_is_waited_out_when_the_cpu_would_take_longer) {
  cr_expect(bml__rest_worth_waiting(0.001, 1e9, 1e11), "1 ms of rest against 10 ms on the CPU");
  cr_expect(!bml__rest_worth_waiting(0.02, 1e9, 1e11), "20 ms of rest against 10 ms on the CPU");
  cr_expect(!bml__rest_worth_waiting(0.0001, 1e9, 0.0), "the CPU's rate unknown: never wait");
}

Test(balance, a_held_split_costs_what_its_larger_part_grows) {
  cr_expect_eq(bml__split_loss(1000, 500, 500), 0.0);
  cr_expect_float_eq(bml__split_loss(1000, 500, 560), 60.0 / 440.0, 1e-12, "the CPU's part 500 for 440");
  cr_expect_float_eq(bml__split_loss(1000, 500, 435), 65.0 / 435.0, 1e-12, "the card's part 500 for 435");
  cr_expect_float_eq(bml__split_loss(1000, 1000, 990), 10.0 / 990.0, 1e-12, "the card alone for 99 %%");
  cr_expect_eq(bml__split_loss(1000, 990, 1000), HUGE_VAL, "the CPU's part from nothing");
  cr_expect_eq(bml__split_loss(1000, 0, 10), HUGE_VAL, "the card's part from nothing");
  cr_expect_eq(bml__split_loss(1000, 10, 0), HUGE_VAL, "the card's part to nothing");
  cr_expect(bml__split_loss(1000, 500, 560) <= BML_HELD_LOSS && bml__split_loss(1000, 500, 570) > BML_HELD_LOSS);
  cr_expect(bml__split_loss(1000, 530, 980) > BML_HELD_FAR, "a token's split far from its wish moves at once");
}

Test(balance, a_card_first_forever_stays_finite) {
  /* the CPU's time does not follow the share (a group the limiter keeps on
   * the CPU): the card finishes first at every submission */
  bml__balance b;
  bml__balance_init(&b, 0.5);
  for (int i = 0; i < 5000; i++) {
    double wg = b.share * 1e9, wc = 1e9 - wg;
    bml__balance_learn(&b, wg, wc, true, 1e-3, 1e-3, 1e11, 0.0, 0.0);
    cr_assert(isfinite(b.card_rate) && b.share >= BML_SHARE_MIN && b.share <= 1.0,
              "submission %d: share %g, card rate %g", i, b.share, b.card_rate);
  }
  cr_expect_eq(b.share, 1.0);
  const double cpu_rate = b.cpu_rate;
  bml__balance_learn(&b, 1e300, 1e-300, true, 1e-300, 1.0, 1.0, 0.0, 0.0); /* an overflow */
  cr_expect(isfinite(b.card_rate) && b.share == 1.0, "share %g, card rate %g", b.share, b.card_rate);
  cr_expect_eq(b.cpu_rate, cpu_rate, "an overflow taught the CPU's rate: %g", b.cpu_rate);
}

/* A kind of batch whose split takes 62 ms where its CPU rate says the CPU
 * alone would take 50 (the rate measured beside the card): it tries the CPU
 * alone once, which takes 25, and stays there for BML_HOLD_FIRST
 * submissions, then lets the card show it pays (it does not: 62 again), and
 * stays twice as long after each such try. */
Test(balance, a_kind_whose_card_takes_the_pools_time_runs_on_the_cpu_alone) {
  const double w = 1.0e9, rate = w / 50e-3;
  bml__balance b;
  bml__balance_init(&b, 0.06);
  cr_expect_not(bml__balance_cpu_first(&b, w, rate), "no split timed yet");
  bml__balance_cpu_timed(&b, false, 62e-3);
  cr_expect(bml__balance_cpu_first(&b, w, rate), "the CPU alone not tried");
  bml__balance_cpu_timed(&b, true, 25e-3);
  cr_expect(b.cpu);
  for (int round = 0; round < 3; round++) {
    const int hold = BML_HOLD_FIRST << round;
    int on_cpu = 0;
    for (int i = 0; i < hold; i++) {
      const bool cpu = bml__balance_cpu_first(&b, w, rate);
      on_cpu += cpu;
      bml__balance_cpu_timed(&b, cpu, cpu ? 25e-3 : 62e-3);
    }
    cr_expect_eq(on_cpu, hold, "round %d: %d of %d on the CPU alone", round, on_cpu, hold);
    cr_expect_not(bml__balance_cpu_first(&b, w, rate), "round %d: the card not tried again", round);
    bml__balance_cpu_timed(&b, false, 62e-3);
    cr_expect(b.cpu, "round %d: a card that did not pay taken back", round);
  }
  /* a card that now pays (a quieter host: 10 ms) takes part again at its
   * next turn, and the CPU alone is no longer tried: the card beats what
   * the CPU's rate says */
  int turn = -1;
  for (int i = 0; i <= (BML_HOLD_FIRST << 3) && turn < 0; i++) {
    if (!bml__balance_cpu_first(&b, w, rate)) turn = i;
    bml__balance_cpu_timed(&b, turn < 0, turn < 0 ? 25e-3 : 10e-3);
  }
  cr_expect_eq(turn, BML_HOLD_FIRST << 3, "the card's turn after %d", turn);
  cr_expect_not(b.cpu, "the card that pays kept out");
  int tried = 0;
  for (int i = 0; i < 1000; i++) {
    const bool cpu = bml__balance_cpu_first(&b, w, rate);
    tried += cpu;
    bml__balance_cpu_timed(&b, cpu, cpu ? 25e-3 : 10e-3);
  }
  cr_expect_eq(tried, 0, "the CPU alone tried %d times beside a card of 10 ms", tried);
}

/* A CPU alone that does not pay (the card's part took none of the pool's
 * time) is tried again only after BML_HOLD_FIRST submissions, then twice as
 * many; a fast card (its time below the CPU's prediction) never; nothing
 * is learnt from no time. */
Test(balance, a_cpu_alone_that_does_not_pay_is_tried_ever_less_often) {
  const double w = 1.0e9, rate = w / 20e-3;
  bml__balance b;
  bml__balance_init(&b, 0.5);
  bml__balance_cpu_timed(&b, false, 0.0);
  bml__balance_cpu_timed(&b, false, NAN);
  cr_expect_eq(b.with_card_s, 0.0);
  int at[4], n = 0;
  for (int i = 0; i < 200 && n < 4; i++) {
    const bool cpu = bml__balance_cpu_first(&b, w, rate);
    if (cpu) at[n++] = i;
    bml__balance_cpu_timed(&b, cpu, cpu ? 20e-3 : 21e-3); /* the CPU alone saves under 5 % */
    cr_expect_not(b.cpu, "submission %d: the CPU alone kept", i);
  }
  cr_assert_eq(n, 4);
  for (int k = 1; k < 4; k++)
    cr_expect_eq(at[k] - at[k - 1], (BML_HOLD_FIRST << (k - 1)) + 1, "try %d after %d", k, at[k] - at[k - 1]);
  bml__balance_init(&b, 0.9);
  for (int i = 0; i < 100; i++) {
    cr_expect_not(bml__balance_cpu_first(&b, w, rate));
    bml__balance_cpu_timed(&b, false, 0.5e-3);
  }
  cr_expect_not(bml__balance_cpu_first(&b, w, 0.0), "a CPU of no known rate tried");
}
