/* progress.c -- the one-line progress display of bench and devices --verify, on a terminal's stderr only. */
#define _GNU_SOURCE /* fopencookie; glibc's stderr is a variable a program may set */

#include "progress.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define TICK_NS 250000000L /* the elapsed time is redrawn four times a second */

static struct {
  pthread_mutex_t lock;
  pthread_cond_t wake;
  pthread_t ticker;
  bool wrapped;   /* stderr is the stream below (set once, kept to the end) */
  bool active;    /* the display is on */
  bool stopping;  /* the ticker is to end */
  bool drawn;     /* the line is on the terminal now */
  bool midline;   /* the last write to stderr did not end its line: draw nothing */
  bool held;      /* down until the next step (stdout is being written) */
  char title[64], unit[24], text[256];
  size_t done, total;
  struct timespec t0;
} P = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

/* ---- drawing (P.lock held) --------------------------------------------------- */

static void write_all(const char *s, size_t len) {
  while (len > 0) {
    ssize_t n = write(STDERR_FILENO, s, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return; /* a terminal that went away: the display is lost, nothing else */
    s += n;
    len -= (size_t)n;
  }
}

static void take_down(void) {
  if (P.drawn) write_all("\r\033[K", 4);
  P.drawn = false;
}

static double elapsed(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)(now.tv_sec - P.t0.tv_sec) + (double)(now.tv_nsec - P.t0.tv_nsec) * 1e-9;
}

/* The terminal's width; 80 when it does not say. */
static size_t columns(void) {
  struct winsize ws;
  return ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 ? ws.ws_col : 80;
}

/* Draws the line, cut (at a whole UTF-8 character) to one column less than
 * the terminal's width: a line that wrapped could not be taken down. */
static void draw(void) {
  if (!P.active || P.midline || P.held) return;
  char line[512];
  int len = P.total ? snprintf(line, sizeof line, "%s [%zu/%zu %s] %s (%.0f s)", P.title, P.done, P.total, P.unit,
                               P.text, elapsed())
                    : snprintf(line, sizeof line, "%s [%s: %zu] %s (%.0f s)", P.title, P.unit, P.done, P.text, elapsed());
  size_t n = len < 0 ? 0 : (size_t)len < sizeof line ? (size_t)len : sizeof line - 1;
  size_t width = columns() - 1;
  if (n > width) {
    n = width;
    while (n > 0 && ((unsigned char)line[n] & 0xc0) == 0x80) n--; /* not inside a character */
  }
  write_all("\r", 1);
  write_all(line, n);
  write_all("\033[K", 3);
  P.drawn = true;
}

/* ---- stderr, through the display ----------------------------------------------- */

/* Every write to stderr: the line down, the text, the line back after a
 * whole line.  stdio holds the stream's own lock around this. */
static ssize_t through(void *cookie, const char *buf, size_t size) {
  (void)cookie;
  pthread_mutex_lock(&P.lock);
  take_down();
  write_all(buf, size);
  P.midline = size > 0 && buf[size - 1] != '\n';
  draw();
  pthread_mutex_unlock(&P.lock);
  return (ssize_t)size;
}

static bool wrap_stderr(void) {
  if (P.wrapped) return true;
  FILE *f = fopencookie(NULL, "w", (cookie_io_functions_t){.write = through});
  if (!f) return false;
  setvbuf(f, NULL, _IOLBF, 0); /* whole lines reach through() */
  fflush(stderr);
  stderr = f;
  P.wrapped = true;
  return true;
}

/* ---- the ticker --------------------------------------------------------------- */

static void *tick(void *arg) {
  (void)arg;
  pthread_mutex_lock(&P.lock);
  while (!P.stopping) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += TICK_NS;
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&P.wake, &P.lock, &until);
    if (!P.stopping) draw();
  }
  pthread_mutex_unlock(&P.lock);
  return NULL;
}

/* ---- the calls ----------------------------------------------------------------- */

/* Whether stderr is a terminal that takes the line's controls. */
static bool terminal(void) {
  const char *term = getenv("TERM");
  return isatty(STDERR_FILENO) && !(term && strcmp(term, "dumb") == 0);
}

void progress_init(void) {
  if (terminal()) wrap_stderr();
}

bool progress_start(const char *title, size_t total, const char *unit) {
  if (P.active || !terminal() || !wrap_stderr()) return false;
  pthread_mutex_lock(&P.lock);
  snprintf(P.title, sizeof P.title, "%s", title);
  snprintf(P.unit, sizeof P.unit, "%s", unit);
  snprintf(P.text, sizeof P.text, "starting");
  P.done = 0;
  P.total = total;
  P.stopping = P.held = P.midline = false;
  clock_gettime(CLOCK_MONOTONIC, &P.t0);
  P.active = pthread_create(&P.ticker, NULL, tick, NULL) == 0;
  draw();
  pthread_mutex_unlock(&P.lock);
  return P.active;
}

void progress_step(const char *fmt, ...) {
  if (!P.active) return;
  pthread_mutex_lock(&P.lock);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(P.text, sizeof P.text, fmt, ap);
  va_end(ap);
  P.held = false;
  draw();
  pthread_mutex_unlock(&P.lock);
}

void progress_advance(void) {
  if (!P.active) return;
  pthread_mutex_lock(&P.lock);
  P.done++;
  draw();
  pthread_mutex_unlock(&P.lock);
}

void progress_hold(void) {
  if (!P.active) return;
  pthread_mutex_lock(&P.lock);
  take_down();
  P.held = true;
  pthread_mutex_unlock(&P.lock);
}

void progress_stop(void) {
  if (!P.active) return;
  pthread_mutex_lock(&P.lock);
  P.stopping = true;
  pthread_cond_signal(&P.wake);
  pthread_mutex_unlock(&P.lock);
  pthread_join(P.ticker, NULL);
  pthread_mutex_lock(&P.lock);
  take_down();
  P.active = false;
  pthread_mutex_unlock(&P.lock);
}
