/* pciaddr.c -- PCI addresses: 0000:03:00.0 written and read. */
#include "devices/sysfs.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

void bml__pci_addr_format(bml__pci_addr a, char buf[BML__PCI_ADDR_SIZE]) {
  if (!a.valid) {
    buf[0] = '\0';
    return;
  }
  snprintf(buf, BML__PCI_ADDR_SIZE, "%04x:%02x:%02x.%x", (unsigned)a.domain, (unsigned)a.bus, (unsigned)a.dev,
           (unsigned)a.fn);
}

/* Reads exactly n hex digits at *p into *v and moves *p past them. */
static bool hex_digits(const char **p, int n, unsigned *v) {
  *v = 0;
  for (int i = 0; i < n; i++) {
    int c = (unsigned char)(*p)[i];
    if (!isxdigit(c)) return false;
    *v = *v * 16 + (unsigned)(isdigit(c) ? c - '0' : tolower(c) - 'a' + 10);
  }
  *p += n;
  return true;
}

int bml__pci_addr_parse(const char *s, bml__pci_addr *out) {
  unsigned domain = 0, bus, dev, fn;
  if (!s) return BML_EINVAL;
  const char *p = s;
  const size_t len = strlen(s);
  if (len >= 12) { /* a domain: four digits, or five to eight without a leading zero */
    const int digits = (int)(len - 8);
    if (digits > 8 || (digits > 4 && s[0] == '0') || !hex_digits(&p, digits, &domain) || *p++ != ':')
      return BML_EINVAL;
  }
  if (!hex_digits(&p, 2, &bus) || *p++ != ':' || !hex_digits(&p, 2, &dev) || *p++ != '.' ||
      !hex_digits(&p, 1, &fn) || *p != '\0' || dev > 0x1f || fn > 7)
    return BML_EINVAL;
  *out = (bml__pci_addr){.valid = true, .domain = domain, .bus = (uint8_t)bus,
                         .dev = (uint8_t)dev, .fn = (uint8_t)fn};
  return 0;
}
