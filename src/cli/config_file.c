/* The Accelerate config file: search path, YAML/JSON loading with libyaml, and writing in the
 * formatting of Python Accelerate (PyYAML safe_dump with sorted keys, or json.dump indent 2). */
#include "cli/config_file.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <yaml.h>

#include "core/fs.h"
#include "core/env.h"
#include "core/internal.h"

typedef struct key_def {
  const char *name;
  const char *parent; /* NULL: top level; else the nested mapping that holds it */
  acc_cli_kind kind;
  size_t offset;
} key_def;

#define K(name, parent, kind) {#name, parent, kind, offsetof(acc_cli_cfg, name)}
/* Sorted by the key that is written at top level (nested keys under their parent). */
static const key_def k_keys[] = {
    K(comm_hook, NULL, ACC_CLI_STR),
    K(compute_environment, NULL, ACC_CLI_STR),
    K(debug, NULL, ACC_CLI_BOOL),
    K(distributed_type, NULL, ACC_CLI_STR),
    K(downcast_bf16, NULL, ACC_CLI_STR_OR_BOOL),
    K(dynamo_backend, "dynamo_config", ACC_CLI_STR),
    K(dynamo_mode, "dynamo_config", ACC_CLI_STR),
    K(dynamo_use_dynamic, "dynamo_config", ACC_CLI_BOOL),
    K(dynamo_use_fullgraph, "dynamo_config", ACC_CLI_BOOL),
    K(dynamo_use_regional_compilation, "dynamo_config", ACC_CLI_BOOL),
    K(enable_cpu_affinity, NULL, ACC_CLI_BOOL),
    K(fsdp_activation_checkpointing, "fsdp_config", ACC_CLI_STR),
    K(fsdp_auto_wrap_policy, "fsdp_config", ACC_CLI_STR),
    K(fsdp_backward_prefetch, "fsdp_config", ACC_CLI_STR),
    K(fsdp_cpu_ram_efficient_loading, "fsdp_config", ACC_CLI_STR),
    K(fsdp_forward_prefetch, "fsdp_config", ACC_CLI_STR),
    K(fsdp_min_num_params, "fsdp_config", ACC_CLI_STR),
    K(fsdp_offload_params, "fsdp_config", ACC_CLI_STR),
    K(fsdp_reshard_after_forward, "fsdp_config", ACC_CLI_STR),
    K(fsdp_sharding_strategy, "fsdp_config", ACC_CLI_STR),
    K(fsdp_state_dict_type, "fsdp_config", ACC_CLI_STR),
    K(fsdp_sync_module_states, "fsdp_config", ACC_CLI_STR),
    K(fsdp_transformer_layer_cls_to_wrap, "fsdp_config", ACC_CLI_STR),
    K(fsdp_use_orig_params, "fsdp_config", ACC_CLI_STR),
    K(fsdp_version, "fsdp_config", ACC_CLI_STR),
    K(gpu_ids, NULL, ACC_CLI_STR),
    K(machine_rank, NULL, ACC_CLI_INT),
    K(main_process_ip, NULL, ACC_CLI_STR),
    K(main_process_port, NULL, ACC_CLI_INT),
    K(main_training_function, NULL, ACC_CLI_STR),
    K(mixed_precision, NULL, ACC_CLI_STR),
    K(mpirun_ccl, "mpirun_config", ACC_CLI_INT),
    K(mpirun_hostfile, "mpirun_config", ACC_CLI_STR),
    K(num_machines, NULL, ACC_CLI_INT),
    K(num_processes, NULL, ACC_CLI_INT),
    K(rdzv_backend, NULL, ACC_CLI_STR),
    K(same_network, NULL, ACC_CLI_BOOL),
    K(tpu_env, NULL, ACC_CLI_LIST),
    K(tpu_name, NULL, ACC_CLI_STR),
    K(tpu_use_cluster, NULL, ACC_CLI_BOOL),
    K(tpu_use_sudo, NULL, ACC_CLI_BOOL),
    K(tpu_zone, NULL, ACC_CLI_STR),
    K(use_cpu, NULL, ACC_CLI_BOOL),
    K(zero_stage, NULL, ACC_CLI_INT),
};
#define N_KEYS (sizeof k_keys / sizeof *k_keys)

/* Keys of Accelerate's schema that do not apply to accelerate-c: accepted; a non-empty value
 * is reported once as ignored. */
