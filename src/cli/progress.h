/* progress.h -- one line on stderr saying what a long command is doing and how far along: only on a terminal. */
#ifndef BML_CLI_PROGRESS_H
#define BML_CLI_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>

/* Starts the display, "TITLE [done/total UNIT] what (12 s)" (total 0: no
 * total is known, "[UNIT: done]"), redrawn every quarter second, only when
 * stderr is a terminal (and TERM is not "dumb"): otherwise nothing is
 * written, ever, and every call below does nothing.  Everything else the
 * process writes to stderr (its messages, the library's log) goes above
 * the line: stderr is replaced by a stream that takes the line down before
 * each write and puts it back after each whole line.  Returns whether the
 * display is on.  progress_init comes first. */
bool progress_start(const char *title, size_t total, const char *unit);

/* Replaces stderr (see progress_start) where it is a terminal, and
 * nothing else: a command calls it first, before the library starts
 * threads (a driver's) that might write to stderr while it is replaced.
 * Cannot fail (without the replacement there is no display). */
void progress_init(void);

/* What is being done now (printf's format; quote a driver's strings with
 * CLI_PRINTABLE); redraws, and ends a progress_hold.  Cannot fail. */
void progress_step(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* One more done.  Cannot fail. */
void progress_advance(void);

/* Takes the line down until the next progress_step: before writing to
 * stdout, which may be the same terminal.  Cannot fail. */
void progress_hold(void);

/* Takes the line down and stops the display (what stderr was replaced by
 * stays, passing everything through).  Cannot fail. */
void progress_stop(void);

#endif
