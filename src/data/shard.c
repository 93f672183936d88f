/* BatchSamplerShard and IterableDatasetShard, rule for rule.
 * BatchSamplerShard is computed eagerly for one epoch into a flat list of batches: the epoch's
 * order is an array anyway (like torch's randperm), and a list makes skip/resume O(1). The
 * underlying batch sampler is either BatchSampler(order, batch_size) or a given list of batches
 * (sizes may differ, e.g. length-bucketed batches). */
#include <string.h>

#include "data/data_internal.h"

struct acc_batch_shard {
  uint32_t magic;
  int64_t *idx;      /* all indices of this process's batches, concatenated */
  int64_t *start;    /* batch b is idx[start[b] .. start[b+1]) */
  int64_t nbatches;
  int64_t cap_idx, cap_batches;
  int64_t len;       /* the __len__ formula */
  int p, np;
  int64_t *owner_count; /* batches yielded by each process */
  int64_t *owner_real;  /* real (non-padding) samples in each process's latest batch */
  int oom;
};

static acc_result check_cfg(const acc_shard_config *cfg, const char *fn) {
  if (!cfg) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: shard config is NULL", fn);
  if (cfg->num_processes < 1)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: num_processes is %d, expected >= 1", fn,
                      cfg->num_processes);
  if (cfg->process_index < 0 || cfg->process_index >= cfg->num_processes)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "%s: process_index is %d, expected 0..%d (num_processes %d)", fn,
                      cfg->process_index, cfg->num_processes - 1, cfg->num_processes);
  return ACC_OK;
}

/* Process `owner` yields a batch made of a[0..na) followed by b[0..nb), of which the first
 * `real` samples are not padding. Every process's yields are counted (for the gather_for_metrics
 * bookkeeping); only this process's are stored. */
static void emit(acc_batch_shard *sh, int owner, const int64_t *a, int64_t na, const int64_t *b,
                 int64_t nb, int64_t real) {
  sh->owner_count[owner]++;
  sh->owner_real[owner] = real;
  if (owner != sh->p || sh->oom) return;
  int64_t s = sh->start[sh->nbatches];
  if (sh->nbatches + 2 > sh->cap_batches) {
    int64_t nc = 2 * sh->cap_batches + 16;
    int64_t *v = acc__realloc(sh->start, (size_t)nc * sizeof *v);
    if (!v) {
      sh->oom = 1;
      return;
    }
    sh->start = v;
    sh->cap_batches = nc;
  }
  if (s + na + nb > sh->cap_idx) {
    int64_t nc = 2 * sh->cap_idx + na + nb + 16;
    int64_t *v = acc__realloc(sh->idx, (size_t)nc * sizeof *v);
    if (!v) {
      sh->oom = 1;
      return;
    }
    sh->idx = v;
    sh->cap_idx = nc;
  }
  if (na) memcpy(sh->idx + s, a, (size_t)na * sizeof *a);
  if (nb) memcpy(sh->idx + s + na, b, (size_t)nb * sizeof *b);
  sh->nbatches++;
  sh->start[sh->nbatches] = s + na + nb;
}

static int64_t shard_len(int64_t L, int n, int p, int drop_last, int split, int even) {
  if (n == 1 || split) return L;
  if (L % n == 0) return L / n;
  if (drop_last) return L / n;
  if (even) return L / n + 1;
  return p < L % n ? L / n + 1 : L / n;
}

/* The underlying batch sampler: batch k is idx[off[k] .. off[k+1]) (a given list of batches) or,
 * when off is NULL, BatchSampler(order = idx[0..n), bs): idx[k*bs .. min((k+1)*bs, n)). */
typedef struct bsrc {
  const int64_t *idx, *off;
  int64_t n, L;
} bsrc;

static const int64_t *bptr(const bsrc *s, int64_t bs, int64_t k) {
  return s->off ? s->idx + s->off[k] : s->idx + k * bs;
}
static int64_t blen(const bsrc *s, int64_t bs, int64_t k) {
  if (s->off) return s->off[k + 1] - s->off[k];
  return k * bs + bs <= s->n ? bs : s->n - k * bs;
}

/* BatchSamplerShard's iteration for every process at once (only process p's batches are kept).
 * bs == 0: the sampler has no batch_size ("dynamic" batches). */