static const char *const k_ignored[] = {"fp8_config", "deepspeed_config",
                                        "parallelism_config", "megatron_lm_config", "command_file",
                                        "commands", "tpu_vm", NULL};

static acc_cli_value *field(acc_cli_cfg *cfg, const key_def *k) {
  return (acc_cli_value *)((char *)cfg + k->offset);
}
static const acc_cli_value *cfield(const acc_cli_cfg *cfg, const key_def *k) {
  return (const acc_cli_value *)((const char *)cfg + k->offset);
}

void acc_cli_config_init(acc_cli_cfg *cfg) { memset(cfg, 0, sizeof *cfg); }

/* ---- location ---------------------------------------------------------------------------- */
acc_result acc_cli_config_dir(char *buf, size_t len) {
  const char *hf = acc__env_str("HF_HOME"), *xdg = acc__env_str("XDG_CACHE_HOME");
  const char *home = acc__env_str("HOME");
  /* A leading "~" or "~/" is the home directory, as Accelerate's os.path.expanduser does (a
   * quoted "~/x" in an environment file is not expanded by the shell). */
  const char *base = hf && *hf ? hf : xdg && *xdg ? xdg : NULL;
  const char *tilde = base && base[0] == '~' && (base[1] == '/' || !base[1]) && home && *home ? home : "";
  if (*tilde) base++;
  int n;
  if (hf && *hf) n = snprintf(buf, len, "%s%s/accelerate", tilde, base);
  else if (xdg && *xdg) n = snprintf(buf, len, "%s%s/huggingface/accelerate", tilde, base);
  else if (home && *home) n = snprintf(buf, len, "%s/.cache/huggingface/accelerate", home);
  else
    return acc__error(ACC_ERR_INVALID_USAGE, "cannot locate the config directory: none of HF_HOME, "
                      "XDG_CACHE_HOME and HOME is set; pass --config_file PATH");
  if (n < 0 || (size_t)n >= len)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "the config directory path is longer than %zu bytes", len);
  return ACC_OK;
}

acc_result acc_cli_config_default_path(char *buf, size_t len) {
  char dir[4096];
  ACC_CHECK(acc_cli_config_dir(dir, sizeof dir));
  int n = snprintf(buf, len, "%s/default_config.yaml", dir);
  if (n < 0 || (size_t)n >= len)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "the config file path is longer than %zu bytes", len);
  return ACC_OK;
}

acc_result acc_cli_config_find(const char *explicit_path, char *buf, size_t len, int *found) {
  struct stat sb;
  *found = 0;
  if (explicit_path) {
    if (strlen(explicit_path) >= len)
      return acc__error(ACC_ERR_INVALID_ARGUMENT, "config file path too long: %s", explicit_path);
    strcpy(buf, explicit_path);
    if (stat(buf, &sb) != 0)
      return acc__error(ACC_ERR_IO, "the config file %s cannot be read: %s", buf, strerror(errno));
    *found = 1;
    return ACC_OK;
  }
  ACC_CHECK(acc_cli_config_default_path(buf, len));
  *found = stat(buf, &sb) == 0;
  size_t l = strlen(buf);
  if (!*found && l > 5 && l + 1 <= len) { /* Accelerate's fallback: a legacy default_config.json */
    strcpy(buf + l - 5, ".json");
    *found = stat(buf, &sb) == 0;
    if (!*found) strcpy(buf + l - 5, ".yaml");
  }
  return ACC_OK;
}

acc_result acc_cli_mkdirs(const char *dir) {
  char tmp[4096];
  if (strlen(dir) >= sizeof tmp) return acc__error(ACC_ERR_INVALID_ARGUMENT, "path too long: %s", dir);
  strcpy(tmp, dir);
  for (char *p = tmp + 1;; p++) {
    if (*p == '/' || *p == '\0') {
      char c = *p;
      *p = '\0';
      if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
        return acc__error(ACC_ERR_IO, "cannot create the directory %s: %s", tmp, strerror(errno));
      *p = c;
      if (c == '\0') break;
    }
  }
  return ACC_OK;
}

/* ---- loading ----------------------------------------------------------------------------- */
static int is_null(const char *s) {
  return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL");
}

