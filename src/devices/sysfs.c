/* sysfs.c -- what sysfs says about a GPU: a PCI function's attributes, its DRM card, and SoC GPUs. */
#include "devices/sysfs.h"
#include "base/env.h"
#include "base/log.h"
#include "base/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* Where a root is refused (too long), it becomes this: a file, so that no
 * path under it exists and nothing is found rather than something wrong. */
#define REFUSED_ROOT "/dev/null"

/* ---- reading files under the root ----------------------------------------- */

/* Copies src into dst (cap bytes), cut short where it does not fit. */
static void copy_str(char *dst, size_t cap, const char *src) {
  size_t n = strnlen(src, cap - 1);
  memcpy(dst, src, n);
  dst[n] = '\0';
}

/* $BANKML_PCI_IDS, else the pci.ids configure found (it also looks in a
 * build sysroot), else "" for libpci's own default. */
static const char *default_pci_ids(void) {
  const char *env = NULL;
  if (bml__env_pci_ids(&env) == 0 && env) return env;
  if (BML_PCI_IDS[0] && access(BML_PCI_IDS, R_OK) == 0) return BML_PCI_IDS;
  return "";
}

void bml__sysfs_init(bml__sysfs *fs, const char *root, const char *pci_ids) {
  const char *env = NULL;
  /* a refused BANKML_SYSFS_ROOT (its message says why) finds nothing, rather
   * than this machine's /sys in place of the tree the test meant */
  if (!root) root = bml__env_sysfs_root(&env) != 0 ? REFUSED_ROOT : env;
  if (!root) root = "/sys";
  if (!pci_ids) pci_ids = default_pci_ids();
  memset(fs, 0, sizeof *fs);
  if ((size_t)snprintf(fs->root, sizeof fs->root, "%s", root) >= sizeof fs->root) {
    bml__error(BML_CAT_PCI, "sysfs root \"%.60s...\" is too long; nothing will be found under it", root);
    snprintf(fs->root, sizeof fs->root, "%s", REFUSED_ROOT);
  }
  if ((size_t)snprintf(fs->pci_ids, sizeof fs->pci_ids, "%s", pci_ids) >= sizeof fs->pci_ids) {
    bml__error(BML_CAT_PCI, "pci.ids path \"%.60s...\" is too long; no names will be found", pci_ids);
    snprintf(fs->pci_ids, sizeof fs->pci_ids, "%s", REFUSED_ROOT);
  }
  /* libpci opens it blocking: a FIFO there would wait for a writer for ever */
  struct stat st;
  if (fs->pci_ids[0] && strcmp(fs->pci_ids, REFUSED_ROOT) != 0 && stat(fs->pci_ids, &st) == 0 && !S_ISREG(st.st_mode)) {
    bml__error(BML_CAT_PCI, "pci.ids path \"%s\" is not a regular file; no names will be found", fs->pci_ids);
    snprintf(fs->pci_ids, sizeof fs->pci_ids, "%s", REFUSED_ROOT);
  }
}

int bml__sysfs_path(const bml__sysfs *fs, const char *rel, char *buf, size_t cap) {
  size_t n = strlen(fs->root);
  const char *sep = n > 0 && fs->root[n - 1] == '/' ? "" : "/";
  int len = snprintf(buf, cap, "%s%s%s", fs->root, sep, rel);
  return len < 0 || (size_t)len >= cap ? BML_ERANGE : 0;
}

int bml__sysfs_read_raw(const bml__sysfs *fs, const char *rel, void *buf, size_t cap, size_t *len) {
  char path[PATH_MAX];
  int rc = bml__sysfs_path(fs, rel, path, sizeof path);
  if (rc != 0) return rc;
  /* O_NONBLOCK: a FIFO in a tree under BANKML_SYSFS_ROOT must not hang
   * the discovery; only a regular file is read (sysfs's attributes are) */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return errno == ENOENT || errno == ENOTDIR ? BML_ENODEV : BML_EIO;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    *len = 0;
    return BML_EIO;
  }
  size_t n = 0;
  while (n < cap) {
    ssize_t r = read(fd, (char *)buf + n, cap - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) rc = BML_EIO;
    if (r <= 0) break;
    n += (size_t)r;
  }
  close(fd);
  *len = n;
  return rc;
}

int bml__sysfs_read(const bml__sysfs *fs, const char *rel, char *buf, size_t cap) {
  size_t n = 0;
  buf[0] = '\0';
  int rc = bml__sysfs_read_raw(fs, rel, buf, cap - 1, &n);
  if (rc != 0) return rc;
  buf[n] = '\0';
  n = strlen(buf);
  while (n > 0 && strchr(" \t\r\n", buf[n - 1])) buf[--n] = '\0';
  return 0;
}

