/* FSDP: the plugin and its environment, units (declared or made by the wrap policy), the layout of
 * the shards, prepare (the agreement across processes, the first values) and the accessors.
 * The per-step calls are in fsdp_unit.c; checkpoints in src/ckpt/fsdp_ckpt.c. docs/fsdp.md. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "accelerate.h"
#include "accelerate/fsdp.h"
#include "backend/collcheck.h"
#include "comm/group.h"
#include "core/env.h"
#include "train/accel.h"
#include "train/fsdp.h"
#include "train/fsdp_mem.h"
#include "train/model_internal.h"

acc_result acc__fsdp_check(const acc_fsdp *f, const char *fn) {
  if (!f || f->magic != ACC__FSDP_MAGIC)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: the acc_fsdp handle is NULL or not an FSDP state", fn);
  return ACC_OK;
}

acc_result acc__fsdp_check_ready(const acc_fsdp *f, const char *fn) {
  ACC_CHECK(acc__fsdp_check(f, fn));
  if (!f->prepared)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: call acc_fsdp_prepare first (the shards do not exist yet)", fn);
  return ACC_OK;
}

int64_t acc__fsdp_origin(size_t unit, int kind) { return (int64_t)unit * 8 + kind; }

/* ---- the plugin and the environment ------------------------------------------------------ */

static const char *const strategy_names[] = {"", "FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD",
                                             "HYBRID_SHARD_ZERO2"};

static acc_result parse_strategy(const char *text, const char *what, int *out) {
  for (int i = 1; i <= 5; i++)
    if (strcasecmp(text, strategy_names[i]) == 0 || (text[0] == '0' + i && text[1] == '\0')) {
      *out = i;
      return ACC_OK;
    }
  return acc__error(ACC_ERR_INVALID_ARGUMENT,
                    "%s=\"%s\" is not a sharding strategy: use FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD or HYBRID_SHARD_ZERO2 (or 1-5)", what,
                    text);
}

/* FSDP_RESHARD_AFTER_FORWARD: true / false (FSDP2) or a strategy name (FSDP1 configs). */
static acc_result parse_reshard(const char *text, int *reshard, int *strategy) {
  *strategy = ACC_UNSET;
  if (!strcasecmp(text, "true") || !strcmp(text, "1")) {
    *reshard = 1;
    return ACC_OK;
  }
  if (!strcasecmp(text, "false") || !strcmp(text, "0")) {
    *reshard = 0;
    return ACC_OK;
  }
  for (int i = 1; i <= 5; i++)
    if (!strcasecmp(text, strategy_names[i])) {
      *strategy = i;
      *reshard = ACC_UNSET;
      return ACC_OK;
    }
  return acc__error(ACC_ERR_INVALID_ARGUMENT,
                    "FSDP_RESHARD_AFTER_FORWARD=\"%s\" is neither true/false nor a sharding strategy name", text);
}

static acc_result env_enum(const char *name, int *field, int base) {
  if (*field != ACC_UNSET) return ACC_OK;
  int v = 0, set = 0;
  ACC_CHECK(acc__env_enum(name, &v, &set));
  if (set) *field = v + base;
  return ACC_OK;
}

static acc_result env_bool(const char *name, int *field, int def) {
  if (*field != ACC_UNSET) return ACC_OK;
  int v = 0, set = 0;
  ACC_CHECK(acc__env_bool(name, &v, &set));
  *field = set ? v : def;
  return ACC_OK;
}

/* Over which processes the shards are spread: the job, or (HYBRID) this machine's processes,
 * each shard replicated on the same local rank of every machine. The file of a sharded
 * checkpoint and the gathers of a full one count on the machines' processes holding the job's
 * consecutive ranks (machine m's local rank r is rank m * sworld + r): checked here. */
