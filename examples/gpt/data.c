/* Reading and windowing the training text. */
#include "data.h"
#include "../pkg_hint.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static _Thread_local char text_err[512];
const char *text_last_error(void) { return text_err; }

static int fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text_err, sizeof text_err, fmt, ap);
  va_end(ap);
  return -1;
}

void text_corpus_free(text_corpus *c) {
  if (!c) return;
  free(c->bytes);
  memset(c, 0, sizeof *c);
}

int text_load(const char *path, int val_percent, size_t window_bytes, text_corpus *out) {
  if (!out) return fail("text_load: out is NULL");
  memset(out, 0, sizeof *out);
  if (!path) path = TEXT_DEFAULT_PATH;
  if (val_percent < 1 || val_percent > 50)
    return fail("text_load: validation share %d%% is outside 1..50", val_percent);
  gzFile f = gzopen(path, "rb");
  if (!f) {
    const int e = errno; /* before pkg_install_hint's fopen */
    char hint[160];
    pkg_install_hint("jargon-text", path, hint, sizeof hint);
    return fail("cannot open %s: %s. Install the text with %s, or pass --data FILE to train on another file",
                path, e ? strerror(e) : "out of memory", hint);
  }
  size_t cap = 1 << 20, len = 0;
  uint8_t *buf = malloc(cap);
  for (;;) {
    if (!buf) {
      gzclose(f);
      return fail("text_load: out of memory reading %s", path);
    }
    if (len == cap) {
      uint8_t *grown = realloc(buf, cap *= 2);
      if (!grown) free(buf);
      buf = grown;
      continue;
    }
    int n = gzread(f, buf + len, (unsigned)(cap - len > (1u << 30) ? 1u << 30 : cap - len));
    if (n < 0) {
      int zerr;
      const char *msg = gzerror(f, &zerr);
      char copy[256];
      snprintf(copy, sizeof copy, "%s", msg);
      free(buf);
      gzclose(f);
      return fail("cannot read %s: %s", path, copy);
    }
    if (n == 0) break;
    len += (size_t)n;
  }
  gzclose(f);
  size_t val = len * (size_t)val_percent / 100;
  if (window_bytes < 2 || len - val < window_bytes || val < window_bytes) {
    free(buf);
    return fail("%s holds %zu bytes: too short for a training and a validation window of %zu bytes "
                "each (%d%% validation)",
                path, len, window_bytes, val_percent);
  }
  out->bytes = buf;
  out->len = len;
  out->train_len = len - val;
  return 0;
}

text_windows text_windows_of(const text_corpus *c, size_t begin, size_t end, size_t window,
                             int64_t max_count) {
  text_windows w = {c->bytes + begin, window, window - 1, 0};
  size_t span = end - begin;
  if (window < 2 || span < window) return w;
  w.count = (int64_t)((span - 1) / (window - 1));
  if (max_count > 0 && w.count > max_count) {
    w.step = (span - 1) / (size_t)max_count; /* >= window - 1, so the last window still fits */
    w.count = max_count;
  }
  return w;
}

int text_window_fetch(int64_t i, void *const *fields, void *payload) {
  const text_windows *w = payload;
  if (i < 0 || i >= w->count) return -1;
  memcpy(fields[0], w->bytes + (size_t)i * w->step, w->window);
  return 0;
}

int text_write_shard(const text_corpus *c, size_t begin, size_t end, size_t max_tokens, const char *path) {
  if (!c || !c->bytes || begin > end || end > c->len || !path)
    return fail("text_write_shard: bytes [%zu, %zu) are outside the text", begin, end);
  size_t n = end - begin;
  if (max_tokens > 0 && n > max_tokens) n = max_tokens;
  if (n > 0x7fffffffu) return fail("text_write_shard: %zu tokens do not fit an llm.c header (int32)", n);
  int32_t header[256] = {0};
  header[0] = 20240520; /* magic */
  header[1] = 1;        /* version 1: uint16 tokens */
  header[2] = (int32_t)n;
  unsigned char h[sizeof header];
  for (int i = 0; i < 256; i++) /* little-endian whatever the host */
    for (int k = 0; k < 4; k++) h[i * 4 + k] = (unsigned char)((uint32_t)header[i] >> (8 * k));
  FILE *f = fopen(path, "wb");
  if (!f) return fail("cannot create the token shard %s: %s", path, strerror(errno));
  int bad = fwrite(h, 1, sizeof h, f) != sizeof h;
  unsigned char buf[8192];
  for (size_t i = 0; i < n && !bad; i += sizeof buf / 2) {
    size_t k = n - i < sizeof buf / 2 ? n - i : sizeof buf / 2;
    for (size_t j = 0; j < k; j++) {
      buf[2 * j] = c->bytes[begin + i + j];
      buf[2 * j + 1] = 0;
    }
    bad = fwrite(buf, 2, k, f) != k;
  }
  if (fclose(f) != 0) bad = 1;
  if (bad) return fail("cannot write the token shard %s: %s", path, strerror(errno));
  return 0;
}