static int parse_yaml_bool(const char *s, long *out) {
  static const char *const t[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON", NULL};
  static const char *const f[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF", NULL};
  for (int i = 0; t[i]; i++)
    if (!strcmp(s, t[i])) return *out = 1, 1;
  for (int i = 0; f[i]; i++)
    if (!strcmp(s, f[i])) return *out = 0, 1;
  return 0;
}

static int parse_int(const char *s, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (!*s || *end || errno || isspace((unsigned char)*s)) return 0;
  *out = v;
  return 1;
}

typedef struct loader {
  acc_cli_cfg *cfg;
  yaml_document_t *doc;
  const char *name;
} loader;

static acc_result type_error(loader *L, yaml_node_t *n, const char *key, const char *want,
                             const char *got) {
  return acc__error(ACC_ERR_FORMAT, "%s:%zu: key '%s' must be %s, got %s", L->name,
                    n->start_mark.line + 1, key, want, got);
}

static void append_list(char *list, size_t cap, const char *name) {
  size_t n = strlen(list);
  if (n && n + 2 < cap) strcat(list, ", ");
  n = strlen(list);
  if (n + strlen(name) + 1 < cap) strcat(list, name);
}

static acc_result load_value(loader *L, const key_def *k, yaml_node_t *n) {
  acc_cli_value *v = field(L->cfg, k);
  memset(v, 0, sizeof *v);
  if (k->kind == ACC_CLI_LIST) {
    if (n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
        is_null((const char *)n->data.scalar.value))
      return ACC_OK;
    if (n->type != YAML_SEQUENCE_NODE) return type_error(L, n, k->name, "a list of strings", "something else");
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
      yaml_node_t *item = yaml_document_get_node(L->doc, *it);
      if (!item || item->type != YAML_SCALAR_NODE)
        return type_error(L, item ? item : n, k->name, "a list of strings", "a nested list or mapping");
      size_t used = strlen(v->s);
      if (used + item->data.scalar.length + 2 > sizeof v->s)
        return acc__error(ACC_ERR_FORMAT, "%s:%zu: the list '%s' is longer than %zu bytes", L->name,
                          n->start_mark.line + 1, k->name, sizeof v->s);
      if (v->i) strcat(v->s, "\n");
      strcat(v->s, (const char *)item->data.scalar.value);
      v->i++;
    }
    v->set = 1;
    return ACC_OK;
  }
  if (n->type != YAML_SCALAR_NODE)
    return type_error(L, n, k->name,
                      k->kind == ACC_CLI_INT ? "an integer" : k->kind == ACC_CLI_BOOL ? "true or false" : "a string",
                      n->type == YAML_MAPPING_NODE ? "a mapping" : "a list");
  const char *s = (const char *)n->data.scalar.value;
  int plain = n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
  if (plain && is_null(s)) return ACC_OK; /* None: as if absent */
  char shown[80];
  snprintf(shown, sizeof shown, "'%.60s'", s);
  switch (k->kind) {
    case ACC_CLI_INT:
      if (!parse_int(s, &v->i)) return type_error(L, n, k->name, "an integer", shown);
      break;
    case ACC_CLI_BOOL:
      if (!plain || !parse_yaml_bool(s, &v->i)) return type_error(L, n, k->name, "true or false", shown);
      break;
    case ACC_CLI_STR_OR_BOOL:
      if (plain && parse_yaml_bool(s, &v->i)) {
        v->is_bool = 1;
        break;
      }
      /* fall through */
    default:
      if (n->data.scalar.length >= sizeof v->s)
        return acc__error(ACC_ERR_FORMAT, "%s:%zu: the value of '%s' is longer than %zu bytes",
                          L->name, n->start_mark.line + 1, k->name, sizeof v->s - 1);
      memcpy(v->s, s, n->data.scalar.length + 1);
      break;
  }
  v->set = 1;
  return ACC_OK;
}

static const key_def *find_key(const char *parent, const char *name) {
  for (size_t i = 0; i < N_KEYS; i++)
    if (!strcmp(k_keys[i].name, name) &&
        ((!parent && !k_keys[i].parent) || (parent && k_keys[i].parent && !strcmp(parent, k_keys[i].parent))))
      return &k_keys[i];
  return NULL;
}

static int is_nested_parent(const char *name) {
  return !strcmp(name, "dynamo_config") || !strcmp(name, "mpirun_config") || !strcmp(name, "fsdp_config");
}

static int is_empty(yaml_node_t *n) {
  if (n->type == YAML_MAPPING_NODE) return n->data.mapping.pairs.start == n->data.mapping.pairs.top;
  if (n->type == YAML_SEQUENCE_NODE) return n->data.sequence.items.start == n->data.sequence.items.top;
  return n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && is_null((const char *)n->data.scalar.value);
}

static acc_result load_mapping(loader *L, yaml_node_t *map, const char *parent) {
  for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
    yaml_node_t *kn = yaml_document_get_node(L->doc, p->key);
    yaml_node_t *vn = yaml_document_get_node(L->doc, p->value);
    if (!kn || !vn) continue;
    if (kn->type != YAML_SCALAR_NODE)
      return acc__error(ACC_ERR_FORMAT, "%s:%zu: a key must be a plain name", L->name, kn->start_mark.line + 1);
    const char *name = (const char *)kn->data.scalar.value;
    char full[256];
    snprintf(full, sizeof full, "%s%s%s", parent ? parent : "", parent ? "." : "", name);
    const key_def *k = find_key(parent, name);
    if (k) {
      ACC_CHECK(load_value(L, k, vn));
      continue;
    }
    if (!parent && is_nested_parent(name)) {
      if (vn->type == YAML_MAPPING_NODE) {
        ACC_CHECK(load_mapping(L, vn, name));
      } else if (!is_empty(vn)) {
        return type_error(L, vn, name, "a mapping", "a scalar or list");
      }
      continue;
    }
    if (!parent && !strcmp(name, "fp16")) { /* legacy: fp16: true -> mixed_precision fp16 */
      long b = 0;
      if (vn->type != YAML_SCALAR_NODE || !parse_yaml_bool((const char *)vn->data.scalar.value, &b))
        return type_error(L, vn, name, "true or false", "something else");
      if (b && !L->cfg->mixed_precision.set) {
        L->cfg->mixed_precision.set = 2; /* 2: from the legacy key, a real key wins */
        strcpy(L->cfg->mixed_precision.s, "fp16");
      }
      continue;
    }
    if (!parent && !strcmp(name, "dynamo_backend")) { /* legacy top-level dynamo_backend */
      ACC_CHECK(load_value(L, find_key("dynamo_config", "dynamo_backend"), vn));
      if (!strcasecmp(L->cfg->dynamo_backend.s, "no")) L->cfg->dynamo_backend.set = 0;
      continue;
    }
    int known = 0;
    for (int i = 0; !parent && k_ignored[i]; i++)
      if (!strcmp(k_ignored[i], name)) known = 1;
    if (parent && !strcmp(parent, "dynamo_config")) known = 1; /* future dynamo options */
    if (known) {
      if (!is_empty(vn)) append_list(L->cfg->ignored, sizeof L->cfg->ignored, full);
      continue;
    }
    append_list(L->cfg->unknown, sizeof L->cfg->unknown, full);
  }
  return ACC_OK;
}