static acc_result shard_groups(acc_fsdp *f) {
  f->srank = f->rank;
  f->sworld = f->world;
  f->shard_group = ACC__GROUP_WORLD;
  f->replica = 0;
  f->replicas = 1;
  if (f->strategy != ACC_FSDP_HYBRID_SHARD && f->strategy != ACC_FSDP_HYBRID_SHARD_ZERO2) return ACC_OK;
  acc_result rc = acc__comm_group_info(f->st, ACC__GROUP_LOCAL, &f->srank, &f->sworld);
  if (rc == ACC_OK) rc = acc__comm_group_info(f->st, ACC__GROUP_RAIL, &f->replica, &f->replicas);
  if (rc != ACC_OK)
    return acc__error_context(rc, "acc_fsdp_create: sharding strategy %s (shard inside a machine, replicate "
                              "across machines) needs this machine's processes as a group",
                              strategy_names[f->strategy]);
  if (f->sworld * f->replicas != f->world || f->rank != f->replica * f->sworld + f->srank)
    return acc__error(ACC_ERR_NOT_SUPPORTED,
                      "acc_fsdp_create: sharding strategy %s needs the same number of processes on every "
                      "machine with consecutive ranks; process %d is process %d of %d on machine %d of %d",
                      strategy_names[f->strategy], f->rank, f->srank, f->sworld, f->replica, f->replicas);
  f->shard_group = ACC__GROUP_LOCAL;
  return ACC_OK;
}

static acc_result resolve_plugin(acc_fsdp *f, const acc_fsdp_plugin *user) {
  acc_fsdp_plugin p = ACC_FSDP_PLUGIN_INIT;
  if (user) ACC__READ_OPTIONS(p, user, acc_fsdp_plugin, ACC_FSDP_PLUGIN_VERSION, "acc_fsdp_create");
  /* strategy: the program's field, FSDP_SHARDING_STRATEGY, then reshard_after_forward */
  int strategy = p.sharding_strategy, reshard = p.reshard_after_forward;
  if (strategy != ACC_UNSET && (strategy < 1 || strategy > 5))
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "acc_fsdp_create: sharding_strategy %d is not an acc_fsdp_sharding_strategy (1-5)", strategy);
  if (reshard != ACC_UNSET && reshard != 0 && reshard != 1)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_fsdp_create: reshard_after_forward %d is not 0, 1 or ACC_UNSET",
                      reshard);
  const char *es = acc__env_str("FSDP_SHARDING_STRATEGY");
  if (strategy == ACC_UNSET && es && *es) ACC_CHECK(parse_strategy(es, "FSDP_SHARDING_STRATEGY", &strategy));
  const char *er = acc__env_str("FSDP_RESHARD_AFTER_FORWARD");
  if (reshard == ACC_UNSET && er && *er) {
    int named = ACC_UNSET;
    ACC_CHECK(parse_reshard(er, &reshard, &named));
    if (named != ACC_UNSET && strategy == ACC_UNSET) strategy = named;
  }
  if (strategy == ACC_UNSET) strategy = reshard == 0 ? ACC_FSDP_SHARD_GRAD_OP : ACC_FSDP_FULL_SHARD;
  int resharding = strategy == ACC_FSDP_FULL_SHARD || strategy == ACC_FSDP_HYBRID_SHARD;
  if (reshard == 0 && resharding)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "acc_fsdp_create: reshard_after_forward false contradicts sharding strategy %s (which "
                      "reshards after forward): give one of them, or %s", strategy_names[strategy],
                      strategy == ACC_FSDP_FULL_SHARD ? "SHARD_GRAD_OP" : "HYBRID_SHARD_ZERO2");
  if (reshard == 1 && (strategy == ACC_FSDP_SHARD_GRAD_OP || strategy == ACC_FSDP_HYBRID_SHARD_ZERO2))
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "acc_fsdp_create: reshard_after_forward true contradicts sharding strategy %s (which "
                      "keeps the parameters until backward): give one of them, or %s", strategy_names[strategy],
                      strategy == ACC_FSDP_SHARD_GRAD_OP ? "FULL_SHARD" : "HYBRID_SHARD");
  f->strategy = strategy;
  f->reshard = strategy == ACC_FSDP_FULL_SHARD || strategy == ACC_FSDP_HYBRID_SHARD;
  f->sharded = strategy != ACC_FSDP_NO_SHARD;

  f->bwd_prefetch = p.backward_prefetch;
  if (f->bwd_prefetch != ACC_UNSET && (f->bwd_prefetch < 1 || f->bwd_prefetch > 3))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_fsdp_create: backward_prefetch %d is not an "
                      "acc_fsdp_backward_prefetch (1 BACKWARD_PRE, 2 BACKWARD_POST, 3 NO_PREFETCH)", f->bwd_prefetch);
  ACC_CHECK(env_enum("FSDP_BACKWARD_PREFETCH", &f->bwd_prefetch, 1));
  if (f->bwd_prefetch == ACC_UNSET) f->bwd_prefetch = ACC_FSDP_BACKWARD_PRE;

  f->fwd_prefetch = p.forward_prefetch;
  ACC_CHECK(env_bool("FSDP_FORWARD_PREFETCH", &f->fwd_prefetch, 0));
  f->sdt = p.state_dict_type;
  if (f->sdt != ACC_UNSET && (f->sdt < 1 || f->sdt > 3))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_fsdp_create: state_dict_type %d is not an acc_fsdp_state_dict_type",
                      f->sdt);
  ACC_CHECK(env_enum("FSDP_STATE_DICT_TYPE", &f->sdt, 1));
  if (f->sdt == ACC_UNSET) f->sdt = ACC_FSDP_SHARDED_STATE_DICT;
  if (f->sdt == ACC_FSDP_LOCAL_STATE_DICT)
    return acc__error(ACC_ERR_NOT_SUPPORTED,
                      "acc_fsdp_create: state_dict_type LOCAL_STATE_DICT is not supported: SHARDED_STATE_DICT writes "
                      "the same per-process files and resumes on any number of processes");
  f->offload = p.offload_params;
  ACC_CHECK(env_bool("FSDP_OFFLOAD_PARAMS", &f->offload, 0));
  f->wrap = p.auto_wrap_policy;
  if (f->wrap != ACC_UNSET && (f->wrap < 0 || f->wrap > 2))
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_fsdp_create: auto_wrap_policy %d is not an acc_fsdp_auto_wrap_policy",
                      f->wrap);
  ACC_CHECK(env_enum("FSDP_AUTO_WRAP_POLICY", &f->wrap, 0));
  if (f->wrap == ACC_UNSET) f->wrap = ACC_FSDP_NO_WRAP;
  f->min_params = p.min_num_params;
  if (f->min_params == ACC_UNSET) {
    long v = 0;
    int set = 0;
    ACC_CHECK(acc__env_int("FSDP_MIN_NUM_PARAMS", &v, &set));
    f->min_params = set ? (int64_t)v : 100000000;
  } else if (f->min_params < 1) {
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_fsdp_create: min_num_params %lld must be >= 1",
                      (long long)f->min_params);
  }
  f->sync_states = p.sync_module_states;
  ACC_CHECK(env_bool("FSDP_SYNC_MODULE_STATES", &f->sync_states, 1));
  return ACC_OK;
}

