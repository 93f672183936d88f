/* bf16 matrix products through oneDNN (gemm_dnnl.h).
 *
 * Each product shape (transposes, M, N, K, leading dimensions, alpha, beta) gets one oneDNN
 * matmul primitive, made at its first use and kept in a small cache (the model has a few dozen
 * shapes; creating a primitive costs far more than running a small one). op(A) is the matmul's
 * source [M, K], op(B) its weights [K, N], C its float32 destination [M, N]; a transpose is a
 * stride, so nothing is copied beyond the conversion to bf16. alpha is the matmul's output scale
 * and beta a sum post-op (C = alpha A B + beta C).
 *
 * oneDNN's threads: Debian builds it on OpenMP. Unless OMP_NUM_THREADS is set, it gets as many
 * threads as OpenBLAS uses (OPENBLAS_NUM_THREADS, which `accelerate launch` sets to 1 for several
 * processes per machine), set through omp_set_num_threads and openblas_get_num_threads found at
 * run time, so the example does not link OpenMP itself.
 *
 * A shape oneDNN has no bf16 matmul for on this CPU (oneDNN 2.6 on an AVX2-only CPU has none for
 * some transposes and sizes, e.g. A^T B^T M 7 N 5 K 513) is remembered and computed by the
 * example's own bf16 kernel (gemm_bf16.c: the same arithmetic, rounded operands and float32
 * sums); the first such shape is said once on stderr (by the main process), and
 * gemm_dnnl_describe counts them. */
#define _GNU_SOURCE
#include "gemm_dnnl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_bf16.h"
#include "vectorized.h"

VECTORIZED void gemm_to_bf16(uint16_t *out, const float *in, size_t n) {
  const uint32_t *u = (const uint32_t *)in;
  for (size_t i = 0; i < n; i++) {
    uint32_t v = u[i];
    uint32_t r = (v + 0x7fffu + ((v >> 16) & 1u)) >> 16;
    uint32_t nan = (v >> 16) | 0x40u;
    out[i] = (uint16_t)(((v & 0x7fffffffu) > 0x7f800000u) ? nan : r);
  }
}

#ifndef GPT_HAVE_DNNL

int gemm_dnnl_available(void) { return 0; }
int gemm_dnnl_fallback_shapes(void) { return 0; }
const char *gemm_dnnl_describe(void) { return "built without oneDNN (install libdnnl-dev and reconfigure)"; }
int gemm_dnnl_bf16(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc) {
  (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B;
  (void)ldb, (void)beta, (void)C, (void)ldc;
  return -1;
}
int gemm_dnnl_bf16_pre(int ta, int tb, int M, int N, int K, float alpha, const uint16_t *A,
                       int lda, const uint16_t *B, int ldb, float beta, float *C, int ldc) {
  (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B;
  (void)ldb, (void)beta, (void)C, (void)ldc;
  return -1;
}

#else

#include <dnnl.h>

#define CACHE 96

typedef struct entry {
  int ta, tb, M, N, K, lda, ldb, ldc;
  float alpha, beta;
  dnnl_primitive_t prim;
  dnnl_memory_t a, b, c;
  int none; /* oneDNN has no bf16 matmul for this shape here: the example's own kernel computes it */
  char impl[64];
} entry;

static struct {
  int state; /* 0 not tried, 1 ready, -1 unavailable */
  dnnl_engine_t engine;
  dnnl_stream_t stream;
  entry cache[CACHE];
  int used, next_evict;
  uint16_t *abuf, *bbuf;
  size_t acap, bcap;
  char describe[256];
  const char *last_impl;
  int fallbacks;      /* shapes computed by gemm_bf16 instead */
  float *fa, *fb;     /* their operands widened back to float */
  size_t facap, fbcap;
  void *scratch;      /* gemm_bf16's, for up to scratch_n columns */
  int scratch_n;
} g;

static int init(void) {
  if (g.state) return g.state;
  g.state = -1;
  if (dnnl_engine_create(&g.engine, dnnl_cpu, 0) != dnnl_success ||
      dnnl_stream_create(&g.stream, g.engine, dnnl_stream_default_flags) != dnnl_success) {
    snprintf(g.describe, sizeof g.describe, "oneDNN: cannot create its CPU engine");
    return -1;
  }
  /* as many threads as OpenBLAS uses (OPENBLAS_NUM_THREADS, else its own choice), unless
   * OMP_NUM_THREADS says otherwise; 1 when OpenBLAS is not in the program */
  void (*set_threads)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "omp_set_num_threads");
  int (*blas_threads)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "openblas_get_num_threads");
  int threads = blas_threads ? blas_threads() : 1;
  if (set_threads && !getenv("OMP_NUM_THREADS")) set_threads(threads > 0 ? threads : 1);
  const dnnl_version_t *v = dnnl_version();
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  const char *name = isa == dnnl_cpu_isa_avx512_core_amx    ? "AMX"
                     : isa == dnnl_cpu_isa_avx512_core_bf16 ? "AVX-512 BF16"
                     : isa == dnnl_cpu_isa_avx512_core_vnni || isa == dnnl_cpu_isa_avx512_core
                         ? "AVX-512 without BF16: bf16 converted to float32"
                     : isa == dnnl_cpu_isa_avx2 || isa == dnnl_cpu_isa_avx2_vnni ? "AVX2: bf16 converted to float32"
                                                                                 : "this CPU's instructions";
  snprintf(g.describe, sizeof g.describe, "oneDNN %d.%d.%d (%s)", v->major, v->minor, v->patch, name);
  g.state = 1;
  return 1;
}