static acc_result shard_run(acc_batch_shard *sh, const bsrc *s, int64_t bs, int drop_last,
                            int split, int even) {
  const int np = sh->np;
  const int64_t L = s->L;
  const int dynamic = bs == 0;
  if (np == 1) {
    for (int64_t k = 0; k < L; k++)
      emit(sh, 0, bptr(s, bs, k), blen(s, bs, k), NULL, 0, blen(s, bs, k));
    return ACC_OK;
  }
  if (split) {
    const int64_t chunk = bs / np;
    for (int64_t k = 0; k < L; k++)
      if (blen(s, bs, k) == bs)
        for (int q = 0; q < np; q++) emit(sh, q, bptr(s, bs, k) + q * chunk, chunk, NULL, 0, chunk);
    if (drop_last || L == 0 || blen(s, bs, L - 1) >= bs) return ACC_OK;
    const int64_t *last = bptr(s, bs, L - 1);
    const int64_t last_len = blen(s, bs, L - 1);
    if (!even) {
      for (int q = 0; q < np; q++)
        if (last_len > q * chunk) {
          int64_t e = (q + 1) * chunk < last_len ? (q + 1) * chunk : last_len;
          emit(sh, q, last + q * chunk, e - q * chunk, NULL, 0, e - q * chunk);
        }
      return ACC_OK;
    }
    /* The short last batch followed by initial_data (the first batch, doubled until it holds at
     * least batch_size indices); process q takes [q*chunk, (q+1)*chunk). */
    const int64_t *first = bptr(s, bs, 0);
    const int64_t first_len = blen(s, bs, 0);
    int64_t init_len = first_len;
    while (init_len < bs) init_len *= 2;
    int64_t *cat = acc__malloc((size_t)(last_len + init_len) * sizeof *cat);
    if (!cat) return ACC_ERR_NOMEM;
    memcpy(cat, last, (size_t)last_len * sizeof *cat);
    for (int64_t i = 0; i < init_len; i++) cat[last_len + i] = first[i % first_len];
    for (int q = 0; q < np; q++) {
      int64_t real = last_len - q * chunk;
      real = real < 0 ? 0 : real > chunk ? chunk : real;
      emit(sh, q, cat + q * chunk, chunk, NULL, 0, real);
    }
    acc__free(cat);
    return ACC_OK;
  }
  /* No split: batch k belongs to process k % np; a round is released only when the batch closing
   * it is full (or batches are dynamic), so a short batch closing a round holds the round back.
   * A process's held batch is replaced by its batch of the next round, as in Accelerate. */
  int64_t *held = acc__malloc((size_t)np * sizeof *held);
  if (!held) return ACC_ERR_NOMEM;
  for (int q = 0; q < np; q++) held[q] = -1;
  for (int64_t k = 0; k < L; k++) {
    held[k % np] = k;
    if (k % np == np - 1 && (dynamic || blen(s, bs, k) == bs)) {
      for (int q = 0; q < np; q++) {
        if (held[q] >= 0)
          emit(sh, q, bptr(s, bs, held[q]), blen(s, bs, held[q]), NULL, 0, blen(s, bs, held[q]));
        held[q] = -1;
      }
    }
  }
  acc_result rc = ACC_OK;
  if (!drop_last && L > 0) {
    if (!even) {
      for (int q = 0; q < np; q++)
        if (held[q] >= 0)
          emit(sh, q, bptr(s, bs, held[q]), blen(s, bs, held[q]), NULL, 0, blen(s, bs, held[q]));
    } else {
      for (int q = 0; q < np; q++)
        if (held[q] >= 0 && (dynamic || blen(s, bs, held[q]) == bs))
          emit(sh, q, bptr(s, bs, held[q]), blen(s, bs, held[q]), NULL, 0, blen(s, bs, held[q]));
      /* initial_data: the first min(np, L) batches (flattened, or as a list of batches when
       * dynamic), doubled until it holds np * batch_size indices (np batches when dynamic). */
      const int64_t nfirst = L < np ? L : np;
      int64_t idx = L - 1;
      int64_t batch_len = blen(s, bs, idx);
      const int64_t *batch = bptr(s, bs, idx);
      if (dynamic || batch_len == bs) {
        batch_len = 0;
        idx++;
      }
      if (dynamic) {
        int64_t cursor = 0;
        while (idx % np != 0) {
          int64_t k = cursor % nfirst; /* the doubled list repeats the first nfirst batches */
          emit(sh, (int)(idx % np), bptr(s, bs, k), blen(s, bs, k), NULL, 0, 0);
          cursor++;
          idx++;
        }
      } else {
        int64_t init0 = 0;
        for (int64_t k = 0; k < nfirst; k++) init0 += blen(s, bs, k);
        int64_t init_len = init0;
        while (init_len < (int64_t)np * bs) init_len *= 2;
        int64_t *init = acc__malloc((size_t)init_len * sizeof *init);
        if (!init) {
          acc__free(held);
          return ACC_ERR_NOMEM;
        }
        /* The first nfirst batches are contiguous in both layouts (a list's batches are stored
         * back to back; the BatchSampler's are consecutive runs of the order). */
        const int64_t *f0 = bptr(s, bs, 0);
        for (int64_t i = 0; i < init_len; i++) init[i] = f0[i % init0];
        int64_t cursor = 0;
        while (idx % np != 0 || batch_len > 0) {
          int64_t take = bs - batch_len;
          emit(sh, (int)(idx % np), batch, batch_len, init + cursor, take, batch_len);
          cursor += take;
          batch_len = 0;
          idx++;
        }
        acc__free(init);
      }
    }
  }
  acc__free(held);
  return rc;
}