/* The line of key (inside the mapping parent when not NULL) in the document; 1 when not found. */
static const char *node_line_key(loader *L, const char *parent, const char *key, size_t *line) {
  yaml_node_t *map = yaml_document_get_root_node(L->doc);
  *line = 1;
  for (int level = parent ? 0 : 1; level < 2 && map && map->type == YAML_MAPPING_NODE; level++) {
    const char *want = level == 0 ? parent : key;
    yaml_node_t *next = NULL;
    yaml_node_pair_t *end = map->data.mapping.pairs.top;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < end; p++) {
      yaml_node_t *kn = yaml_document_get_node(L->doc, p->key);
      if (kn && kn->type == YAML_SCALAR_NODE &&
          !strcmp((const char *)kn->data.scalar.value, want)) {
        *line = kn->start_mark.line + 1;
        next = yaml_document_get_node(L->doc, p->value);
      }
    }
    map = next;
  }
  return key;
}

/* Accelerate's load-time rules and the values accelerate-c can run. */
static acc_result finish(loader *L) {
  acc_cli_cfg *c = L->cfg;
  size_t line;
  if (!c->compute_environment.set) {
    c->compute_environment.set = 1;
    strcpy(c->compute_environment.s, "LOCAL_MACHINE");
  } else if (strcmp(c->compute_environment.s, "LOCAL_MACHINE") != 0) {
    node_line_key(L, NULL, "compute_environment", &line);
    return acc__error(ACC_ERR_FORMAT, "%s:%zu: key 'compute_environment' is '%s'; accelerate-c only "
                      "runs on LOCAL_MACHINE (Amazon SageMaker is not supported)",
                      L->name, line, c->compute_environment.s);
  }
  if (!c->distributed_type.set)
    return acc__error(ACC_ERR_FORMAT, "%s: A `distributed_type` must be specified in the config file "
                      "(NO, MULTI_CPU or MULTI_GPU)", L->name);
  const char *dt = c->distributed_type.s;
  if (strcmp(dt, "NO") && strcmp(dt, "MULTI_CPU") && strcmp(dt, "MULTI_GPU") && strcmp(dt, "FSDP")) {
    node_line_key(L, NULL, "distributed_type", &line);
    return acc__error(ACC_ERR_FORMAT, "%s:%zu: key 'distributed_type' is '%s'; accelerate-c supports "
                      "NO, MULTI_CPU, MULTI_GPU and FSDP", L->name, line, dt);
  }
  if (!strcmp(dt, "NO") && !c->num_processes.set) {
    c->num_processes.set = 1;
    c->num_processes.i = 1;
  }
  if (c->mixed_precision.set) {
    acc_mixed_precision mp;
    if (acc_mixed_precision_parse(c->mixed_precision.s, &mp) != ACC_OK) {
      node_line_key(L, NULL, "mixed_precision", &line);
      return acc__error(ACC_ERR_FORMAT, "%s:%zu: key 'mixed_precision' is '%s'; accelerate-c supports "
                        "no, fp16 and bf16", L->name, line, c->mixed_precision.s);
    }
    c->mixed_precision.set = 1;
  }
  acc_cli_value *defaults_false[] = {&c->use_cpu, &c->debug, &c->enable_cpu_affinity};
  for (int i = 0; i < 3; i++)
    if (!defaults_false[i]->set) defaults_false[i]->set = 1, defaults_false[i]->i = 0;
  /* Ranges of the integer keys, reported here where the file, line and key are known (the
   * launcher's own checks would name a command-line flag the user did not pass). */
  static const struct {
    size_t off;
    const char *parent, *key;
    long lo, hi;
  } ranges[] = {
      {offsetof(acc_cli_cfg, num_processes), NULL, "num_processes", 1, 65536},
      {offsetof(acc_cli_cfg, num_machines), NULL, "num_machines", 1, 65536},
      {offsetof(acc_cli_cfg, machine_rank), NULL, "machine_rank", 0, 65535},
      {offsetof(acc_cli_cfg, main_process_port), NULL, "main_process_port", 0, 65535},
      {offsetof(acc_cli_cfg, mpirun_ccl), "mpirun_config", "mpirun_ccl", 1, 65536},
  };
  for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++) {
    const acc_cli_value *v = (const acc_cli_value *)((const char *)c + ranges[i].off);
    if (!v->set || (v->i >= ranges[i].lo && v->i <= ranges[i].hi)) continue;
    if (v == &c->num_processes && v->i == -1) continue; /* -1: pass --num_processes */
    node_line_key(L, ranges[i].parent, ranges[i].key, &line);
    return acc__error(ACC_ERR_FORMAT, "%s:%zu: key '%s%s%s' must be %ld..%ld%s, got %ld", L->name,
                      line, ranges[i].parent ? ranges[i].parent : "", ranges[i].parent ? "." : "",
                      ranges[i].key, ranges[i].lo, ranges[i].hi,
                      v == &c->num_processes ? " (or -1: pass --num_processes)" : "", v->i);
  }
  if (c->machine_rank.set && c->num_machines.set && c->machine_rank.i >= c->num_machines.i) {
    node_line_key(L, NULL, "machine_rank", &line);
    return acc__error(ACC_ERR_FORMAT, "%s:%zu: key 'machine_rank' is %ld; with num_machines %ld it "
                      "must be 0..%ld", L->name, line, c->machine_rank.i, c->num_machines.i,
                      c->num_machines.i - 1);
  }
  return ACC_OK;
}