/* Adds "sysfs: PATH: "TEXT" is not WHAT" to notes (NULL-safe). */
static void note_garbage(const bml__sysfs *fs, const char *rel, const char *text, const char *what,
                         bml__notes *notes) {
  char path[PATH_MAX];
  if (!notes) return;
  if (bml__sysfs_path(fs, rel, path, sizeof path) != 0) snprintf(path, sizeof path, "%s", rel);
  bml__notes_add(notes, "sysfs: %s: \"%.80s\" is not %s", path, text, what);
}

int bml__sysfs_read_u64(const bml__sysfs *fs, const char *rel, uint64_t max, uint64_t *out,
                        bml__notes *notes) {
  char buf[64], *end = NULL;
  int rc = bml__sysfs_read(fs, rel, buf, sizeof buf);
  if (rc != 0) return rc;
  if (buf[0] == '\0') return BML_ENODEV;
  errno = 0;
  unsigned long long v = strtoull(buf, &end, 0);
  if (buf[0] < '0' || buf[0] > '9' || errno != 0 || *end != '\0' || v > max) {
    note_garbage(fs, rel, buf, "a number", notes);
    return BML_EFORMAT;
  }
  *out = v;
  return 0;
}

/* Reads a signed decimal lo..hi (numa_node, link widths) into *out. */
static int read_long(const bml__sysfs *fs, const char *rel, long lo, long hi, long *out,
                     bml__notes *notes) {
  char buf[64];
  int rc = bml__sysfs_read(fs, rel, buf, sizeof buf);
  if (rc != 0) return rc;
  if (buf[0] == '\0') return BML_ENODEV;
  if (bml__parse_long(buf, lo, hi, out) != 0) {
    note_garbage(fs, rel, buf, "a whole number", notes);
    return BML_EFORMAT;
  }
  return 0;
}

/* The basename of the symlink root/rel ("amdgpu" for .../drivers/amdgpu), or "". */
static void read_link_name(const bml__sysfs *fs, const char *rel, char *buf, size_t cap) {
  char path[PATH_MAX], target[PATH_MAX];
  buf[0] = '\0';
  if (bml__sysfs_path(fs, rel, path, sizeof path) != 0) return;
  ssize_t n = readlink(path, target, sizeof target - 1);
  if (n <= 0) return;
  target[n] = '\0';
  const char *slash = strrchr(target, '/');
  copy_str(buf, cap, slash ? slash + 1 : target);
}

/* realpath() of root/rel into buf (PATH_MAX bytes).  Returns 0 or BML_ENODEV. */
static int resolve(const bml__sysfs *fs, const char *rel, char *buf) {
  char path[PATH_MAX];
  if (bml__sysfs_path(fs, rel, path, sizeof path) != 0) return BML_ENODEV;
  return realpath(path, buf) ? 0 : BML_ENODEV;
}

/* Is name prefix followed by one or more digits only ("card1", not "card1-DP-2")? */
static bool is_numbered(const char *name, const char *prefix) {
  size_t n = strlen(prefix);
  if (strncmp(name, prefix, n) != 0 || name[n] == '\0') return false;
  return strspn(name + n, "0123456789") == strlen(name + n);
}

/* The entries of root/rel in alphabetical order ("." and ".." left out).
 * Returns their number (0 when the directory is missing) or BML_ENOMEM; free
 * with free_entries. */
static int list_dir(const bml__sysfs *fs, const char *rel, struct dirent ***out) {
  char path[PATH_MAX];
  *out = NULL;
  if (bml__sysfs_path(fs, rel, path, sizeof path) != 0) return 0;
  int n = scandir(path, out, NULL, alphasort);
  if (n >= 0) return n;
  return errno == ENOMEM ? BML_ENOMEM : 0;
}

static void free_entries(struct dirent **e, int n) {
  for (int i = 0; i < n; i++) free(e[i]);
  free(e);
}

/* ---- the DRM card of a device ---------------------------------------------- */

/* The first cardN in root/dir, or "". */
static void first_card_in(const bml__sysfs *fs, const char *dir, char *card, size_t cap) {
  struct dirent **e;
  int n = list_dir(fs, dir, &e);
  card[0] = '\0';
  for (int i = 0; i < n && !card[0]; i++)
    if (is_numbered(e[i]->d_name, "card")) copy_str(card, cap, e[i]->d_name);
  if (n > 0) free_entries(e, n);
}