static acc_result shard_new(acc_batch_shard **out, const acc_shard_config *cfg, int64_t L,
                            int drop_last, int split, int even) {
  acc_batch_shard *sh = acc__calloc(1, sizeof *sh);
  if (!sh) return ACC_ERR_NOMEM;
  sh->magic = ACC__MAGIC_BATCH_SHARD;
  sh->np = cfg->num_processes;
  sh->p = cfg->process_index;
  sh->cap_batches = 16;
  sh->start = acc__calloc((size_t)sh->cap_batches, sizeof *sh->start);
  sh->owner_count = acc__calloc((size_t)sh->np, sizeof *sh->owner_count);
  sh->owner_real = acc__calloc((size_t)sh->np, sizeof *sh->owner_real);
  if (!sh->start || !sh->owner_count || !sh->owner_real) {
    acc_batch_shard_destroy(sh);
    return ACC_ERR_NOMEM;
  }
  sh->len = shard_len(L, sh->np, sh->p, drop_last, split, even);
  *out = sh;
  return ACC_OK;
}

static acc_result shard_finish(acc_batch_shard **out, acc_batch_shard *sh, acc_result rc) {
  if (rc == ACC_OK && sh->oom) rc = ACC_ERR_NOMEM;
  if (rc != ACC_OK) {
    acc_batch_shard_destroy(sh);
    return rc;
  }
  *out = sh;
  return ACC_OK;
}

acc_result acc_batch_shard_create(acc_batch_shard **out, const int64_t *order, int64_t n,
                                  int64_t batch_size, int drop_last, const acc_shard_config *cfg) {
  static const char fn[] = "acc_batch_shard_create";
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
  *out = NULL;
  ACC_CHECK(check_cfg(cfg, fn));
  if (n < 0 || (n > 0 && !order))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: order is NULL or n (%lld) is negative", fn,
                      (long long)n);
  if (batch_size < 1)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: batch_size is %lld, expected >= 1", fn,
                      (long long)batch_size);
  const int np = cfg->num_processes;
  const int split = cfg->split_batches && np > 1, even = cfg->even_batches != 0;
  if (batch_size > ACC_DATA_MAX_GLOBAL_BATCH / np || n > ACC_DATA_MAX_GLOBAL_BATCH * 64)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "%s: batch_size %lld x num_processes %d (or n = %lld) is too large", fn,
                      (long long)batch_size, np, (long long)n);
  if (split && batch_size % np != 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "To use `BatchSamplerShard` in `split_batches` mode, the batch size (%lld) "
                      "needs to be a round multiple of the number of processes (%d).",
                      (long long)batch_size, np);
  bsrc s = {order, NULL, n, acc_batch_sampler_len(n, batch_size, drop_last)};
  acc_batch_shard *sh;
  ACC_CHECK(shard_new(&sh, cfg, s.L, drop_last, split, even));
  return shard_finish(out, sh, shard_run(sh, &s, batch_size, drop_last, split, even));
}

