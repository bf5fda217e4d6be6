/* cache.h -- what bankml-cl remembers of each card between processes: one JSON file of keyed entries, and program binaries. */
#ifndef BML_CACHE_H
#define BML_CACHE_H

#include "base/bml.h"

#include <jansson.h>

/* The cache lives in $BANKML_CACHE_DIR, else $XDG_CACHE_HOME/bankml-cl,
 * else ~/.cache/bankml-cl (absolute paths only).  Its file cards.json is
 * {"schema": BML_CACHE_SCHEMA, "entries": [...]}; each entry is
 * {"kind": "...", "key": {...}, ...}: an entry serves a question whose
 * kind is the same and whose key is equal, member for member (jansson's
 * json_equal).  Whatever else is in the file (another layout, damaged
 * JSON, a FIFO) reads as no entries, and the next store replaces it.
 * Writers take cards.json.lock (flock) and write a temporary file in the
 * directory, renamed over the file: a reader sees the old file or the new
 * one, never half of one; a writer keeps the entries other processes
 * stored meanwhile. */
#define BML_CACHE_SCHEMA 1
/* Entries kept: the least recently stored go first. */
#define BML_CACHE_MAX_ENTRIES 64

/* The cache directory into buf.  Returns 0, or BML_EIO when there is none
 * (no variable says where, a relative path, too long: warned once a
 * process). */
int bml__cache_dir(char *buf, size_t len);

/* A new reference to the entry of this kind and key, or NULL (none, no
 * cache, or an unreadable file). */
json_t *bml__cache_find(const char *kind, const json_t *key);

/* Stores entry (its reference is taken, whatever happens) as the one of
 * this kind and key (replacing any), adding "kind" and "key" to it.  A
 * failure to write is a warning, once a process: the cache only saves
 * time.  Returns 0 or BML_EIO. */
int bml__cache_store(const char *kind, const json_t *key, json_t *entry);

/* ---- program binaries: one file each, program-<key's hash>.bin ------------ */

/* Reads the binary stored under key (malloc'd into *data; the caller
 * frees it).  Returns 0, or BML_EIO when there is none or it is damaged,
 * truncated or another key's (the header's length, checksum and key hash
 * disagree with it). */
int bml__cache_binary_read(uint64_t key, void **data, size_t *len);
/* Stores it (temporary file, rename; the oldest beyond
 * BML_CACHE_MAX_BINARIES go).  Failures are silent: the program is built
 * from source again next time. */
void bml__cache_binary_write(uint64_t key, const void *data, size_t len);
#define BML_CACHE_MAX_BINARIES 32

/* FNV-1a, 64 bits, of n bytes from seed h (BML_HASH_SEED to start): the
 * keys' hashes and the binaries' checksums.  Cannot fail. */
#define BML_HASH_SEED 0xcbf29ce484222325ull
uint64_t bml__hash64(const void *p, size_t n, uint64_t h);
/* The hash of a string, as 16 hex digits into buf (17 bytes). */
void bml__hash_hex(const char *s, char buf[17]);

#endif