/* libyaml's document loader takes time quadratic in the nesting depth. A config file nests two
 * levels (dynamo_config, mpirun_config): walk the events first and stop at the first collection
 * deeper than this, which bounds the work before the document is built. */
#define CONFIG_MAX_DEPTH 64
#define CONFIG_MAX_BYTES ((size_t)1 << 20)

static acc_result check_depth(const char *text, size_t len, const char *name) {
  yaml_parser_t parser;
  yaml_event_t ev;
  if (!yaml_parser_initialize(&parser))
    return acc__error(ACC_ERR_NOMEM, "cannot initialize libyaml");
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
  acc_result rc = ACC_OK;
  int depth = 0;
  for (;;) {
    if (!yaml_parser_parse(&parser, &ev)) break; /* the loader reports syntax errors */
    yaml_event_type_t t = ev.type;
    if (t == YAML_SEQUENCE_START_EVENT || t == YAML_MAPPING_START_EVENT) {
      if (++depth > CONFIG_MAX_DEPTH) {
        rc = acc__error(ACC_ERR_FORMAT,
                        "%s:%zu:%zu: nested more than %d levels deep; a config file needs 2", name,
                        ev.start_mark.line + 1, ev.start_mark.column + 1,
                        CONFIG_MAX_DEPTH);
      }
    } else if (t == YAML_SEQUENCE_END_EVENT || t == YAML_MAPPING_END_EVENT) {
      depth--;
    }
    yaml_event_delete(&ev);
    if (rc != ACC_OK || t == YAML_STREAM_END_EVENT) break;
  }
  yaml_parser_delete(&parser);
  return rc;
}

