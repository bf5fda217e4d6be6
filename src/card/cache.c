/* cache.c -- what bankml-cl remembers of each card between processes: one JSON file of keyed entries, and program binaries. */
#include "card/cache.h"
#include "base/env.h"
#include "base/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CACHE_FILE "cards.json"
/* A binary larger than this is not a program of ours. */
#define MAX_BINARY ((size_t)256 << 20)

/* Said once a process: where nothing can be remembered, and why. */
static atomic_bool cache_warned;
#define cache_warning(...)                                                                \
  do {                                                                                    \
    if (!atomic_exchange(&cache_warned, true)) bml__warn(BML_CAT_BUILD, __VA_ARGS__);     \
  } while (0)

uint64_t bml__hash64(const void *p, size_t n, uint64_t h) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

void bml__hash_hex(const char *s, char buf[17]) {
  snprintf(buf, 17, "%016llx", (unsigned long long)bml__hash64(s, strlen(s), BML_HASH_SEED));
}

/* (cache.h) XDG says to ignore a relative $XDG_CACHE_HOME; a relative
 * BANKML_CACHE_DIR would depend on the directory the program runs in. */
int bml__cache_dir(char *buf, size_t len) {
  const char *dir = NULL, *xdg = NULL, *home = NULL;
  bml__env_cache_dirs(&dir, &xdg, &home);
  buf[0] = '\0';
  if (dir && dir[0] != '/') {
    cache_warning("BANKML_CACHE_DIR=\"%s\" is not an absolute path: nothing is remembered (each open verifies, "
                  "tunes and calibrates the card again)", dir);
    return BML_EIO;
  }
  if (xdg && xdg[0] != '/') xdg = NULL;
  if (home && home[0] != '/') home = NULL;
  int n = dir ? snprintf(buf, len, "%s", dir)
        : xdg ? snprintf(buf, len, "%s/bankml-cl", xdg)
        : home ? snprintf(buf, len, "%s/.cache/bankml-cl", home)
               : -1;
  /* room for the longest file name below */
  if (n > 0 && (size_t)n + 40 < len) return 0;
  buf[0] = '\0';
  cache_warning("%s: nothing is remembered (each open verifies, tunes and calibrates the card again)",
                n < 0 ? "no cache directory (set BANKML_CACHE_DIR or HOME)" : "the cache directory's path is too long");
  return BML_EIO;
}

static int cache_file(char *buf, size_t len, const char *name) {
  char dir[1024];
  if (bml__cache_dir(dir, sizeof dir) != 0) return BML_EIO;
  int n = snprintf(buf, len, "%s/%s", dir, name);
  return n > 0 && (size_t)n < len ? 0 : BML_EIO;
}

/* The directories of path, made 0700 as the XDG base directory spec asks
 * of a cache (a directory that exists keeps its mode). */
static void make_dirs(const char *path) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s", path);
  for (char *p = dir + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      if (mkdir(dir, 0700) != 0 && errno != EEXIST) return;
      *p = '/';
    }
}

/* Writes len bytes (or, with j, j's JSON) to a temporary file beside path
 * and renames it over path.  Returns 0 or an errno. */
static int replace_file(const char *path, const json_t *j, const void *data, size_t len) {
  char tmp[1100];
  snprintf(tmp, sizeof tmp, "%s.XXXXXX", path);
  int fd = mkstemp(tmp);
  if (fd < 0) return errno;
  int e = 0;
  if (j) {
    errno = 0;
    if (json_dumpfd(j, fd, JSON_INDENT(2)) != 0 || write(fd, "\n", 1) != 1) e = errno ? errno : EIO;
  } else {
    for (size_t off = 0; e == 0 && off < len;) {
      ssize_t w = write(fd, (const char *)data + off, len - off);
      if (w > 0) off += (size_t)w;
      else if (errno != EINTR) e = errno ? errno : EIO;
    }
  }
  if (close(fd) != 0 && e == 0) e = errno;
  if (e == 0 && rename(tmp, path) != 0) e = errno;
  if (e != 0) remove(tmp);
  return e;
}

/* ---- the entries ------------------------------------------------------------------ */

/* The file's JSON, or NULL when it is absent, not a regular file (a FIFO
 * would block the read), not JSON or not this layout. */
static json_t *load_root(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return NULL;
  json_error_t e;
  json_t *root = json_load_file(path, 0, &e);
  if (!json_is_object(root) || !json_is_integer(json_object_get(root, "schema")) ||
      json_integer_value(json_object_get(root, "schema")) != BML_CACHE_SCHEMA ||
      !json_is_array(json_object_get(root, "entries"))) {
    bml__debug(BML_CAT_BUILD, "cache %s not read (%s): what it held is found again, and the file replaced", path,
               root ? "another layout" : e.text);
    json_decref(root);
    return NULL;
  }
  return root;
}

static bool entry_is(json_t *e, const char *kind, const json_t *key) {
  const char *k = json_string_value(json_object_get(e, "kind"));
  return json_is_object(e) && k && strcmp(k, kind) == 0 && json_equal(json_object_get(e, "key"), (json_t *)key);
}

json_t *bml__cache_find(const char *kind, const json_t *key) {
  char path[1100];
  if (cache_file(path, sizeof path, CACHE_FILE) != 0) return NULL;
  json_t *root = load_root(path);
  json_t *entries = json_object_get(root, "entries"), *found = NULL;
  for (size_t i = json_array_size(entries); !found && i-- > 0;) /* the latest first */
    if (entry_is(json_array_get(entries, i), kind, key)) found = json_incref(json_array_get(entries, i));
  json_decref(root);
  return found;
}

