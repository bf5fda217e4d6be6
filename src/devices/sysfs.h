/* sysfs.h -- what the kernel says about a device: PCI ids and names (libpci), sysfs attributes, SoC GPUs. */
#ifndef BML_SYSFS_H
#define BML_SYSFS_H

#include "base/bml.h"
#include "base/util.h"

/* A PCI function, domain:bus:device.function; printed "%04x:%02x:%02x.%x",
 * the name of its /sys/bus/pci/devices entry.  Linux's domains are 32 bits
 * (VMD and Hyper-V use domains past ffff: "10000:00:02.0"). */
typedef struct {
  bool valid;
  uint32_t domain;
  uint8_t bus, dev, fn;
} bml__pci_addr;

/* The longest address, "ffffffff:ff:1f.7", and its terminating NUL. */
#define BML__PCI_ADDR_SIZE 17
/* Writes "0000:03:00.0" (or "" when !a.valid) into buf. */
void bml__pci_addr_format(bml__pci_addr a, char buf[BML__PCI_ADDR_SIZE]);
/* Parses "0000:03:00.0" (or "03:00.0", domain 0; a domain of five to eight
 * digits, as Linux writes those past ffff, has no leading zero).  Returns
 * 0 or BML_EINVAL. */
int bml__pci_addr_parse(const char *s, bml__pci_addr *out);

/* Where to look: every path is relative to root, so tests run on fixture
 * trees (pciutils' sysfs.path).  pci_ids "" means libpci's default. */
typedef struct {
  char root[512];    /* "/sys" by default */
  char pci_ids[512]; /* path of pci.ids, or "" */
} bml__sysfs;

/* What libpci and sysfs say about one PCI function.  Strings are "" and
 * numbers 0 (numa_node -1) when the kernel does not say. */
typedef struct {
  const char *method;      /* "libpci" or "sysfs": which method read the ids */
  uint16_t vendor_id, device_id, subsys_vendor_id, subsys_device_id;
  uint32_t class_code;     /* 24 bits: base class, subclass, prog-if */
  uint8_t revision;
  char vendor_name[128];   /* from pci.ids */
  char device_name[256];   /* from pci.ids */
  char driver[64];         /* the bound driver (basename of the driver link) */
  int numa_node;
  char link_speed[48], max_link_speed[48]; /* as sysfs writes them: "16.0 GT/s PCIe" */
  int link_width, max_link_width;
  uint64_t bar_size[6];    /* from the resource file */
  uint64_t vram_total, gtt_total; /* amdgpu mem_info_vram_total / mem_info_gtt_total */
  uint64_t lmem_total;     /* Intel i915/xe device-local memory, where exposed */
  char drm_card[32];       /* "card1": the /sys/class/drm card whose device is this one */
} bml__pci_info;

/* A GPU that is not on PCI (Mali, Adreno, other SoC GPUs), found through
 * /sys/class/drm, /sys/class/misc/mali*, /sys/class/kgsl and platform devices. */
typedef struct {
  char driver[64];  /* panfrost, mali, msm, kgsl-3d0, ... */
  char model[128];  /* of_node compatible, gpuinfo or gpu_model: "arm,mali-valhall-csf" */
  char path[256];   /* the platform device, relative to root: "devices/platform/fb000000.gpu" */
  char drm_card[32];
} bml__soc_info;

/* Fills fs from an explicit root (NULL: $BANKML_SYSFS_ROOT, else "/sys")
 * and pci.ids path (NULL: libpci's default).  Cannot fail. */
void bml__sysfs_init(bml__sysfs *fs, const char *root, const char *pci_ids);

/* Looks addr up through the methods in order (libpci, then plain sysfs
 * reads).  Returns 0 and *out, BML_ENODEV when the kernel has no such
 * function, or another error; a method that fails adds a note (naming the
 * method and why) and the next one is tried.  Never exits, whatever libpci
 * does. */
int bml__pci_lookup(const bml__sysfs *fs, bml__pci_addr addr, bml__pci_info *out,
                    bml__notes *notes);

/* The display-class (base class 0x03) PCI functions of vendor, in address
 * order: up to cap into out, the number of them all into *count (which may
 * be more than cap).  Returns 0 (also when there are none) or an error. */
int bml__pci_find_display(const bml__sysfs *fs, uint16_t vendor, bml__pci_addr *out, size_t cap,
                          size_t *count);

/* Finds a non-PCI GPU for an OpenCL device of cl_vendor_id (0x13b5 ARM,
 * 0x5143 Qualcomm, 0x1010 Imagination, ...) named cl_name.  Returns 0 and
 * *out, BML_ENODEV when none, or another error. */
int bml__soc_gpu_lookup(const bml__sysfs *fs, uint32_t cl_vendor_id, const char *cl_name,
                        bml__soc_info *out, bml__notes *notes);

/* ---- shared by pci.c and sysfs.c ------------------------------------------ */
/* Writes root/rel into buf.  Returns 0 or BML_ERANGE (longer than cap). */
int bml__sysfs_path(const bml__sysfs *fs, const char *rel, char *buf, size_t cap);
/* Reads at most cap bytes of the file root/rel into buf, *len the number read.
 * Returns 0, BML_ENODEV (no such file), BML_ERANGE (path too long) or BML_EIO. */
int bml__sysfs_read_raw(const bml__sysfs *fs, const char *rel, void *buf, size_t cap, size_t *len);
/* Reads the file root/rel as text: at most cap - 1 bytes, up to its first NUL
 * (a device-tree string list reads as its first string), trailing newline and
 * blanks trimmed.  Returns as bml__sysfs_read_raw. */
int bml__sysfs_read(const bml__sysfs *fs, const char *rel, char *buf, size_t cap);
/* Reads a number 0..max written as sysfs writes them ("0x1002", "17163091968").
 * Returns 0 and *out; BML_ENODEV when the file is missing or empty (the kernel
 * does not say); BML_EFORMAT for anything else, after a note naming the file
 * and its text (notes may be NULL). */
int bml__sysfs_read_u64(const bml__sysfs *fs, const char *rel, uint64_t max, uint64_t *out,
                        bml__notes *notes);
/* Fills out's sysfs attributes (driver through drm_card) for addr; those the
 * kernel does not give stay unknown, garbage adds a note.  Cannot fail. */
void bml__sysfs_pci_attrs(const bml__sysfs *fs, bml__pci_addr addr, bml__pci_info *out,
                          bml__notes *notes);

#endif