acc_result acc_cli_config_parse(acc_cli_cfg *cfg, const char *text, size_t len, const char *name,
                                FILE *warn) {
  acc_cli_config_init(cfg);
  if (len > CONFIG_MAX_BYTES)
    return acc__error(ACC_ERR_FORMAT, "%s is larger than %zu bytes: not a config file", name,
                      CONFIG_MAX_BYTES);
  ACC_CHECK(check_depth(text, len, name));
  yaml_parser_t parser;
  yaml_document_t doc;
  if (!yaml_parser_initialize(&parser)) return acc__error(ACC_ERR_NOMEM, "cannot initialize libyaml");
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
  if (!yaml_parser_load(&parser, &doc)) {
    acc_result rc = acc__error(ACC_ERR_FORMAT, "%s:%zu:%zu: malformed YAML: %s%s%s", name,
                               parser.problem_mark.line + 1, parser.problem_mark.column + 1,
                               parser.problem ? parser.problem : "syntax error",
                               parser.context ? " " : "", parser.context ? parser.context : "");
    yaml_parser_delete(&parser);
    return rc;
  }
  yaml_parser_delete(&parser);
  loader L = {cfg, &doc, name};
  yaml_node_t *root = yaml_document_get_root_node(&doc);
  acc_result rc;
  if (!root) {
    rc = acc__error(ACC_ERR_FORMAT, "%s: the config file is empty; run `accelerate config`", name);
  } else if (root->type != YAML_MAPPING_NODE) {
    rc = acc__error(ACC_ERR_FORMAT, "%s:%zu: the config file must be a mapping of keys to values",
                    name, root->start_mark.line + 1);
  } else {
    rc = load_mapping(&L, root, NULL);
    if (rc == ACC_OK) rc = finish(&L);
  }
  yaml_document_delete(&doc);
  if (rc == ACC_OK && warn) {
    if (cfg->unknown[0])
      fprintf(warn, "accelerate: the config file %s has unknown keys (%s); they are ignored.\n", name,
              cfg->unknown);
    if (cfg->ignored[0])
      fprintf(warn, "accelerate: the config file %s sets %s, which accelerate-c does not support; "
              "ignored.\n", name, cfg->ignored);
  }
  return rc;
}

acc_result acc_cli_config_load(acc_cli_cfg *cfg, const char *path) {
  FILE *f = NULL;
  ACC_CHECK(acc__fopen_regular(path, "the config file", &f));
  size_t cap = 4096, len = 0;
  char *buf = acc__malloc(cap);
  size_t got;
  while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
    len += got;
    if (len == cap) {
      if (cap > CONFIG_MAX_BYTES) {
        fclose(f);
        acc__free(buf);
        return acc__error(ACC_ERR_FORMAT, "the config file %s is larger than %zu bytes", path,
                          CONFIG_MAX_BYTES);
      }
      char *nb = acc__realloc(buf, cap * 2);
      if (!nb) acc__free(buf);
      buf = nb;
      cap *= 2;
    }
  }
  int err = ferror(f);
  fclose(f);
  if (!buf) return ACC_ERR_NOMEM;
  if (err) {
    acc__free(buf);
    return acc__error(ACC_ERR_IO, "cannot read the config file %s", path);
  }
  acc_result rc = acc_cli_config_parse(cfg, buf, len, path, stderr);
  acc__free(buf);
  return rc;
}

