/* Shared-memory backend, the choice of algorithm by collective, process count and size: ONE table
 * (rules[] below), read by shm_coll.c at every all_reduce / reduce / all_gather / gather, printed
 * by bench/comm (acc_bench_comm --table) and re-derived from measurements by
 * bench/comm/algo_table.sh, which runs every algorithm forced at every size and prints, per
 * process count, where each one is fastest next to this table.
 *
 * The algorithms (shm_coll.c):
 *   all_reduce / reduce
 *     onestep  every rank writes its whole message into its slot, one step, every rank reduces
 *              the n slots: one step, but each rank reads n times the message. Best while n times
 *              the message is small (the step dominates).
 *     blocks   a reduce-scatter and an all-gather through the segment (two-level: each rank reduces
 *              its 1/n block of every rank's data into the result area, then every rank copies
 *              the n - 1 other blocks out): two steps per call (one per chunk, plus one), each
 *              rank reads about twice the message whatever n. At 16 processes onestep read 16x the
 *              message and took 19.6-60 us at 4-16 KiB on a 16-core Xeon where blocks took 37 us at
 *              64 KiB (../shared/reviews/gpu-4.md): the crossing falls with n.
 *   all_gather / gather / all_gather_v
 *     slots    each rank writes its block into its slot, one step, each rank copies the n - 1 other
 *              slots into its buffer with ordinary stores.
 *     stream   the same, but the copies into the rank's own buffer use non-temporal stores (whole
 *              lines to memory without reading them first): once the output is larger than the
 *              caches the destination lines would otherwise be read from memory before being
 *              overwritten (a third of the memory traffic); below that the result is wanted
 *              in the cache, where ordinary stores leave it.
 * Every all_reduce algorithm reduces in rank order elementwise, so they give the same bits, and
 * the table may change without changing a result.
 *
 * Forcing one (ACCELERATE_SHM_ALGO_ALL_REDUCE, ACCELERATE_SHM_ALGO_ALL_GATHER: the benchmark's
 * and the tests' way to run each at every size): rank 0 reads them into the segment's header,
 * so every rank takes the same path. */
#include "backend/shm_impl.h"

#include <stdio.h>

#include "core/env.h"

/* First rule with n <= max_procs and bytes <= max_bytes wins (bytes: the message of all_reduce,
 * the per-process block of all_gather). The thresholds are estimates from the 16-core figures
 * above and the 2-core machine's (docs/PERFORMANCE.md); bench/comm/algo_table.sh re-derives
 * them on the machine at hand. */
static const acc__shm_rule rules[] = {
    {ACC__SHM_OP_ALL_REDUCE, 2, 16u * 1024u, ACC__SHM_ALGO_ONESTEP},
    {ACC__SHM_OP_ALL_REDUCE, 4, 8u * 1024u, ACC__SHM_ALGO_ONESTEP},
    {ACC__SHM_OP_ALL_REDUCE, 8, 2u * 1024u, ACC__SHM_ALGO_ONESTEP},
    {ACC__SHM_OP_ALL_REDUCE, INT32_MAX, 1024u, ACC__SHM_ALGO_ONESTEP},
    {ACC__SHM_OP_ALL_REDUCE, INT32_MAX, UINT64_MAX, ACC__SHM_ALGO_BLOCKS},
    {ACC__SHM_OP_ALL_GATHER, 2, UINT64_MAX, ACC__SHM_ALGO_SLOTS}, /* 2-core figures: a tie */
    {ACC__SHM_OP_ALL_GATHER, 4, 2u << 20, ACC__SHM_ALGO_SLOTS},
    {ACC__SHM_OP_ALL_GATHER, 8, 1u << 20, ACC__SHM_ALGO_SLOTS},
    {ACC__SHM_OP_ALL_GATHER, INT32_MAX, 512u << 10, ACC__SHM_ALGO_SLOTS},
    {ACC__SHM_OP_ALL_GATHER, INT32_MAX, UINT64_MAX, ACC__SHM_ALGO_STREAM},
};

static const char *const algo_names[ACC__SHM_ALGO_COUNT] = {"auto", "onestep", "blocks", "slots",
                                                           "stream"};
static const char *const op_names[2] = {"all_reduce", "all_gather"};

const acc__shm_rule *acc__shm_algo_rules(size_t *count) {
  *count = sizeof rules / sizeof rules[0];
  return rules;
}

const char *acc__shm_algo_name(int algo) {
  return algo >= 0 && algo < ACC__SHM_ALGO_COUNT ? algo_names[algo] : "?";
}

int acc__shm_algo_pick(int forced, int op, int n, uint64_t bytes) {
  if (forced != ACC__SHM_ALGO_AUTO) return forced;
  for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
    if (rules[i].op == op && n <= rules[i].max_procs && bytes <= rules[i].max_bytes)
      return rules[i].algo;
  return op == ACC__SHM_OP_ALL_REDUCE ? ACC__SHM_ALGO_BLOCKS : ACC__SHM_ALGO_SLOTS;
}

void acc__shm_algo_print(FILE *out) {
  fprintf(out, "# shm algorithm table (src/backend/shm_algo.c): first row with procs <= max_procs "
               "and bytes <= max_bytes\n");
  for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
    const acc__shm_rule *r = &rules[i];
    char p[16], b[24];
    if (r->max_procs == INT32_MAX) snprintf(p, sizeof p, "any");
    else snprintf(p, sizeof p, "%d", (int)r->max_procs);
    if (r->max_bytes == UINT64_MAX) snprintf(b, sizeof b, "any");
    else snprintf(b, sizeof b, "%llu", (unsigned long long)r->max_bytes);
    fprintf(out, "rule %-10s max_procs %-4s max_bytes %-10s %s\n", op_names[r->op], p, b,
            acc__shm_algo_name(r->algo));
  }
}

/* Rank 0, creating the segment: the forced algorithms into the header (0: auto). */
acc_result acc__shm_algo_choose(shm_be *s) {
  static const char *const vars[2] = {"ACCELERATE_SHM_ALGO_ALL_REDUCE",
                                      "ACCELERATE_SHM_ALGO_ALL_GATHER"};
  /* the enum's choices in order: auto, then the op's algorithms */
  static const int first[2] = {ACC__SHM_ALGO_ONESTEP, ACC__SHM_ALGO_SLOTS};
  uint32_t word = 0;
  for (int k = 0; k < 2; k++) {
    int idx = 0, set = 0;
    ACC_CHECK(acc__env_enum(vars[k], &idx, &set));
    int algo = set && idx > 0 ? first[k] + idx - 1 : ACC__SHM_ALGO_AUTO;
    word |= (uint32_t)algo << (8 * k);
  }
  s->hdr->algo = word;
  return ACC_OK;
}

/* Every rank, once the header is ready. */
void acc__shm_algo_load(shm_be *s) {
  s->algo_forced[ACC__SHM_OP_ALL_REDUCE] = (int)(s->hdr->algo & 0xff);
  s->algo_forced[ACC__SHM_OP_ALL_GATHER] = (int)((s->hdr->algo >> 8) & 0xff);
  for (int k = 0; k < 2; k++)
    if (s->algo_forced[k] >= ACC__SHM_ALGO_COUNT) s->algo_forced[k] = ACC__SHM_ALGO_AUTO;
}