acc_result acc_fsdp_plugin_init(acc_fsdp_plugin *p, uint32_t version) {
  if (!p) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_fsdp_plugin_init: p is NULL");
  if (version == 0 || version > ACC_FSDP_PLUGIN_VERSION)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "acc_fsdp_plugin_init: version %u is unknown (this library knows 1 to %u): the program was "
                      "built against a newer header; upgrade the library", version, ACC_FSDP_PLUGIN_VERSION);
  const acc_fsdp_plugin d = ACC_FSDP_PLUGIN_INIT;
  *p = d;
  return ACC_OK;
}

/* ---- create / units ------------------------------------------------------------------------ */

/* The accelerator's comm hook: f->compress for fp16 / bf16 (fsdp_unit.c compresses the gradient
 * reductions, docs/fsdp.md "Comm hooks"); PowerSGD refused with a sentence. */
static acc_result comm_hook(acc_fsdp *f, int hook) {
  f->compress = ACC_F32;
  if (hook == ACC_COMM_HOOK_FP16 || hook == ACC_COMM_HOOK_BF16) {
    f->compress = hook == ACC_COMM_HOOK_FP16 ? ACC_F16 : ACC_BF16;
    return ACC_OK;
  }
  if (hook != ACC_COMM_HOOK_POWERSGD) return ACC_OK;
  /* PyTorch FSDP refuses PowerSGD under the sharded strategies (a reduce-scatter has no low-rank
   * form); under NO_SHARD it is refused here too: FSDP's gradients are one flat buffer per unit,
   * not the matrices PowerSGD factors */
  return acc__error(ACC_ERR_NOT_SUPPORTED,
                    "acc_fsdp_create: comm_hook power_sgd (ACCELERATE_COMM_HOOK) does not apply to FSDP (strategy "
                    "%s): a sharded strategy reduce-scatters its gradients, which PowerSGD cannot compress, and "
                    "FSDP's units are flat buffers, not matrices; use comm_hook fp16 or bf16, or no hook "
                    "(docs/fsdp.md, \"Comm hooks\")",
                    strategy_names[f->strategy]);
}