/* ---- writing ----------------------------------------------------------------------------- */
/* Whether PyYAML would quote this string: it would read back as another type, or starts with an
 * indicator, or contains ": " / " #". */
static int yaml_needs_quotes(const char *s) {
  long dummy;
  if (is_null(s) || parse_yaml_bool(s, &dummy)) return 1;
  if (strchr("-?:,[]{}#&*!|>'\"%@` ", s[0])) {
    if (!(s[0] == '-' && s[1] && s[1] != ' ' && !isdigit((unsigned char)s[1]) && s[1] != '.')) return 1;
  }
  if (strstr(s, ": ") || strstr(s, " #") || s[strlen(s) - 1] == ' ' || s[strlen(s) - 1] == ':') return 1;
  for (const char *p = s; *p; p++)
    if ((unsigned char)*p < 0x20) return 1;
  /* numbers: [-+]?digits (with _ : for YAML 1.1 ints), or one '.' (floats), .inf/.nan */
  const char *p = s;
  if (*p == '+' || *p == '-') p++;
  if (!strcasecmp(p, ".inf") || !strcasecmp(p, ".nan")) return 1;
  int digits = 0, dots = 0, other = 0;
  for (; *p; p++) {
    if (isdigit((unsigned char)*p)) digits++;
    else if (*p == '.') dots++;
    else if (*p != '_' && *p != ':' && *p != 'e' && *p != 'E' && *p != '+' && *p != '-') other++;
  }
  return digits && !other && dots <= 1;
}

static void yaml_str(FILE *out, const char *s) {
  if (!yaml_needs_quotes(s)) {
    fputs(s, out);
    return;
  }
  fputc('\'', out);
  for (; *s; s++) {
    if (*s == '\'') fputc('\'', out);
    fputc(*s, out);
  }
  fputc('\'', out);
}

static void json_str(FILE *out, const char *s) {
  fputc('"', out);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
    else if (c == '\n') fputs("\\n", out);
    else if (c < 0x20) fprintf(out, "\\u%04x", c);
    else fputc(c, out);
  }
  fputc('"', out);
}

/* fsdp_config's values are kept as text, but Accelerate writes its booleans and numbers as YAML
 * booleans and integers (fsdp_offload_params: false, fsdp_version: 1): written the same way. */
static int fsdp_scalar(const key_def *k, const acc_cli_value *v, long *b, int *is_int) {
  if (!k->parent || strcmp(k->parent, "fsdp_config") != 0 || k->kind != ACC_CLI_STR || !v->s[0]) return 0;
  if (!strcasecmp(v->s, "true") || !strcasecmp(v->s, "false")) {
    *b = !strcasecmp(v->s, "true");
    *is_int = 0;
    return 1;
  }
  for (const char *p = v->s; *p; p++)
    if (!isdigit((unsigned char)*p)) return 0;
  *is_int = 1;
  return strlen(v->s) < 19;
}

static void put_value(FILE *out, const key_def *k, const acc_cli_value *v, int json, const char *indent) {
  int is_bool = k->kind == ACC_CLI_BOOL || (k->kind == ACC_CLI_STR_OR_BOOL && v->is_bool);
  long fb = 0;
  int fint = 0;
  if (fsdp_scalar(k, v, &fb, &fint)) {
    if (fint) fputs(v->s, out);
    else fputs(fb ? "true" : "false", out);
    return;
  }
  if (is_bool) {
    fputs(v->i ? "true" : "false", out);
  } else if (k->kind == ACC_CLI_INT) {
    fprintf(out, "%ld", v->i);
  } else if (k->kind == ACC_CLI_LIST) {
    if (v->i == 0) {
      fputs("[]", out);
      return;
    }
    const char *p = v->s;
    if (json) fputs("[", out);
    for (long i = 0; i < v->i; i++) {
      const char *nl = strchr(p, '\n');
      size_t n = nl ? (size_t)(nl - p) : strlen(p);
      char item[sizeof v->s];
      memcpy(item, p, n);
      item[n] = '\0';
      if (json) {
        fprintf(out, "\n%s    ", indent);
        json_str(out, item);
        if (i + 1 < v->i) fputc(',', out);
      } else {
        fprintf(out, "\n%s- ", indent);
        yaml_str(out, item);
      }
      p = nl ? nl + 1 : p + n;
    }
    if (json) fprintf(out, "\n%s  ]", indent);
  } else if (json) {
    json_str(out, v->s);
  } else {
    yaml_str(out, v->s);
  }
}

