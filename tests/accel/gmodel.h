/* A model of NP parameters (sizes numel[0..NP), TOTAL floats in all) whose gradients live in one
 * buffer, back to back in registration order (gap 0: contiguous, reduced in place) or with
 * `gap` floats of holes between them (staged). Shared by the gradient-averaging tests; the test
 * defines NP, numel[] and TOTAL before including it. */
#ifndef ACC_TEST_GMODEL_H
#define ACC_TEST_GMODEL_H

#include "acc_test.h"

typedef struct gmodel {
  float *data;      /* parameters */
  float *buf;       /* gradient storage */
  float *grad[NP];
  acc_model *m;
} gmodel;

static void gmodel_init(gmodel *g, size_t gap) {
  memset(g, 0, sizeof *g);
  g->data = calloc(TOTAL, sizeof(float));
  g->buf = calloc(TOTAL + NP * gap + 1, sizeof(float));
  if (!g->data || !g->buf) {
    fprintf(stderr, "gmodel: out of memory\n");
    exit(1);
  }
  REQUIRE_OK(acc_model_create(&g->m));
  size_t off = 0, doff = 0;
  for (int i = 0; i < NP; i++) {
    char name[16];
    snprintf(name, sizeof name, "p%d", i);
    int64_t shape[1] = {(int64_t)numel[i]};
    g->grad[i] = g->buf + off;
    REQUIRE_OK(acc_model_add_parameter(g->m, name, g->data + doff, g->grad[i], 1, shape));
    off += numel[i] + gap;
    doff += numel[i];
  }
}

static void gmodel_free(gmodel *g) {
  acc_model_destroy(g->m);
  free(g->buf);
  free(g->data);
}

#endif