acc_result acc_fsdp_create(acc_accelerator *acc, const acc_param_spec *table, size_t count, acc_dtype dtype,
                           const acc_fsdp_plugin *plugin, acc_fsdp **out) {
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_fsdp_create: out is NULL");
  *out = NULL;
  ACC_CHECK(acc__check_handle(acc, ACC__HANDLE_ACCELERATOR, "acc_fsdp_create"));
  if (!table || !count) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_fsdp_create: the table is empty");
  if (dtype != ACC_F32 && dtype != ACC_BF16 && dtype != ACC_F16)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "acc_fsdp_create: dtype %s is not a parameter dtype: choose ACC_F32, or ACC_BF16 / ACC_F16 for "
                      "16-bit gathered parameters over float32 master shards (docs/fsdp.md)", acc_dtype_name(dtype));
  if (acc->zero)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "acc_fsdp_create: the accelerator runs ZeRO stage %d; FSDP shards by itself (leave zero_stage 0)",
                      acc->zero);
  acc_fsdp *f = acc__calloc(1, sizeof *f);
  if (!f) return ACC_ERR_NOMEM;
  f->magic = ACC__FSDP_MAGIC;
  f->st = acc->st;
  f->rank = acc_state_process_index(acc->st);
  f->world = acc_state_num_processes(acc->st);
  f->dtype = dtype;
  f->acc = acc;
  acc_result rc = resolve_plugin(f, plugin);
  /* on a device the shards and unit buffers are its memory (fsdp_mem.c) */
  if (acc__devctx_offhost(acc->dev)) f->dev = acc->dev;
  if (rc == ACC_OK) rc = comm_hook(f, acc->comm_hook);
  /* offload_params on a device: the shards, their gradients, the optimizer's state and the no_sync
   * buffers in host memory, the unit buffers in the device's (fsdp_mem.h, the shards' side); on the
   * CPU the shards are host memory already */
  if (rc == ACC_OK) rc = shard_groups(f);
  if (rc == ACC_OK) {
    f->rows = acc__calloc(count, sizeof *f->rows);
    f->row_numel = acc__calloc(count, sizeof *f->row_numel);
    f->row_off = acc__calloc(count, sizeof *f->row_off);
    if (!f->rows || !f->row_numel || !f->row_off) rc = ACC_ERR_NOMEM;
  }
  for (size_t r = 0; r < count && rc == ACC_OK; r++) {
    rc = acc__spec_numel(&table[r], r, "acc_fsdp_create", &f->row_numel[r]);
    for (size_t q = 0; q < r && rc == ACC_OK; q++)
      if (strcmp(table[q].name, table[r].name) == 0)
        rc = acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_fsdp_create: parameter '%s' appears twice (rows %zu, %zu)",
                        table[r].name, q, r);
    if (rc != ACC_OK) break;
    f->rows[r] = table[r];
    f->rows[r].name = acc__strdup(table[r].name);
    if (!f->rows[r].name) rc = ACC_ERR_NOMEM;
    f->row_off[r] = f->total;
    f->total += f->row_numel[r];
    f->nrows = r + 1;
  }
  if (rc != ACC_OK) {
    acc_fsdp_destroy(f);
    return rc;
  }
  *out = f;
  return ACC_OK;
}

static acc_result push_unit(acc_fsdp *f, const char *name, size_t first, size_t n) {
  if (f->nunits == f->cap_units) {
    size_t cap = f->cap_units ? 2 * f->cap_units : 8;
    acc__fsdp_unit *u = acc__realloc(f->units, cap * sizeof *u);
    if (!u) return ACC_ERR_NOMEM;
    f->units = u;
    f->cap_units = cap;
  }
  acc__fsdp_unit *u = &f->units[f->nunits];
  memset(u, 0, sizeof *u);
  u->name = acc__strdup(name);
  if (!u->name) return ACC_ERR_NOMEM;
  u->first_row = first;
  u->num_rows = n;
  f->nunits++;
  return ACC_OK;
}