void acc_cli_config_dump(const acc_cli_cfg *cfg, FILE *out, int json) {
  int first = 1;
  if (json) fputs("{", out);
  for (size_t i = 0; i < N_KEYS;) {
    const key_def *k = &k_keys[i];
    if (!k->parent) {
      if (cfield(cfg, k)->set) {
        if (json) {
          fprintf(out, "%s\n  \"%s\": ", first ? "" : ",", k->name);
          put_value(out, k, cfield(cfg, k), 1, "");
        } else {
          fprintf(out, "%s:%s", k->name, k->kind == ACC_CLI_LIST && cfield(cfg, k)->i ? "" : " ");
          put_value(out, k, cfield(cfg, k), 0, "");
          fputc('\n', out);
        }
        first = 0;
      }
      i++;
      continue;
    }
    /* a nested mapping: written only when one of its keys is set (empty dicts are dropped) */
    const char *parent = k->parent;
    size_t end = i;
    int any = 0;
    while (end < N_KEYS && k_keys[end].parent && !strcmp(k_keys[end].parent, parent)) {
      any |= cfield(cfg, &k_keys[end])->set != 0;
      end++;
    }
    if (any) {
      if (json) fprintf(out, "%s\n  \"%s\": {", first ? "" : ",", parent);
      else fprintf(out, "%s:\n", parent);
      int nfirst = 1;
      for (size_t j = i; j < end; j++) {
        const acc_cli_value *v = cfield(cfg, &k_keys[j]);
        if (!v->set) continue;
        if (json) {
          fprintf(out, "%s\n    \"%s\": ", nfirst ? "" : ",", k_keys[j].name);
          put_value(out, &k_keys[j], v, 1, "  ");
        } else {
          fprintf(out, "  %s: ", k_keys[j].name);
          put_value(out, &k_keys[j], v, 0, "  ");
          fputc('\n', out);
        }
        nfirst = 0;
      }
      if (json) fputs("\n  }", out);
      first = 0;
    }
    i = end;
  }
  if (json) fputs(first ? "}\n" : "\n}\n", out);
}

acc_result acc_cli_config_write(const acc_cli_cfg *cfg, const char *path, int json) {
  char dir[4096];
  if (strlen(path) >= sizeof dir) return acc__error(ACC_ERR_INVALID_ARGUMENT, "path too long: %s", path);
  strcpy(dir, path);
  char *slash = strrchr(dir, '/');
  if (slash && slash != dir) {
    *slash = '\0';
    ACC_CHECK(acc_cli_mkdirs(dir));
  }
  FILE *f = fopen(path, "w");
  if (!f) return acc__error(ACC_ERR_IO, "cannot write the config file %s: %s", path, strerror(errno));
  acc_cli_config_dump(cfg, f, json);
  if (fclose(f) != 0) return acc__error(ACC_ERR_IO, "cannot write the config file %s: %s", path, strerror(errno));
  return ACC_OK;
}

void acc_cli_config_print_env(const acc_cli_cfg *cfg, FILE *out) {
  for (size_t i = 0; i < N_KEYS; i++) {
    const key_def *k = &k_keys[i];
    const acc_cli_value *v = cfield(cfg, k);
    if (!v->set) continue;
    fprintf(out, "\t- %s%s%s: ", k->parent ? k->parent : "", k->parent ? "." : "", k->name);
    if (k->kind == ACC_CLI_LIST) {
      fputc('[', out);
      for (const char *p = v->s; *p; p++) fputs(*p == '\n' ? ", " : (char[]){*p, 0}, out);
      fputs("]\n", out);
      continue;
    }
    if (k->kind == ACC_CLI_BOOL || (k->kind == ACC_CLI_STR_OR_BOOL && v->is_bool)) fputs(v->i ? "True" : "False", out);
    else if (k->kind == ACC_CLI_INT) fprintf(out, "%ld", v->i);
    else fputs(v->s, out);
    fputc('\n', out);
  }
}
