/* oracle.h -- the on-card verification, as the worker and the tests use it. */
#ifndef BML_ORACLE_H
#define BML_ORACLE_H

#include "card/card.h"

/* Verifies device d (report index `index`), reporting each check through
 * opt->on_line.  Returns 0 when every check passed, BML_EVERIFY when one
 * did not (a build failure, an OpenCL error and a differing row all refuse
 * the card), or BML_ENOMEM (the card not verified either).  On 0 and when card is not NULL, *card is the
 * open card and *use the build the products must use (native fma when the
 * probe found it exact, else the emulated one); the caller owns both. */
int bml__oracle_verify(const bml__device *d, size_t index, const bml_verify_options *opt, bml__card **card,
                       bml__build *use);

/* The steps of bml__oracle_verify, for the worker's open:
 * Opens device d's card (on the engine's context and queue where they are
 * not NULL: bml__card_open_on) with the hooks' settings and its tuning.
 * Returns 0 and *out, or an error with err saying it. */
int bml__oracle_card_open(const bml__device *d, cl_context ctx, cl_command_queue queue, bml__card **out, char *err,
                          size_t errlen);
/* Verifies the open card c (device d, report index `index`) as
 * bml__oracle_verify does; on 0 and when use is not NULL, *use is the
 * build the products must use (the caller releases it). */
int bml__oracle_verify_card(bml__card *c, const bml__device *d, size_t index, const bml_verify_options *opt,
                            bml__build *use);
/* Whether a verification with opt checks the small shapes only (opt's
 * quick, or the hooks'). */
bool bml__oracle_quick(const bml_verify_options *opt);

/* Confirms a remembered verdict on the card, in milliseconds: builds the
 * remembered variant (the emulated fma, or the native), runs the fma probe
 * (the emulation exact on its domain; the native fma exact where the build
 * uses it) and every kernel, the batched ones too, on a random product
 * with -128 quants and a layer-shaped one (data from seed), every row
 * compared with the CPU kernel.  Returns 0 with *use built (the caller
 * releases it), or BML_EVERIFY (why says what differed or failed: the
 * remembered verdict does not stand), BML_ENOMEM. */
int bml__oracle_confirm(bml__card *c, bool emulated, uint64_t seed, bml__build *use, char *why, size_t len);

#endif