acc_result acc_fsdp_add_unit(acc_fsdp *f, const char *name, size_t first_row, size_t num_rows, size_t *index) {
  ACC_CHECK(acc__fsdp_check(f, "acc_fsdp_add_unit"));
  if (f->prepared)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_fsdp_add_unit: unit '%s' declared after acc_fsdp_prepare",
                      name ? name : "(null)");
  if (!name || !*name) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_fsdp_add_unit: the unit has no name");
  if (num_rows == 0 || first_row >= f->nrows || num_rows > f->nrows - first_row)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "acc_fsdp_add_unit: unit '%s' = rows [%zu, %zu) is outside the table (%zu rows) or empty", name,
                      first_row, first_row + num_rows, f->nrows);
  for (size_t k = 0; k < f->nunits; k++)
    if (strcmp(f->units[k].name, name) == 0)
      return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_fsdp_add_unit: unit '%s' is declared twice", name);
  if (index) *index = f->nunits;
  return push_unit(f, name, first_row, num_rows);
}

/* Units for a program that declares none: the whole table, or rows grouped by size. */
static acc_result auto_wrap(acc_fsdp *f) {
  if (f->wrap == ACC_FSDP_TRANSFORMER_BASED_WRAP)
    return acc__error(ACC_ERR_NOT_SUPPORTED,
                      "acc_fsdp_prepare: auto_wrap_policy TRANSFORMER_BASED_WRAP needs layer classes a C table does "
                      "not have: declare the units with acc_fsdp_add_unit (one per block)");
  if (f->wrap == ACC_FSDP_NO_WRAP) return push_unit(f, "model", 0, f->nrows);
  size_t start = 0, acc = 0;
  char name[32];
  for (size_t r = 0; r < f->nrows; r++) {
    acc += f->row_numel[r];
    if (acc >= (uint64_t)f->min_params || r + 1 == f->nrows) {
      snprintf(name, sizeof name, "unit%zu", f->nunits);
      ACC_CHECK(push_unit(f, name, start, r + 1 - start));
      start = r + 1;
      acc = 0;
    }
  }
  return ACC_OK;
}

/* The declared units partition the rows: no overlap, nothing left out. Units are kept in
 * declaration order; the check walks them sorted by first row. */
static acc_result check_partition(acc_fsdp *f) {
  size_t *owner = acc__malloc(f->nrows * sizeof *owner);
  if (!owner) return ACC_ERR_NOMEM;
  for (size_t r = 0; r < f->nrows; r++) owner[r] = SIZE_MAX;
  acc_result rc = ACC_OK;
  for (size_t k = 0; k < f->nunits && rc == ACC_OK; k++)
    for (size_t r = f->units[k].first_row; r < f->units[k].first_row + f->units[k].num_rows; r++) {
      if (owner[r] != SIZE_MAX) {
        rc = acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "acc_fsdp_prepare: units '%s' and '%s' overlap: both hold parameter '%s' (row %zu); a "
                        "parameter belongs to exactly one unit (tied weights: put both uses in one unit)",
                        f->units[owner[r]].name, f->units[k].name, f->rows[r].name, r);
        break;
      }
      owner[r] = k;
    }
  for (size_t r = 0; r < f->nrows && rc == ACC_OK; r++)
    if (owner[r] == SIZE_MAX)
      rc = acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "acc_fsdp_prepare: parameter '%s' (row %zu) is in no unit: the units must cover every row "
                      "of the table (declare a unit for it)", f->rows[r].name, r);
  acc__free(owner);
  return rc;
}

/* One line per unit, compared across processes: the first unit that differs is named. */
typedef struct unit_desc {
  uint64_t first, rows, numel, name_hash;
} unit_desc;

