/* plan.c -- the worker's pure decisions: a product's card rows, its group, a held matrix's moves, the queues, the share. */
#include "share/plan.h"

#include "share/limiter.h"

size_t bml__plan_card_rows(double share, size_t rows) {
  size_t r = (size_t)(share * (double)rows + 0.5);
  return r > rows ? rows : r;
}

size_t bml__plan_group_end(const bml_product *p, size_t count, size_t i) {
  size_t j = i + 1;
  while (j < count && j - i < BML_PLAN_GROUP_MOST && p[j].act == p[i].act && p[j].n == p[i].n) j++;
  return j;
}

/* STRIKES products in a row whose balance asks for a split beyond
 * BML_HELD_LOSS from the one the card holds upload the matrix again with
 * it: a balance that probes a step past its mark and back does not, a
 * change that lasts does; one beyond BML_HELD_FAR moves it at once.  But
 * a move back (the other way from the last one) waits until COOLDOWN <<
 * (the moves so far less one, at most 8) products after the last upload:
 * a balance that swings (a noisy host) uploads the matrix a number of
 * times that grows with the log of the products, not with them (on the
 * H200 a 1.18 GB token moved at nearly every product took 3 s), while one
 * that converges moves it at once each time.  Leaving the card alone for
 * a split is a move that must pay for itself: the balance predicts the
 * split's saving a product (gain), and the products the matrix served
 * since its last upload stand for those it will serve before the next;
 * until their saving exceeds the last upload's seconds the card stays
 * alone.  (On an NVIDIA H100 after idle gaps, the card alone's slower
 * products made the balance ask for a split at once; each move there and
 * back took milliseconds, a single product's 34-1800x: a 4096x4096 split
 * 1.4x the card alone's median, 12288x4096 2.3x.) */
#define STRIKES 3
#define COOLDOWN 4

bool bml__plan_move(bml__moves *h, const bml_product *p, const size_t *held, const size_t *want, size_t count,
                    double gain) {
  h->since_move++;
  double loss = 0;
  size_t wanted = 0, held_all = 0;
  bool alone = true; /* the card holds every row */
  for (size_t i = 0; i < count; i++) {
    wanted += want[i], held_all += held[i];
    alone &= held[i] == p[i].rows;
    double l = bml__split_loss(p[i].rows, held[i], want[i]);
    if (l > loss) loss = l;
  }
  bool close = loss <= BML_HELD_LOSS;
  bool far = loss > BML_HELD_FAR || (!close && ++h->strikes >= STRIKES);
  int dir = wanted > held_all ? 1 : -1;
  bool cooled = h->moves == 0 || dir == h->last_dir ||
                h->since_move >= ((size_t)COOLDOWN << (h->moves - 1 < 8 ? h->moves - 1 : 8));
  const bool repaid = !(alone && wanted < held_all && h->upload_s > 0) || gain * (double)h->since_move >= h->upload_s;
  if (far && cooled && repaid) {
    h->strikes = 0;
    return true;
  }
  if (close) h->strikes = 0;
  return false;
}

/* In-order queues a batch's launches are spread over (BANKML_GPU_QUEUES),
 * on NVIDIA's driver.  Elsewhere one, unless the variable asks for more:
 * with several, the main queue copies later activations into the buffer
 * that kernels on the side queues are reading, and those kernels write
 * other rows of one results buffer side by side.  OpenCL leaves a memory
 * object changed in one queue while another uses it undefined (the
 * specification's appendix on shared objects); NVIDIA's driver was
 * measured and checked at it (doc/PERFORMANCE.md: 4 queues took a
 * bonsai-8b token from 1.01 ms to 0.69, every row bit-exact), no other was;
 * every open checks the batches on the card's queues (share/check.c), and
 * drops to one queue where several give other bits. */
#define QUEUES_DEFAULT 4

int bml__worker_queues(int asked, bool nvidia_driver, bool software) {
  if (software) return 1;
  return asked > 0 ? asked : nvidia_driver ? QUEUES_DEFAULT : 1;
}

double bml__calibrated_share(double card_s, double cpu_s) {
  return cpu_s / (card_s + cpu_s); /* card rate / (card rate + CPU rate), the rates 1/time */
}
