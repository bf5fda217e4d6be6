/* test_limiter.c -- the limiter and the per-shape decision as plain logic: time and memory passed in. */
#include <criterion/criterion.h>

#include "limiter.h"

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
  bml__limiter_dispatched(&l, 10.0, 10.4); /* d = 0.4: rest 0.4 * 0.2 / 0.8 = 0.1 */
  cr_expect(bml__limiter_resting(&l, 10.45));
  cr_expect(bml__limiter_resting(&l, 10.4999));
  cr_expect(!bml__limiter_resting(&l, 10.5001));
  bml__limiter_init(&l, 1.0, 1, false);
  bml__limiter_dispatched(&l, 1.0, 2.0);
  cr_expect(!bml__limiter_resting(&l, 2.0), "limit 1: no rest");
  bml__limiter_init(&l, 0.05, 1, false);
  bml__limiter_dispatched(&l, 0.0, 1.0);
  cr_expect(bml__limiter_resting(&l, 19.9) && !bml__limiter_resting(&l, 20.1), "limit 0.05: rest 19 d");
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
  cr_expect(bml__shape_wants_card(&s));
  cr_expect(!bml__shape_record(&s, true, 99.0));
  cr_expect_eq(s.state, BML_SHAPE_TUNING);
  cr_expect_eq(s.nsplit + s.ncpu, 0, "the warm-up (with its upload) is not a timing");
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
