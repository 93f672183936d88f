/* BatchSamplerShard (spec 6.2) and IterableDatasetShard (spec 6.3), rule for rule.
 * BatchSamplerShard is computed eagerly for one epoch into a flat list of batches: the epoch's
 * order is an array anyway (like torch's randperm), and a list makes skip/resume O(1). */
#include <string.h>

#include "data_internal.h"

struct acc_batch_shard {
  uint32_t magic;
  int64_t *idx;      /* all indices of this process's batches, concatenated */
  int64_t *start;    /* batch b is idx[start[b] .. start[b+1]) */
  int64_t nbatches;
  int64_t len;       /* the __len__ formula */
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

/* Appends a batch made of a[0..na) followed by b[0..nb). */
static void emit(acc_batch_shard *sh, int64_t *fill, const int64_t *a, int64_t na,
                 const int64_t *b, int64_t nb) {
  int64_t s = sh->start[sh->nbatches];
  if (na) memcpy(sh->idx + s, a, (size_t)na * sizeof *a);
  if (nb) memcpy(sh->idx + s + na, b, (size_t)nb * sizeof *b);
  sh->nbatches++;
  sh->start[sh->nbatches] = s + na + nb;
  *fill = s + na + nb;
}

static int64_t shard_len(int64_t L, int n, int p, int drop_last, int split, int even) {
  if (n == 1 || split) return L;
  if (L % n == 0) return L / n;
  if (drop_last) return L / n;
  if (even) return L / n + 1;
  return p < L % n ? L / n + 1 : L / n;
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
  const int np = cfg->num_processes, p = cfg->process_index;
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
  const int64_t bs = batch_size;
  const int64_t L = acc_batch_sampler_len(n, bs, drop_last);
  acc_batch_shard *sh = acc__calloc(1, sizeof *sh);
  if (!sh) return ACC_ERR_NOMEM;
  sh->magic = ACC__MAGIC_BATCH_SHARD;
  /* Upper bounds: at most L + 1 batches; the unpadded batches of a process are disjoint parts of
   * order (<= n indices) and at most one batch (<= bs indices) is padded. */
  sh->start = acc__calloc((size_t)L + 2, sizeof *sh->start);
  sh->idx = acc__malloc(((size_t)n + (size_t)bs) * sizeof *sh->idx);
  if (!sh->start || !sh->idx) {
    acc_batch_shard_destroy(sh);
    return ACC_ERR_NOMEM;
  }
  sh->len = shard_len(L, np, p, drop_last, split, even);
  int64_t fill = 0;
  /* Batch k of the underlying BatchSampler is order[k*bs .. min((k+1)*bs, n)). */
#define BATCH_PTR(k) (order + (k) * bs)
#define BATCH_LEN(k) ((k) * bs + bs <= n ? bs : n - (k) * bs)
  if (np == 1) {
    for (int64_t k = 0; k < L; k++) emit(sh, &fill, BATCH_PTR(k), BATCH_LEN(k), NULL, 0);
  } else if (split) {
    const int64_t chunk = bs / np;
    for (int64_t k = 0; k < L; k++)
      if (BATCH_LEN(k) == bs) emit(sh, &fill, BATCH_PTR(k) + p * chunk, chunk, NULL, 0);
    if (!drop_last && L > 0 && BATCH_LEN(L - 1) < bs) {
      const int64_t *last = BATCH_PTR(L - 1);
      const int64_t last_len = BATCH_LEN(L - 1);
      if (!even) {
        if (last_len > p * chunk) {
          int64_t e = (p + 1) * chunk < last_len ? (p + 1) * chunk : last_len;
          emit(sh, &fill, last + p * chunk, e - p * chunk, NULL, 0);
        }
      } else {
        /* batch + initial_data, where initial_data (the first batch) is doubled until it holds
         * at least batch_size indices; slice [p*chunk, (p+1)*chunk). */
        int64_t first_len = BATCH_LEN(0);
        int64_t init_len = first_len;
        while (init_len < bs) init_len *= 2;
        int64_t *cat = acc__malloc((size_t)(last_len + init_len) * sizeof *cat);
        if (!cat) {
          acc_batch_shard_destroy(sh);
          return ACC_ERR_NOMEM;
        }
        memcpy(cat, last, (size_t)last_len * sizeof *cat);
        for (int64_t i = 0; i < init_len; i++) cat[last_len + i] = order[i % first_len];
        emit(sh, &fill, cat + p * chunk, chunk, NULL, 0);
        acc__free(cat);
      }
    }
  } else {
    /* No split: batch k belongs to process k % np; a round is released only when the batch
     * closing it is full, so a short last batch is held back. */
    int64_t held = -1; /* batch index this process holds, -1: none */
    for (int64_t k = 0; k < L; k++) {
      if (k % np == p) held = k;
      if (k % np == np - 1 && BATCH_LEN(k) == bs) {
        if (held >= 0) emit(sh, &fill, BATCH_PTR(held), BATCH_LEN(held), NULL, 0);
        held = -1;
      }
    }
    if (!drop_last && L > 0) {
      if (!even) {
        if (held >= 0) emit(sh, &fill, BATCH_PTR(held), BATCH_LEN(held), NULL, 0);
      } else {
        if (held >= 0 && BATCH_LEN(held) == bs)
          emit(sh, &fill, BATCH_PTR(held), BATCH_LEN(held), NULL, 0);
        /* initial_data: the first min(np, L) batches flattened, doubled until >= np*bs. */
        int64_t init0 = n < (int64_t)np * bs ? n : (int64_t)np * bs;
        int64_t init_len = init0;
        while (init_len < (int64_t)np * bs) init_len *= 2;
        int64_t *init = acc__malloc((size_t)init_len * sizeof *init);
        if (!init) {
          acc_batch_shard_destroy(sh);
          return ACC_ERR_NOMEM;
        }
        for (int64_t i = 0; i < init_len; i++) init[i] = order[i % init0];
        int64_t idx = L - 1;
        const int64_t *batch = BATCH_PTR(idx);
        int64_t blen = BATCH_LEN(idx);
        if (blen == bs) {
          blen = 0;
          idx++;
        }
        int64_t cursor = 0;
        while (idx % np != 0 || blen > 0) {
          int64_t take = bs - blen;
          if (idx % np == p) emit(sh, &fill, batch, blen, init + cursor, take);
          cursor += take;
          blen = 0;
          idx++;
        }
        acc__free(init);
      }
    }
  }
#undef BATCH_PTR
#undef BATCH_LEN
  (void)fill;
  *out = sh;
  return ACC_OK;
}

int64_t acc_batch_shard_len(const acc_batch_shard *sh) {
  return acc__handle_ok(sh, ACC__HANDLE_BATCH_SHARD) ? sh->len : 0;
}
int64_t acc_batch_shard_count(const acc_batch_shard *sh) {
  return acc__handle_ok(sh, ACC__HANDLE_BATCH_SHARD) ? sh->nbatches : 0;
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
