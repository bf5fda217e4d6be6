/* program.h -- a card opened and closed, its queues, and the builds of cl/q1_0*.cl (program.c). */
#ifndef BML_PROGRAM_H
#define BML_PROGRAM_H

#include "base/hooks.h"
#include "card/card.h"

/* "q1_0_mat_vec", "q1_0_mat_vec8", "q1_0_mat_vec_l", "q1_0_mat_vec_lr". */
const char *bml__kernel_name(bml__kernel_id k);

/* "q1_0_mat_vec_lb", "q1_0_mat_vec_lrb". */
const char *bml__batched_name(bml__batched_id k);

/* Sets the table kernels' shapes for later builds: q1_0_mat_vec_l's rows
 * per work-group, q1_0_mat_vec_lr's rows per slice, slices per work-item
 * and lanes per work-item.  A work-group is 8 / lanes work-items per row of
 * a slice: rows are halved (not below a work-group of 64) until it fits the
 * device's work-group size; lanes other than 2 are 1, and slices are
 * clamped to 1..4 / lanes.  Cannot fail. */
void bml__card_set_tunables(bml__card *c, size_t lrows, size_t lrrows, size_t lrrpt, size_t lrlpt);
/* q1_0_mat_vec_lr's work-group size. */
size_t bml__card_lr_wg(const bml__card *c);

/* Whether the table kernels double-buffer their table (32 KiB of local
 * memory and the scales): on a card with less, one buffer and a second
 * barrier per tile. */
bool bml__card_table_halves2(const bml__card *c);

/* The work-group size of q1_0_mat_vec8 on this card (-DBML_WG): 64, or the
 * largest multiple of 8 the device allows.  Cannot fail. */
size_t bml__card_wg8(const bml__card *c);

/* Creates a context and an in-order queue on the device.  Returns 0, or the
 * OpenCL error with why written into err. */
int bml__card_open(const bml__cl_info *ci, bml__card **out, char *err, size_t errlen);
/* The same on an engine's context (retained; NULL: one of its own) and
 * queue (retained, an in-order queue of ctx and the device; NULL: one of
 * its own on ctx).  The card's close releases what it retained. */
int bml__card_open_on(const bml__cl_info *ci, cl_context ctx, cl_command_queue queue, bml__card **out, char *err,
                      size_t errlen);

/* What the cache knows a device by: {"device": "uuid:..." (cl_khr_device_uuid),
 * else "pci:0000:03:00.0", else "", "name", "platform", "driver",
 * "bankml_cl_version", "source": the hash of cl/q1_0*.cl and cl/nvidia.cl}.  NULL when out of
 * memory. */
struct json_t *bml__card_identity(const bml__cl_info *ci);
void bml__card_close(bml__card *c); /* NULL-safe */

/* Gives c `queues` in-order queues in all (its own and queues - 1 side
 * queues, at most BML_MAX_QUEUES), for launches that may run side by side.
 * Returns 0 or an OpenCL error (the queues made so far stay). */
int bml__card_set_queues(bml__card *c, size_t queues);
/* Finishes and releases c's side queues: it has its own queue alone. */
void bml__card_drop_side_queues(bml__card *c);
/* clFinish on every queue of c; the first error, or 0. */
int bml__card_finish(bml__card *c);

/* Builds the card's program: cl/nvidia.cl then cl/q1_0*.cl where
 * c->nvidia_build, else cl/q1_0*.cl alone, with
 * -cl-fp32-correctly-rounded-divide-sqrt when the device advertises it,
 * never a fast-math option, plus -DBML_EMULATE_FMA=1 when emulate and
 * NVIDIA's options when c->nvidia_build (a build that fails with them is
 * tried once without, and clears the flag for the card's later builds).
 * test (may be NULL): a test's additions, its hooks' extra_options,
 * device_source and source_after (base/hooks.h).  Returns 0, or an error
 * with the build log and options in *log (malloc'd, free it; may be set on
 * success too: NULL when there is nothing to say). */
int bml__card_build(bml__card *c, bool emulate, const bml__oracle_hooks *test, bml__build *b, char **log);
/* The same, the program taken from the binary remembered for the card,
 * these options and sources where there is one the driver takes
 * (*from_binary set), else built from source and its binary remembered
 * (cache.c).  A binary only saves the compile: what the program computes is
 * checked as any. */
int bml__card_build_cached(bml__card *c, bool emulate, const bml__oracle_hooks *test, bml__build *b, char **log,
                           bool *from_binary);
/* The options bml__card_build would use now (b->options' size). */
void bml__card_build_options(const bml__card *c, bool emulate, const bml__oracle_hooks *test, char *buf, size_t len);
/* The hash of the sources bml__card_build would use now, in order. */
uint64_t bml__card_sources_hash(const bml__card *c, const bml__oracle_hooks *test);
void bml__build_release(bml__build *b); /* NULL-safe, leaves b zeroed */

#endif