int gemm_dnnl_available(void) { return init() == 1; }

int gemm_dnnl_fallback_shapes(void) { return g.fallbacks; }

const char *gemm_dnnl_describe(void) {
  static char out[600];
  if (init() != 1) return g.describe;
  int n = snprintf(out, sizeof out, "%s", g.describe);
  if (g.last_impl && n >= 0 && (size_t)n < sizeof out)
    n += snprintf(out + n, sizeof out - (size_t)n, ", last product: %s", g.last_impl);
  if (g.fallbacks && n >= 0 && (size_t)n < sizeof out)
    snprintf(out + n, sizeof out - (size_t)n, "; %d product shape(s) without a oneDNN bf16 matmul here through the "
             "example's own bf16 kernel (%s)", g.fallbacks, gemm_bf16_kernel());
  return out;
}

static void entry_free(entry *e) {
  if (e->prim) dnnl_primitive_destroy(e->prim);
  if (e->a) dnnl_memory_destroy(e->a);
  if (e->b) dnnl_memory_destroy(e->b);
  if (e->c) dnnl_memory_destroy(e->c);
  memset(e, 0, sizeof *e);
}

/* The primitive of one shape: made on first use. NULL (reason in g.describe) on failure. */
static entry *lookup(int ta, int tb, int M, int N, int K, float alpha, int lda, int ldb, float beta, int ldc) {
  for (int i = 0; i < g.used; i++) {
    entry *e = &g.cache[i];
    if (e->ta == ta && e->tb == tb && e->M == M && e->N == N && e->K == K && e->lda == lda &&
        e->ldb == ldb && e->ldc == ldc && e->alpha == alpha && e->beta == beta)
      return e;
  }
  entry *e;
  if (g.used < CACHE) e = &g.cache[g.used++];
  else {
    e = &g.cache[g.next_evict];
    g.next_evict = (g.next_evict + 1) % CACHE;
    entry_free(e);
  }
  *e = (entry){ta, tb, M, N, K, lda, ldb, ldc, alpha, beta, NULL, NULL, NULL, NULL, 0, ""};
  dnnl_memory_desc_t amd, bmd, cmd;
  dnnl_dims_t adims = {M, K}, bdims = {K, N}, cdims = {M, N};
  dnnl_dims_t astr = {ta ? 1 : lda, ta ? lda : 1}, bstr = {tb ? 1 : ldb, tb ? ldb : 1}, cstr = {ldc, 1};
  dnnl_matmul_desc_t md;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t ops = NULL;
  dnnl_primitive_desc_t pd = NULL;
  int ok = dnnl_memory_desc_init_by_strides(&amd, 2, adims, dnnl_bf16, astr) == dnnl_success &&
           dnnl_memory_desc_init_by_strides(&bmd, 2, bdims, dnnl_bf16, bstr) == dnnl_success &&
           dnnl_memory_desc_init_by_strides(&cmd, 2, cdims, dnnl_f32, cstr) == dnnl_success &&
           dnnl_matmul_desc_init(&md, &amd, &bmd, NULL, &cmd) == dnnl_success &&
           dnnl_primitive_attr_create(&attr) == dnnl_success;
  if (ok && alpha != 1.0f) ok = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha) == dnnl_success;
  if (ok && beta != 0.0f)
    ok = dnnl_post_ops_create(&ops) == dnnl_success && dnnl_post_ops_append_sum(ops, beta) == dnnl_success &&
         dnnl_primitive_attr_set_post_ops(attr, ops) == dnnl_success;
  ok = ok && dnnl_primitive_desc_create(&pd, &md, attr, g.engine, NULL) == dnnl_success &&
       dnnl_primitive_create(&e->prim, pd) == dnnl_success &&
       dnnl_memory_create(&e->a, &amd, g.engine, DNNL_MEMORY_NONE) == dnnl_success &&
       dnnl_memory_create(&e->b, &bmd, g.engine, DNNL_MEMORY_NONE) == dnnl_success &&
       dnnl_memory_create(&e->c, &cmd, g.engine, DNNL_MEMORY_NONE) == dnnl_success;
  if (ok) {
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl)
      snprintf(e->impl, sizeof e->impl, "%s", impl);
  }
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (ops) dnnl_post_ops_destroy(ops);
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (!ok) { /* kept, marked: the example's own kernel computes this shape from now on */
    entry_free(e);
    *e = (entry){ta, tb, M, N, K, lda, ldb, ldc, alpha, beta, NULL, NULL, NULL, NULL, 1, "gemm_bf16"};
    if (g.fallbacks++ == 0) {
      const char *rank = getenv("RANK");
      const dnnl_version_t *v = dnnl_version();
      if (!rank || strcmp(rank, "0") == 0)
        fprintf(stderr, "gpt: oneDNN %d.%d.%d has no bf16 matmul on this CPU for %s%s M %d N %d K %d (lda %d, ldb %d, "
                "ldc %d): such products use the example's own bf16 kernel (%s, the same arithmetic) instead (said "
                "once)\n", v->major, v->minor, v->patch, ta ? "A^T " : "A ", tb ? "B^T" : "B", M, N, K, lda, ldb,
                ldc, gemm_bf16_kernel());
    }
  }
  return e;
}