/* The /sys/class/drm card whose device link resolves to real (a realpath), or "". */
static void class_card_of(const bml__sysfs *fs, const char *real, char *card, size_t cap) {
  char rel[PATH_MAX], dev[PATH_MAX];
  struct dirent **e;
  int n = list_dir(fs, "class/drm", &e);
  card[0] = '\0';
  for (int i = 0; i < n && !card[0]; i++) {
    if (!is_numbered(e[i]->d_name, "card")) continue;
    snprintf(rel, sizeof rel, "class/drm/%s/device", e[i]->d_name);
    if (resolve(fs, rel, dev) == 0 && strcmp(dev, real) == 0)
      copy_str(card, cap, e[i]->d_name);
  }
  if (n > 0) free_entries(e, n);
}

/* The DRM card of the device at root/dev_rel: the cardN in its drm/
 * directory, else the /sys/class/drm card that points at it. */
static void drm_card_of(const bml__sysfs *fs, const char *dev_rel, char *card, size_t cap) {
  char rel[PATH_MAX], real[PATH_MAX];
  snprintf(rel, sizeof rel, "%s/drm", dev_rel);
  first_card_in(fs, rel, card, cap);
  if (!card[0] && resolve(fs, dev_rel, real) == 0) class_card_of(fs, real, card, cap);
}

/* ---- the attributes of a PCI function --------------------------------------- */

typedef enum { ATTR_TEXT, ATTR_LONG, ATTR_U64 } attr_kind;

/* The plain attribute files of a PCI function's directory, and where each goes. */
static const struct {
  const char *file;
  attr_kind kind;
  size_t offset, size; /* into bml__pci_info */
  long lo, hi;         /* ATTR_LONG's range */
} pci_attrs[] = {
#define FIELD(f) offsetof(bml__pci_info, f), sizeof(((bml__pci_info *)0)->f)
    {"numa_node", ATTR_LONG, FIELD(numa_node), -1, 65535},
    {"current_link_speed", ATTR_TEXT, FIELD(link_speed), 0, 0},
    {"current_link_width", ATTR_LONG, FIELD(link_width), 0, 255},
    {"max_link_speed", ATTR_TEXT, FIELD(max_link_speed), 0, 0},
    {"max_link_width", ATTR_LONG, FIELD(max_link_width), 0, 255},
    {"mem_info_vram_total", ATTR_U64, FIELD(vram_total), 0, 0}, /* amdgpu */
    {"mem_info_gtt_total", ATTR_U64, FIELD(gtt_total), 0, 0},   /* amdgpu */
#undef FIELD
};

static void read_attr(const bml__sysfs *fs, const char *dev_rel, size_t i, bml__pci_info *out,
                      bml__notes *notes) {
  char rel[PATH_MAX];
  char *field = (char *)out + pci_attrs[i].offset;
  long l;
  uint64_t u;
  snprintf(rel, sizeof rel, "%s/%s", dev_rel, pci_attrs[i].file);
  switch (pci_attrs[i].kind) {
  case ATTR_TEXT:
    bml__sysfs_read(fs, rel, field, pci_attrs[i].size);
    break;
  case ATTR_LONG:
    if (read_long(fs, rel, pci_attrs[i].lo, pci_attrs[i].hi, &l, notes) == 0) *(int *)field = (int)l;
    break;
  case ATTR_U64:
    if (bml__sysfs_read_u64(fs, rel, UINT64_MAX, &u, notes) == 0) *(uint64_t *)field = u;
    break;
  }
}

/* Parses one line of a resource file, "0xSTART 0xEND 0xFLAGS", into a size. */
static bool parse_resource_line(const char *line, uint64_t *size) {
  unsigned long long v[3];
  char *end = (char *)line;
  for (int i = 0; i < 3; i++) {
    const char *p = end;
    while (*p == ' ') p++;
    if (p[0] != '0' || p[1] != 'x') return false;
    errno = 0;
    v[i] = strtoull(p, &end, 16);
    if (errno != 0 || end == p + 2) return false;
  }
  if (*end != '\0' || (v[1] != 0 && v[1] < v[0])) return false;
  *size = v[1] != 0 ? v[1] - v[0] + 1 : 0;
  return true;
}

