/* Helpers shared by the checkpoint tests: temporary directories and raw file access. */
#ifndef CKPT_UTIL_H
#define CKPT_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt_dir.h"

/* A fresh directory under $TMPDIR (or /tmp); exits on failure. */
static inline char *ckpt_tmpdir(const char *tag) {
  const char *base = getenv("TMPDIR");
  char tmpl[512];
  snprintf(tmpl, sizeof tmpl, "%s/acc_%s_XXXXXX", base && *base ? base : "/tmp", tag);
  char *d = mkdtemp(tmpl);
  if (!d) {
    perror("mkdtemp");
    exit(1);
  }
  return strdup(d);
}

/* Reads a whole file into a malloc'd buffer (NUL-terminated); NULL when missing. */
static inline char *ckpt_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  if (buf) buf[n] = 0;
  fclose(f);
  if (len) *len = (size_t)n;
  return buf;
}

static inline int ckpt_exists(const char *dir, const char *name) {
  char p[4096];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  struct stat sb;
  return stat(p, &sb) == 0;
}

#endif