/* bf16 bit patterns (rows x cols, leading dimension ld) widened to float, dense: exact. */
static float *widen(float **buf, size_t *cap, const uint16_t *A, int rows, int cols, int ld) {
  size_t n = (size_t)rows * (size_t)cols;
  if (n > *cap) {
    free(*buf);
    *buf = malloc(n * sizeof **buf);
    *cap = *buf ? n : 0;
    if (!*buf) return NULL;
  }
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) {
      const uint32_t u = (uint32_t)A[(size_t)r * ld + c] << 16;
      memcpy(*buf + (size_t)r * cols + c, &u, sizeof u);
    }
  return *buf;
}

/* A shape without a oneDNN primitive: gemm_bf16 on the operands widened back to float (rounding
 * them to bf16 again changes nothing). */
static int fallback_pre(int ta, int tb, int M, int N, int K, float alpha, const uint16_t *A, int lda,
                        const uint16_t *B, int ldb, float beta, float *C, int ldc) {
  const int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
  float *a = widen(&g.fa, &g.facap, A, ar, ac, lda), *b = a ? widen(&g.fb, &g.fbcap, B, br, bc, ldb) : NULL;
  if (N > g.scratch_n) {
    free(g.scratch);
    const size_t bytes = (gemm_bf16_scratch_bytes(N) + 63) / 64 * 64;
    g.scratch = aligned_alloc(64, bytes);
    g.scratch_n = g.scratch ? N : 0;
  }
  if (!a || !b || !g.scratch) {
    snprintf(g.describe, sizeof g.describe, "oneDNN fallback: out of memory for the operands");
    return -1;
  }
  gemm_bf16(ta, tb, M, N, K, alpha, a, ac, b, bc, beta, C, ldc, g.scratch);
  return 0;
}

int gemm_dnnl_bf16_pre(int ta, int tb, int M, int N, int K, float alpha, const uint16_t *A,
                       int lda, const uint16_t *B, int ldb, float beta, float *C, int ldc) {
  if (M <= 0 || N <= 0 || K <= 0 || init() != 1) return M <= 0 || N <= 0 ? 0 : -1;
  entry *e = lookup(ta, tb, M, N, K, alpha, lda, ldb, beta, ldc);
  if (!e) return -1;
  if (e->none) {
    g.last_impl = e->impl;
    return fallback_pre(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  if (dnnl_memory_set_data_handle(e->a, (void *)A) != dnnl_success ||
      dnnl_memory_set_data_handle(e->b, (void *)B) != dnnl_success ||
      dnnl_memory_set_data_handle(e->c, C) != dnnl_success)
    return -1;
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, e->a}, {DNNL_ARG_WEIGHTS, e->b}, {DNNL_ARG_DST, e->c}};
  if (dnnl_primitive_execute(e->prim, g.stream, 3, args) != dnnl_success) return -1;
  g.last_impl = e->impl;
  return 0;
}

/* A (rows x cols, leading dimension ld) to bf16, dense: leading dimension cols. */
static uint16_t *to_bf16(uint16_t **buf, size_t *cap, const float *A, int rows, int cols, int ld) {
  size_t n = (size_t)rows * (size_t)cols;
  if (n > *cap) {
    free(*buf);
    *buf = malloc(n * sizeof **buf);
    *cap = *buf ? n : 0;
    if (!*buf) return NULL;
  }
  if (ld == cols) gemm_to_bf16(*buf, A, n);
  else
    for (int r = 0; r < rows; r++) gemm_to_bf16(*buf + (size_t)r * cols, A + (size_t)r * ld, (size_t)cols);
  return *buf;
}

int gemm_dnnl_bf16(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc) {
  if (M <= 0 || N <= 0) return 0;
  if (init() != 1) return -1;
  /* stored shapes: A is M x K (K x M when ta), B is K x N (N x K when tb) */
  const int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
  uint16_t *a = to_bf16(&g.abuf, &g.acap, A, ar, ac, lda), *b = to_bf16(&g.bbuf, &g.bcap, B, br, bc, ldb);
  if (!a || !b) {
    snprintf(g.describe, sizeof g.describe, "oneDNN: out of memory for the bf16 operands");
    return -1;
  }
  return gemm_dnnl_bf16_pre(ta, tb, M, N, K, alpha, a, ac, b, bc, beta, C, ldc);
}

#endif