/* BAR sizes from the resource file: its first six lines are BARs 0-5. */
static void read_bars(const bml__sysfs *fs, const char *dev_rel, bml__pci_info *out,
                      bml__notes *notes) {
  char rel[PATH_MAX], text[4096], *save = NULL;
  snprintf(rel, sizeof rel, "%s/resource", dev_rel);
  if (bml__sysfs_read(fs, rel, text, sizeof text) != 0) return;
  char *line = strtok_r(text, "\n", &save);
  for (int i = 0; i < 6 && line; i++, line = strtok_r(NULL, "\n", &save))
    if (!parse_resource_line(line, &out->bar_size[i]))
      note_garbage(fs, rel, line, "a resource line (0xSTART 0xEND 0xFLAGS)", notes);
}

/* Intel device-local memory, where sysfs has it.  xe writes the physical VRAM
 * of each tile of a discrete card (not DG1) in DEVICE/tileN/physical_vram_size_bytes,
 * in decimal (xe_tile_sysfs.c; igt's xe_sysfs_tile reads it): the sum is the
 * card's.  Mainline i915 has no such file (userspace asks the memory-region
 * query ioctl); Intel's out-of-tree i915 backports write lmem_total_bytes on
 * the DRM card, /sys/class/drm/cardN.  Elsewhere lmem_total stays 0. */
static void read_lmem(const bml__sysfs *fs, const char *dev_rel, bml__pci_info *out,
                      bml__notes *notes) {
  char rel[PATH_MAX];
  uint64_t v;
  for (int tile = 0; tile < 16; tile++) {
    snprintf(rel, sizeof rel, "%s/tile%d/physical_vram_size_bytes", dev_rel, tile);
    if (bml__sysfs_read_u64(fs, rel, UINT64_MAX, &v, notes) != 0) break;
    out->lmem_total += v;
  }
  if (out->lmem_total != 0 || !out->drm_card[0]) return;
  snprintf(rel, sizeof rel, "class/drm/%s/lmem_total_bytes", out->drm_card);
  if (bml__sysfs_read_u64(fs, rel, UINT64_MAX, &v, notes) == 0) out->lmem_total = v;
}

void bml__sysfs_pci_attrs(const bml__sysfs *fs, bml__pci_addr addr, bml__pci_info *out,
                          bml__notes *notes) {
  char name[BML__PCI_ADDR_SIZE], dev_rel[64], rel[96];
  bml__pci_addr_format(addr, name);
  snprintf(dev_rel, sizeof dev_rel, "bus/pci/devices/%s", name);
  snprintf(rel, sizeof rel, "%s/driver", dev_rel);
  read_link_name(fs, rel, out->driver, sizeof out->driver);
  out->numa_node = -1;
  for (size_t i = 0; i < BML_ARRAY_SIZE(pci_attrs); i++) read_attr(fs, dev_rel, i, out, notes);
  read_bars(fs, dev_rel, out, notes);
  drm_card_of(fs, dev_rel, out->drm_card, sizeof out->drm_card);
  read_lmem(fs, dev_rel, out, notes);
}

/* ---- GPUs that are not on PCI ------------------------------------------------ */

/* Where SoC GPUs show up: each entry of dir named prefix+N is a GPU whose
 * platform device is entry/device; model_file (relative to the entry) names
 * the model when it is there, else the device tree's compatible does. */
static const struct {
  const char *dir, *prefix, *model_file;
  const char *driver; /* the driver's name when the device has no driver link */
  bool is_drm;        /* the entry is itself the DRM card */
} soc_sources[] = {
    {"class/drm", "card", NULL, "", true},                     /* panfrost, lima, msm, etnaviv, ... */
    {"class/misc", "mali", "device/gpuinfo", "mali", false},   /* ARM's kbase driver */
    {"class/kgsl", "kgsl-3d", "gpu_model", "kgsl-3d0", false}, /* Qualcomm's kgsl driver */
};

/* The kernel drivers of each SoC GPU maker, by OpenCL vendor id or by a word
 * of the OpenCL device name (for implementations with their own vendor ids). */
static const struct {
  uint32_t cl_vendor_id;
  const char *name_word;
  const char *drivers[6];
} soc_makers[] = {
    {0x13b5, "Mali", {"panfrost", "panthor", "mali", "lima", NULL}},
    {0x5143, "Adreno", {"msm", "msm_drm", "kgsl-3d", "kgsl-3d0", NULL}},
    {0x1010, "PowerVR", {"powervr", "pvrsrvkm", NULL}},
    {0, "Vivante", {"etnaviv", "galcore", NULL}},
    {0, "V3D", {"v3d", NULL}},
};