acc_result acc_batch_shard_create_from_batches(acc_batch_shard **out, const int64_t *indices,
                                               const int64_t *counts, int64_t num_batches,
                                               int64_t batch_size, int drop_last,
                                               const acc_shard_config *cfg) {
  static const char fn[] = "acc_batch_shard_create_from_batches";
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
  *out = NULL;
  ACC_CHECK(check_cfg(cfg, fn));
  if (num_batches < 0 || (num_batches > 0 && (!indices || !counts)))
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "%s: indices or counts is NULL, or num_batches (%lld) is negative", fn,
                      (long long)num_batches);
  if (batch_size < 0)
    return acc__error(
        ACC_ERR_INVALID_ARGUMENT,
        "%s: batch_size is %lld, expected >= 1 (or 0: the batches have no fixed size)", fn,
        (long long)batch_size);
  const int np = cfg->num_processes;
  const int split = cfg->split_batches && np > 1, even = cfg->even_batches != 0;
  if (batch_size > ACC_DATA_MAX_GLOBAL_BATCH / np)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "%s: batch_size %lld x num_processes %d is too large", fn,
                      (long long)batch_size, np);
  if (split && (batch_size == 0 || batch_size % np != 0)) {
    if (batch_size == 0)
      return acc__error(
          ACC_ERR_INVALID_ARGUMENT,
          "To use `BatchSamplerShard` in `split_batches` mode, the batch size (none: "
          "the batches have no fixed size) needs to be a round multiple of the number "
          "of processes (%d).",
          np);
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "To use `BatchSamplerShard` in `split_batches` mode, the batch size (%lld) "
                      "needs to be a round multiple of the number of processes (%d).",
                      (long long)batch_size, np);
  }
  int64_t *off = acc__malloc(((size_t)num_batches + 1) * sizeof *off);
  if (!off) return ACC_ERR_NOMEM;
  off[0] = 0;
  for (int64_t k = 0; k < num_batches; k++) {
    if (counts[k] < 1 || (batch_size > 0 && counts[k] > batch_size)) {
      acc__free(off);
      if (counts[k] < 1)
        return acc__error(ACC_ERR_INVALID_ARGUMENT,
                          "%s: batch %lld has %lld samples, expected >= 1", fn, (long long)k,
                          (long long)counts[k]);
      return acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "%s: batch %lld has %lld samples, more than the batch_size %lld (pass "
                        "batch_size 0 for batches without a fixed size)",
                        fn, (long long)k, (long long)counts[k], (long long)batch_size);
    }
    if (counts[k] > ACC_DATA_MAX_GLOBAL_BATCH || off[k] > ACC_DATA_MAX_GLOBAL_BATCH * 64) {
      acc__free(off);
      return acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "%s: batch %lld (%lld samples) makes the list too large", fn, (long long)k,
                        (long long)counts[k]);
    }
    off[k + 1] = off[k] + counts[k];
  }
  bsrc s = {indices, off, off[num_batches], num_batches};
  acc_batch_shard *sh;
  acc_result rc = shard_new(&sh, cfg, num_batches, drop_last, split, even);
  if (rc == ACC_OK)
    rc = shard_finish(out, sh, shard_run(sh, &s, batch_size, drop_last, split, even));
  acc__free(off);
  return rc;
}

int64_t acc_batch_shard_len(const acc_batch_shard *sh) {
  return acc__handle_ok(sh, ACC__HANDLE_BATCH_SHARD) ? sh->len : 0;
}
int64_t acc_batch_shard_count(const acc_batch_shard *sh) {
  return acc__handle_ok(sh, ACC__HANDLE_BATCH_SHARD) ? sh->nbatches : 0;
}

int64_t acc__batch_shard_last_round_real(const acc_batch_shard *sh) {
  if (!sh || sh->owner_count[0] == 0) return -1;
  int64_t sum = 0;
  for (int q = 0; q < sh->np; q++) {
    if (sh->owner_count[q] != sh->owner_count[0]) return -1;
    sum += sh->owner_real[q];
  }
  return sum;
}

acc_result acc_batch_shard_get(const acc_batch_shard *sh, int64_t i, const int64_t **indices,
                               int64_t *count) {
  ACC_CHECK(acc__check_handle(sh, ACC__HANDLE_BATCH_SHARD, "acc_batch_shard_get"));
  if (!indices || !count)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_batch_shard_get: NULL argument");
  if (i < 0 || i >= sh->nbatches)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "acc_batch_shard_get: batch %lld out of range (this process has %lld)",
                      (long long)i, (long long)sh->nbatches);
  *indices = sh->idx + sh->start[i];
  *count = sh->start[i + 1] - sh->start[i];
  return ACC_OK;
}

void acc_batch_shard_destroy(acc_batch_shard *sh) {
  if (!acc__handle_ok(sh, ACC__HANDLE_BATCH_SHARD)) return;
  sh->magic = ACC__MAGIC_DEAD;
  acc__free(sh->idx);
  acc__free(sh->start);
  acc__free(sh->owner_count);
  acc__free(sh->owner_real);
  acc__free(sh);
}

/* ---- IterableDatasetShard ---------------------------------------------------------------- */

struct acc_iterable_shard {
  uint32_t magic;
  int64_t real_bs;   /* batch_size (split) or batch_size * n */
  int64_t chunk;     /* batch_size / n (split) or batch_size */
  int64_t lo;        /* first owned position of a real batch */
  int drop_last;
  int64_t *cur;      /* current real batch, cur_len items */
  int64_t cur_len;
  int64_t *first;    /* first full real batch, when have_first */
  int have_first;
  int64_t *outbuf;   /* the padded last batch */
};