static uint64_t fnv(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static acc_result agree_units(acc_fsdp *f) {
  if (f->world == 1) return ACC_OK;
  uint64_t mine[2] = {f->nunits, f->total};
  uint64_t *all = acc__malloc((size_t)f->world * sizeof mine);
  if (!all) return ACC_ERR_NOMEM;
  acc__comm_origin(ACC__ORIGIN_FSDP, acc__fsdp_origin(0, 4));
  acc_result rc = acc_all_gather(f->st, mine, all, 2, ACC_I64);
  for (int r = 0; r < f->world && rc == ACC_OK; r++)
    if (all[2 * r] != mine[0] || all[2 * r + 1] != mine[1])
      rc = acc__error(ACC_ERR_MISMATCH,
                      "acc_fsdp_prepare: process %d has %llu units over a table of %llu elements, process %d has "
                      "%llu over %llu: every process must declare the same table and units",
                      r, (unsigned long long)all[2 * r], (unsigned long long)all[2 * r + 1], f->rank,
                      (unsigned long long)mine[0], (unsigned long long)mine[1]);
  acc__free(all);
  if (rc != ACC_OK) return rc;
  size_t n = f->nunits;
  unit_desc *d = acc__malloc(n * sizeof *d), *alld = acc__malloc(n * (size_t)f->world * sizeof *d);
  if (!d || !alld) rc = ACC_ERR_NOMEM;
  for (size_t k = 0; k < n && rc == ACC_OK; k++) {
    const acc__fsdp_unit *u = &f->units[k];
    uint64_t h = fnv(u->name);
    for (size_t r = u->first_row; r < u->first_row + u->num_rows; r++) h = h * 31 + fnv(f->rows[r].name);
    d[k] = (unit_desc){u->first_row, u->num_rows, u->numel, h};
  }
  if (rc == ACC_OK) {
    acc__comm_origin(ACC__ORIGIN_FSDP, acc__fsdp_origin(0, 4));
    rc = acc_all_gather(f->st, d, alld, n * 4, ACC_I64);
  }
  for (int r = 0; r < f->world && rc == ACC_OK; r++)
    for (size_t k = 0; k < n; k++) {
      const unit_desc *o = &alld[(size_t)r * n + k];
      if (memcmp(o, &d[k], sizeof *o) == 0) continue;
      rc = acc__error(ACC_ERR_MISMATCH,
                      "acc_fsdp_prepare: unit %zu ('%s' here: rows [%llu, %llu), %llu elements) differs on process %d "
                      "(rows [%llu, %llu), %llu elements%s): every process must declare the same units in the same "
                      "order", k, f->units[k].name, (unsigned long long)d[k].first,
                      (unsigned long long)(d[k].first + d[k].rows), (unsigned long long)d[k].numel, r,
                      (unsigned long long)o->first, (unsigned long long)(o->first + o->rows),
                      (unsigned long long)o->numel, o->name_hash != d[k].name_hash ? ", other names" : "");
      break;
    }
  acc__free(d);
  acc__free(alld);
  return rc;
}

acc_result acc_fsdp_prepare(acc_fsdp *f, const float *init_params) {
  ACC_CHECK(acc__fsdp_check(f, "acc_fsdp_prepare"));
  if (f->prepared) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_fsdp_prepare: already prepared");
  if (!init_params && !(f->sync_states && f->rank != 0))
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "acc_fsdp_prepare: init_params is NULL on process %d (only processes other than 0 may pass NULL, "
                      "and only with sync_module_states)", f->rank);
  size_t declared = f->nunits;
  if (!declared) ACC_CHECK(auto_wrap(f));
  acc_result rc = check_partition(f);
  /* layout: units keep their declaration order; each unit's elements are its rows' */
  f->shard_total = 0;
  f->buf_elems = 0;
  for (size_t k = 0; k < f->nunits && rc == ACC_OK; k++) {
    acc__fsdp_unit *u = &f->units[k];
    u->off = f->row_off[u->first_row];
    u->numel = 0;
    for (size_t r = u->first_row; r < u->first_row + u->num_rows; r++) u->numel += f->row_numel[r];
    u->shard = f->sharded ? (u->numel + (size_t)f->sworld - 1) / (size_t)f->sworld : u->numel;
    u->lo = f->sharded ? u->shard * (size_t)f->srank : 0;
    if (u->lo > u->numel) u->lo = u->numel;
    u->hi = u->lo + u->shard < u->numel ? u->lo + u->shard : u->numel;
    u->shard_at = f->shard_total;
    f->shard_total += u->shard;
    size_t padded = f->sharded ? u->shard * (size_t)f->sworld : u->numel;
    if (padded > f->buf_elems) f->buf_elems = padded;
  }
  if (rc == ACC_OK) rc = agree_units(f);
  if (rc == ACC_OK && !f->dcomm) rc = acc__fsdp_coll_setup(f); /* NCCL on a device (fsdp_coll.c) */
  if (rc == ACC_OK) rc = acc__fsdp_shard_alloc(f, f->shard_total, &f->master);
  if (rc == ACC_OK) rc = acc__fsdp_shard_alloc(f, f->shard_total, &f->gshard);
  if (rc == ACC_OK) rc = acc_model_create(&f->model);
  for (size_t k = 0; k < f->nunits && rc == ACC_OK; k++) {
    acc__fsdp_unit *u = &f->units[k];
    if (init_params && u->hi > u->lo)
      rc = acc__fsdp_shard_in(f, f->master + u->shard_at, init_params + u->off + u->lo, u->hi - u->lo);
    if (rc != ACC_OK) break;
    char name[512];
    snprintf(name, sizeof name, "%s.flat_param_shard", u->name);
    int64_t shape[1] = {(int64_t)u->shard};
    rc = acc_model_add_parameter(f->model, name, f->master + u->shard_at, f->gshard + u->shard_at, 1, shape);
  }
  /* sync_module_states: process 0's values everywhere, shard by shard (process 0 holds them all
   * only in its init_params: a broadcast of each unit, then every process keeps its range) */
  if (rc == ACC_OK && f->sync_states && f->world > 1) {
    float *tmp = acc__malloc((f->buf_elems ? f->buf_elems : 1) * sizeof(float));
    if (!tmp) rc = ACC_ERR_NOMEM;
    for (size_t k = 0; k < f->nunits && rc == ACC_OK; k++) {
      acc__fsdp_unit *u = &f->units[k];
      /* host tmp: init_params may be host or device memory */
      if (f->rank == 0) rc = acc__fsdp_mem_out(f, tmp, init_params + u->off, u->numel);
      acc__comm_origin(ACC__ORIGIN_FSDP, acc__fsdp_origin(k, 4));
      if (rc == ACC_OK) rc = acc_broadcast(f->st, tmp, u->numel, ACC_F32, 0);
      if (rc == ACC_OK && u->hi > u->lo) rc = acc__fsdp_shard_in(f, f->master + u->shard_at, tmp + u->lo, u->hi - u->lo);
    }
    acc__free(tmp);
  }
  if (rc != ACC_OK) {
    acc_model_destroy(f->model);
    f->model = NULL;
    acc__fsdp_shard_free(f, f->master);
    acc__fsdp_shard_free(f, f->gshard);
    f->master = f->gshard = NULL;
    if (!declared) {
      for (size_t k = 0; k < f->nunits; k++) acc__free(f->units[k].name);
      f->nunits = 0;
    }
    return rc;
  }
  acc__fsdp_optim_install(f);
  f->prepared = 1;
  return ACC_OK;
}