/* Does hay contain word, ignoring case? */
static bool has_word(const char *hay, const char *word) {
  size_t n = strlen(word);
  for (; hay && *hay; hay++)
    if (strncasecmp(hay, word, n) == 0) return true;
  return false;
}

/* Is maker m the one of an OpenCL device with this vendor id and name? */
static bool maker_matches(size_t m, uint32_t cl_vendor_id, const char *cl_name) {
  uint32_t id = soc_makers[m].cl_vendor_id;
  return (id != 0 && id == cl_vendor_id) || has_word(cl_name, soc_makers[m].name_word);
}

static bool maker_has_driver(size_t m, const char *driver) {
  for (const char *const *d = soc_makers[m].drivers; *d; d++)
    if (strcmp(*d, driver) == 0) return true;
  return false;
}

/* real (a realpath) relative to root_real, or NULL when it is not below it. */
static const char *below_root(const char *real, const char *root_real) {
  size_t n = strlen(root_real);
  if (strcmp(root_real, "/") == 0) return real + 1;
  return strncmp(real, root_real, n) == 0 && real[n] == '/' ? real + n + 1 : NULL;
}

/* Fills out from the class entry dir/name of source s when its device is not
 * PCI and its driver is one of maker m's.  Returns true when it did. */
static bool soc_try(const bml__sysfs *fs, size_t s, const char *name, size_t m, const char *root_real,
                    bml__soc_info *out) {
  char rel[PATH_MAX], real[PATH_MAX];
  bml__pci_addr pci;
  snprintf(rel, sizeof rel, "%s/%s/device", soc_sources[s].dir, name);
  if (resolve(fs, rel, real) != 0 || !below_root(real, root_real)) return false;
  if (bml__pci_addr_parse(strrchr(real, '/') + 1, &pci) == 0) return false;
  snprintf(rel, sizeof rel, "%s/%s/device/driver", soc_sources[s].dir, name);
  read_link_name(fs, rel, out->driver, sizeof out->driver);
  if (!out->driver[0]) copy_str(out->driver, sizeof out->driver, soc_sources[s].driver);
  if (!maker_has_driver(m, out->driver)) return false;
  copy_str(out->path, sizeof out->path, below_root(real, root_real));
  if (soc_sources[s].model_file) {
    snprintf(rel, sizeof rel, "%s/%s/%s", soc_sources[s].dir, name, soc_sources[s].model_file);
    bml__sysfs_read(fs, rel, out->model, sizeof out->model);
  }
  if (!out->model[0]) {
    snprintf(rel, sizeof rel, "%s/%s/device/of_node/compatible", soc_sources[s].dir, name);
    bml__sysfs_read(fs, rel, out->model, sizeof out->model);
  }
  if (soc_sources[s].is_drm) copy_str(out->drm_card, sizeof out->drm_card, name);
  else class_card_of(fs, real, out->drm_card, sizeof out->drm_card);
  return true;
}

/* Looks through source s for a GPU of maker m.  Returns 0, BML_ENODEV or BML_ENOMEM. */
static int soc_scan(const bml__sysfs *fs, size_t s, size_t m, const char *root_real,
                    bml__soc_info *out) {
  struct dirent **e;
  int n = list_dir(fs, soc_sources[s].dir, &e), rc = BML_ENODEV;
  if (n < 0) return n;
  for (int i = 0; i < n && rc != 0; i++) {
    memset(out, 0, sizeof *out);
    if (is_numbered(e[i]->d_name, soc_sources[s].prefix) &&
        soc_try(fs, s, e[i]->d_name, m, root_real, out))
      rc = 0;
  }
  if (rc != 0) memset(out, 0, sizeof *out);
  if (n > 0) free_entries(e, n);
  return rc;
}

int bml__soc_gpu_lookup(const bml__sysfs *fs, uint32_t cl_vendor_id, const char *cl_name,
                        bml__soc_info *out, bml__notes *notes) {
  char root_real[PATH_MAX];
  memset(out, 0, sizeof *out);
  if (!realpath(fs->root, root_real)) {
    if (notes) bml__notes_add(notes, "sysfs: %s: %s", fs->root, strerror(errno));
    return BML_ENODEV;
  }
  for (size_t m = 0; m < BML_ARRAY_SIZE(soc_makers); m++) {
    if (!maker_matches(m, cl_vendor_id, cl_name)) continue;
    for (size_t s = 0; s < BML_ARRAY_SIZE(soc_sources); s++) {
      int rc = soc_scan(fs, s, m, root_real, out);
      if (rc != BML_ENODEV) return rc;
    }
  }
  return BML_ENODEV;
}