acc_result acc_iterable_shard_create(acc_iterable_shard **out, int64_t batch_size, int drop_last,
                                     const acc_shard_config *cfg) {
  static const char fn[] = "acc_iterable_shard_create";
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
  *out = NULL;
  ACC_CHECK(check_cfg(cfg, fn));
  if (batch_size < 1)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: batch_size is %lld, expected >= 1", fn,
                      (long long)batch_size);
  const int np = cfg->num_processes;
  if (batch_size > ACC_DATA_MAX_GLOBAL_BATCH / np)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: batch_size %lld x num_processes %d is too large",
                      fn, (long long)batch_size, np);
  if (cfg->split_batches && batch_size > 1 && batch_size % np != 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "To use `IterableDatasetShard` in `split_batches` mode, the batch size "
                      "(%lld) needs to be a round multiple of the number of processes (%d).",
                      (long long)batch_size, np);
  acc_iterable_shard *sh = acc__calloc(1, sizeof *sh);
  if (!sh) return ACC_ERR_NOMEM;
  sh->magic = ACC__MAGIC_ITERABLE_SHARD;
  sh->real_bs = cfg->split_batches ? batch_size : batch_size * np;
  sh->chunk = cfg->split_batches ? batch_size / np : batch_size;
  sh->lo = cfg->process_index * sh->chunk;
  sh->drop_last = drop_last != 0;
  sh->cur = acc__malloc((size_t)sh->real_bs * sizeof(int64_t));
  sh->first = acc__malloc((size_t)sh->real_bs * sizeof(int64_t));
  sh->outbuf = acc__malloc((size_t)sh->real_bs * sizeof(int64_t));
  if (!sh->cur || !sh->first || !sh->outbuf) {
    acc_iterable_shard_destroy(sh);
    return ACC_ERR_NOMEM;
  }
  *out = sh;
  return ACC_OK;
}

int acc_iterable_shard_push(acc_iterable_shard *sh, int64_t item, const int64_t **items,
                            int64_t *count) {
  if (!acc__handle_ok(sh, ACC__HANDLE_ITERABLE_SHARD)) return 0;
  sh->cur[sh->cur_len++] = item;
  if (sh->cur_len < sh->real_bs) return 0;
  memcpy(sh->outbuf, sh->cur + sh->lo, (size_t)sh->chunk * sizeof(int64_t));
  if (!sh->have_first) {
    memcpy(sh->first, sh->cur, (size_t)sh->real_bs * sizeof(int64_t));
    sh->have_first = 1;
  }
  sh->cur_len = 0;
  if (items) *items = sh->outbuf;
  if (count) *count = sh->chunk;
  return 1;
}

int acc_iterable_shard_finish(acc_iterable_shard *sh, const int64_t **items, int64_t *count) {
  if (!acc__handle_ok(sh, ACC__HANDLE_ITERABLE_SHARD)) return 0;
  int ready = 0;
  if (!sh->drop_last && sh->cur_len > 0) {
    if (!sh->have_first) {
      memcpy(sh->first, sh->cur, (size_t)sh->cur_len * sizeof(int64_t));
    }
    int64_t first_len = sh->have_first ? sh->real_bs : sh->cur_len;
    /* current_batch += first_batch until full; only positions < real_bs matter. */
    for (int64_t i = sh->cur_len, j = 0; i < sh->real_bs; i++, j = (j + 1) % first_len)
      sh->cur[i] = sh->first[j];
    memcpy(sh->outbuf, sh->cur + sh->lo, (size_t)sh->chunk * sizeof(int64_t));
    if (items) *items = sh->outbuf;
    if (count) *count = sh->chunk;
    ready = 1;
  }
  sh->cur_len = 0;
  sh->have_first = 0;
  return ready;
}

int64_t acc_iterable_shard_len(int64_t dataset_len, int64_t batch_size, int drop_last,
                               int num_processes) {
  if (dataset_len <= 0 || batch_size <= 0 || num_processes <= 0) return 0;
  int64_t real = batch_size * num_processes;
  return (drop_last ? dataset_len / real : (dataset_len + real - 1) / real) * batch_size;
}

void acc_iterable_shard_destroy(acc_iterable_shard *sh) {
  if (!acc__handle_ok(sh, ACC__HANDLE_ITERABLE_SHARD)) return;
  sh->magic = ACC__MAGIC_DEAD;
  acc__free(sh->cur);
  acc__free(sh->first);
  acc__free(sh->outbuf);
  acc__free(sh);
}