/* Adds entry to the file's entries (under the lock: store). */
static int store_locked(const char *path, const char *kind, const json_t *key, json_t *entry) {
  json_t *root = load_root(path); /* another layout is replaced whole */
  if (!root) root = json_pack("{s:i, s:[]}", "schema", BML_CACHE_SCHEMA, "entries");
  json_t *entries = json_object_get(root, "entries");
  for (size_t i = json_array_size(entries); i-- > 0;)
    if (entry_is(json_array_get(entries, i), kind, key)) json_array_remove(entries, i);
  while (json_array_size(entries) >= BML_CACHE_MAX_ENTRIES) json_array_remove(entries, 0);
  int e = !root || json_object_set_new(entry, "kind", json_string(kind)) != 0 ||
                  json_object_set_new(entry, "key", json_deep_copy(key)) != 0 ||
                  json_array_append(entries, entry) != 0
              ? ENOMEM
              : replace_file(path, root, NULL, 0);
  if (e != 0)
    cache_warning("cannot write the cache %s (%s): the card is verified, tuned and calibrated again next time", path,
                  strerror(e));
  json_decref(root);
  return e ? BML_EIO : 0;
}

int bml__cache_store(const char *kind, const json_t *key, json_t *entry) {
  char path[1100];
  if (!entry || cache_file(path, sizeof path, CACHE_FILE) != 0) {
    json_decref(entry);
    return BML_EIO;
  }
  make_dirs(path);
  /* two processes storing at once each keep the other's new entry; without
   * the lock (it cannot be made) the store goes ahead: at worst one entry
   * is found again next time */
  char lock[1110];
  snprintf(lock, sizeof lock, "%s.lock", path);
  int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0)
    while (flock(fd, LOCK_EX) != 0 && errno == EINTR) {
    }
  int rc = store_locked(path, kind, key, entry);
  if (fd >= 0) close(fd); /* releases the lock */
  json_decref(entry);
  return rc;
}

/* ---- program binaries ------------------------------------------------------------- */

/* A binary's file: this header, then the driver's bytes. */
typedef struct {
  char magic[8];     /* "BMLPRG1\n" */
  uint64_t len;      /* bytes after the header */
  uint64_t checksum; /* bml__hash64 of them */
  uint64_t key;      /* the key it was stored under (its name says it too) */
} binary_header;

static const char binary_magic[8] = {'B', 'M', 'L', 'P', 'R', 'G', '1', '\n'};

static int binary_path(uint64_t key, char *buf, size_t len) {
  char name[48];
  snprintf(name, sizeof name, "program-%016llx.bin", (unsigned long long)key);
  return cache_file(buf, len, name);
}

int bml__cache_binary_read(uint64_t key, void **data, size_t *len) {
  *data = NULL;
  *len = 0;
  char path[1100];
  if (binary_path(key, path, sizeof path) != 0) return BML_EIO;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return BML_EIO;
  struct stat st;
  binary_header h;
  unsigned char *p = NULL;
  int rc = BML_EIO;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size > sizeof h &&
      (size_t)st.st_size - sizeof h <= MAX_BINARY && read(fd, &h, sizeof h) == (ssize_t)sizeof h &&
      memcmp(h.magic, binary_magic, sizeof h.magic) == 0 && h.key == key &&
      h.len == (uint64_t)st.st_size - sizeof h && (p = malloc(h.len)) != NULL &&
      read(fd, p, h.len) == (ssize_t)h.len && bml__hash64(p, h.len, BML_HASH_SEED) == h.checksum)
    rc = 0;
  close(fd);
  if (rc != 0) {
    bml__debug(BML_CAT_BUILD, "program binary %s not used (%s): built from source", path,
               p ? "damaged, truncated or another key's" : "absent or unreadable");
    free(p);
    return rc;
  }
  *data = p;
  *len = h.len;
  return 0;
}

/* The oldest binaries beyond the most BML_CACHE_MAX_BINARIES go (drivers
 * and versions change; their programs are never asked for again). */
static void prune_binaries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  char oldest[1100] = "";
  time_t oldest_t = 0;
  size_t count = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    size_t n = strlen(e->d_name);
    if (strncmp(e->d_name, "program-", 8) != 0 || n < 12 || strcmp(e->d_name + n - 4, ".bin") != 0) continue;
    char path[1100];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (stat(path, &st) != 0) continue;
    count++;
    if (!oldest[0] || st.st_mtime < oldest_t) snprintf(oldest, sizeof oldest, "%s", path), oldest_t = st.st_mtime;
  }
  closedir(d);
  if (count > BML_CACHE_MAX_BINARIES && oldest[0]) remove(oldest); /* one a write: they grow one at a time */
}

void bml__cache_binary_write(uint64_t key, const void *data, size_t len) {
  char path[1100], dir[1024];
  if (len == 0 || len > MAX_BINARY || binary_path(key, path, sizeof path) != 0 ||
      bml__cache_dir(dir, sizeof dir) != 0)
    return;
  make_dirs(path);
  unsigned char *buf = malloc(sizeof(binary_header) + len);
  if (!buf) return;
  binary_header h = {.len = len, .checksum = bml__hash64(data, len, BML_HASH_SEED), .key = key};
  memcpy(h.magic, binary_magic, sizeof h.magic);
  memcpy(buf, &h, sizeof h);
  memcpy(buf + sizeof h, data, len);
  int e = replace_file(path, NULL, buf, sizeof h + len);
  free(buf);
  if (e != 0) bml__debug(BML_CAT_BUILD, "cannot write the program binary %s: %s", path, strerror(e));
  else prune_binaries(dir);
}