/* ---- accessors ------------------------------------------------------------------------------ */

size_t acc_fsdp_num_units(const acc_fsdp *f) { return acc__fsdp_check(f, "acc_fsdp_num_units") == ACC_OK ? f->nunits : 0; }

acc_result acc_fsdp_unit_info(const acc_fsdp *f, size_t unit, const char **name, size_t *first_row, size_t *num_rows,
                              size_t *numel) {
  ACC_CHECK(acc__fsdp_check(f, "acc_fsdp_unit_info"));
  if (unit >= f->nunits)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_fsdp_unit_info: unit %zu is out of range (%zu units)", unit,
                      f->nunits);
  const acc__fsdp_unit *u = &f->units[unit];
  if (name) *name = u->name;
  if (first_row) *first_row = u->first_row;
  if (num_rows) *num_rows = u->num_rows;
  if (numel) {
    size_t n = 0;
    for (size_t r = u->first_row; r < u->first_row + u->num_rows; r++) n += f->row_numel[r];
    *numel = n;
  }
  return ACC_OK;
}

acc_result acc_fsdp_row_location(const acc_fsdp *f, size_t row, size_t *unit, size_t *offset) {
  ACC_CHECK(acc__fsdp_check_ready(f, "acc_fsdp_row_location"));
  if (row >= f->nrows)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_fsdp_row_location: row %zu is out of range (%zu rows)", row,
                      f->nrows);
  for (size_t k = 0; k < f->nunits; k++) {
    const acc__fsdp_unit *u = &f->units[k];
    if (row < u->first_row || row >= u->first_row + u->num_rows) continue;
    if (unit) *unit = k;
    if (offset) *offset = f->row_off[row] - u->off;
    return ACC_OK;
  }
  return acc__error(ACC_ERR_INTERNAL, "acc_fsdp_row_location: row %zu is in no unit", row);
}

