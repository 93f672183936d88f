/* The token loader of the small llm.c-style trainer (train_plain.c): reads an llm.c shard
 * (256 x int32 header: magic 20240520, version 1, token count; uint16 tokens) and hands out
 * B x (T + 1) consecutive tokens per batch, sequentially, wrapping at the end. Written for the
 * porting test; the ported trainer no longer uses it. */
#ifndef TOKLOADER_H
#define TOKLOADER_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct Loader {
  FILE *f;
  int B, T;
  long ntok, pos;
  uint16_t *buf;
  int *inputs, *targets;
} Loader;

static inline void loader_init(Loader *l, const char *path, int B, int T) {
  int32_t h[256];
  l->f = fopen(path, "rb");
  if (!l->f || fread(h, sizeof h, 1, l->f) != 1 || h[0] != 20240520 || h[1] != 1) {
    fprintf(stderr, "cannot read token shard %s\n", path);
    exit(1);
  }
  l->B = B, l->T = T, l->ntok = h[2], l->pos = 0;
  l->buf = malloc(((size_t)B * T + 1) * sizeof *l->buf);
  l->inputs = malloc((size_t)B * T * sizeof *l->inputs);
  l->targets = malloc((size_t)B * T * sizeof *l->targets);
}

static inline void loader_next(Loader *l, int **inputs, int **targets) {
  long n = (long)l->B * l->T;
  if (l->pos + n + 1 > l->ntok) l->pos = 0;
  fseek(l->f, 1024 + l->pos * 2, SEEK_SET);
  if (fread(l->buf, 2, (size_t)n + 1, l->f) != (size_t)n + 1) exit(1);
  for (long i = 0; i < n; i++) l->inputs[i] = l->buf[i], l->targets[i] = l->buf[i + 1];
  l->pos += n;
  *inputs = l->inputs;
  *targets = l->targets;
}

static inline void loader_free(Loader *l) {
  fclose(l->f);
  free(l->buf);
  free(l->inputs);
  free(l->targets);
}

#endif
