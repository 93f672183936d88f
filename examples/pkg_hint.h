/* Shared by the examples: whether a missing data file belongs to an installed Debian package,
 * so that the advice can say `apt-get install --reinstall` (plain `apt-get install` does nothing
 * for a package dpkg lists as installed). Header-only: each example stays one folder plus this. */
#ifndef EXAMPLES_PKG_HINT_H
#define EXAMPLES_PKG_HINT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 1 when dpkg's file list of pkg (DPKG_ADMINDIR, as dpkg reads it, else /var/lib/dpkg) names
 * path: the package is installed and path is one of its files. */
static inline int pkg_lists_file(const char *pkg, const char *path) {
  const char *admin = getenv("DPKG_ADMINDIR");
  char list[1024], line[4096];
  snprintf(list, sizeof list, "%s/info/%s.list", admin && *admin ? admin : "/var/lib/dpkg", pkg);
  FILE *f = fopen(list, "r");
  if (!f) return 0;
  int found = 0;
  while (!found && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    found = strcmp(line, path) == 0;
  }
  fclose(f);
  return found;
}

/* The install command for a missing file of pkg, in backquotes, into buf. */
static inline const char *pkg_install_hint(const char *pkg, const char *path, char *buf, size_t len) {
  if (pkg_lists_file(pkg, path))
    snprintf(buf, len, "`apt-get install --reinstall %s` (the package is installed but this file of it is gone)",
             pkg);
  else
    snprintf(buf, len, "`apt-get install %s`", pkg);
  return buf;
}

#endif