acc_result acc_fsdp_shard_range(const acc_fsdp *f, size_t unit, size_t *lo, size_t *hi) {
  ACC_CHECK(acc__fsdp_check_ready(f, "acc_fsdp_shard_range"));
  if (unit >= f->nunits)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_fsdp_shard_range: unit %zu is out of range (%zu units)", unit,
                      f->nunits);
  if (lo) *lo = f->units[unit].lo;
  if (hi) *hi = f->units[unit].hi;
  return ACC_OK;
}

acc_fsdp_sharding_strategy acc_fsdp_strategy(const acc_fsdp *f) {
  return acc__fsdp_check(f, "acc_fsdp_strategy") == ACC_OK ? (acc_fsdp_sharding_strategy)f->strategy
                                                            : ACC_FSDP_NO_SHARD;
}

acc_fsdp_state_dict_type acc_fsdp_get_state_dict_type(const acc_fsdp *f) {
  return acc__fsdp_check(f, "acc_fsdp_get_state_dict_type") == ACC_OK ? (acc_fsdp_state_dict_type)f->sdt
                                                                      : ACC_FSDP_SHARDED_STATE_DICT;
}

acc_model *acc_fsdp_model(acc_fsdp *f) {
  return acc__fsdp_check_ready(f, "acc_fsdp_model") == ACC_OK ? f->model : NULL;
}

acc_result acc_fsdp_memory_stats(const acc_fsdp *f, acc_fsdp_memory *out) {
  ACC_CHECK(acc__fsdp_check_ready(f, "acc_fsdp_memory_stats"));
  if (!out) return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_fsdp_memory_stats: out is NULL");
  memset(out, 0, sizeof *out);
  out->shard_params = f->shard_total * sizeof(float);
  out->shard_grads = f->shard_total * sizeof(float);
  out->unit_buffer_bytes = f->buf_elems * sizeof(float);
  out->pool_buffers = f->npool;
  out->pool_peak_in_use = f->pool_peak;
  out->pool_bytes = f->pool_elems * sizeof(float);
  out->pool_peak_bytes = f->pool_elems_peak * sizeof(float);
  out->no_sync_bytes = f->nosync_bytes;
  out->total_params = f->total;
  return ACC_OK;
}

void acc__fsdp_pool_free(acc_fsdp *f) {
  (void)acc__fsdp_settle(f); /* no gather still writes a buffer freed here */
  for (size_t i = 0; i < f->npool; i++) acc__fsdp_mem_free(f, f->pool[i].p);
  acc__free(f->pool);
  f->pool = NULL;
  f->npool = f->pool_in_use = 0;
  f->pool_elems = f->pool_elems_in_use = 0;
  for (size_t k = 0; k < f->nunits; k++) {
    f->units[k].pbuf = f->units[k].gbuf = NULL;
    f->units[k].prefetched = 0;
    f->units[k].phase = ACC__FSDP_IDLE;
  }
}

void acc_fsdp_destroy(acc_fsdp *f) {
  if (!f || f->magic != ACC__FSDP_MAGIC) return;
  acc__fsdp_pool_free(f);
  for (size_t k = 0; k < f->nunits; k++) {
    acc__free(f->units[k].name);
    acc__fsdp_shard_free(f, f->units[k].nosync);
  }
  acc__free(f->units);
  for (size_t r = 0; r < f->nrows; r++) acc__free((char *)f->rows[r].name);
  acc__free(f->rows);
  acc__free(f->row_numel);
  acc__free(f->row_off);
  acc_model_destroy(f->model);
  acc__fsdp_optim_free(f);
  acc__fsdp_shard_free(f, f->master);
  acc__fsdp_shard_free(f, f->gshard);
  acc__fsdp_coll_free(f);
  acc__fsdp_mem_release(f);
  f->magic = 0;
  acc__free(f);
}
