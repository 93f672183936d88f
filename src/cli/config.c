/* `accelerate config`: the questionnaire (Accelerate's cluster flow, reduced to what
 * accelerate-c runs), and `accelerate config default`. Answers are read line by line from stdin,
 * so they can come from a terminal or a pipe; menus are numbered instead of arrow-key driven. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/config_file.h"
#include "device/placement.h"
#include "core/internal.h"

/* Matches --name, --name=value and the dash spelling of name. *value gets the value (next
 * argument or after '='). Returns 1 on a match, -1 when the value is missing. */
int acc_cli_match_opt(int argc, char **argv, int *i, const char *name, const char **value) {
  const char *a = argv[*i];
  if (strncmp(a, "--", 2) != 0) return 0;
  a += 2;
  size_t n = strlen(name);
  for (size_t k = 0; k < n; k++) {
    char c = a[k], want = name[k];
    if (!(c == want || (want == '_' && c == '-'))) return 0;
  }
  if (a[n] == '=') {
    *value = a + n + 1;
    return 1;
  }
  if (a[n] != '\0') return 0;
  if (!value) return 1;
  if (*i + 1 >= argc) return -1;
  *value = argv[++*i];
  return 1;
}

/* ---- prompts ----------------------------------------------------------------------------- */
typedef struct asker {
  FILE *in, *out;
  int eof;
} asker;

/* Reads one answer line (without the newline); returns 0 at end of input. */
static int read_answer(asker *a, char *buf, size_t len) {
  fflush(a->out);
  if (!fgets(buf, (int)len, a->in)) {
    a->eof = 1;
    return 0;
  }
  size_t n = strlen(buf);
  while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ')) buf[--n] = '\0';
  char *p = buf;
  while (*p == ' ' || *p == '\t') p++;
  memmove(buf, p, strlen(p) + 1);
  if (!a->in || a->in != stdin || !isatty(0)) fputc('\n', a->out); /* echo the line end of a pipe */
  return 1;
}

static int ask_yes_no(asker *a, const char *q, int def) {
  char buf[256];
  for (;;) {
    fprintf(a->out, "%s [%s]: ", q, def ? "YES/no" : "yes/NO");
    if (!read_answer(a, buf, sizeof buf)) return -1;
    if (!buf[0]) return def;
    if (!strcasecmp(buf, "yes")) return 1;
    if (!strcasecmp(buf, "no")) return 0;
    fprintf(a->out, "Please enter yes or no.\n");
  }
}

static int ask_int(asker *a, const char *q, long def, long min, long max, long *out) {
  char buf[256];
  for (;;) {
    fprintf(a->out, "%s [%ld]: ", q, def);
    if (!read_answer(a, buf, sizeof buf)) return -1;
    if (!buf[0]) {
      *out = def;
      return 0;
    }
    char *end;
    long v = strtol(buf, &end, 10);
    if (*end == '\0' && v >= min && v <= max) {
      *out = v;
      return 0;
    }
    fprintf(a->out, "Please enter an integer between %ld and %ld.\n", min, max);
  }
}

/* def NULL: an answer is required. */
static int ask_str(asker *a, const char *q, const char *def, char *out, size_t len) {
  for (;;) {
    if (def) fprintf(a->out, "%s [%s]: ", q, def);
    else fprintf(a->out, "%s: ", q);
    if (!read_answer(a, out, len)) return -1;
    if (out[0]) return 0;
    if (def) {
      snprintf(out, len, "%s", def);
      return 0;
    }
    fprintf(a->out, "Please enter a value.\n");
  }
}

static int ask_menu(asker *a, const char *q, const char *const *opts, int n, int def) {
  char buf[256];
  fprintf(a->out, "%s\n", q);
  for (int i = 0; i < n; i++) fprintf(a->out, "  %d) %s\n", i, opts[i]);
  for (;;) {
    fprintf(a->out, "Please select a number [%d]: ", def);
    if (!read_answer(a, buf, sizeof buf)) return -1;
    if (!buf[0]) return def;
    char *end;
    long v = strtol(buf, &end, 10);
    if (*end == '\0' && v >= 0 && v < n) return (int)v;
    for (int i = 0; i < n; i++) /* the option's text is accepted too */
      if (!strcasecmp(buf, opts[i])) return i;
    fprintf(a->out, "Please enter a number between 0 and %d.\n", n - 1);
  }
}

/* The GPUs of this machine (the fake ones under ACCELERATE_TEST_FAKE_GPUS); 0 when none. */
static int machine_gpus(acc__device_probe_info *info) {
  int fake = 0;
  int n = acc__placement_gpus(info, &fake, 0) == ACC_OK ? info->device_count : 0;
  acc_clear_error();
  return n;
}

static void set_str(acc_cli_value *v, const char *s) {
  v->set = 1;
  snprintf(v->s, sizeof v->s, "%s", s);
}
static void set_int(acc_cli_value *v, long i) {
  v->set = 1;
  v->i = i;
}

#define ASK(call) \
  do {            \
    if ((call) < 0) goto eof; \
  } while (0)

/* Accelerate's FSDP questions (docs/fsdp.md), for what a C program can use: the strategy
 * (FSDP1) or reshard_after_forward (FSDP2), offload, the wrap policy for a program that declares
 * no units, prefetch, the state dict type and sync_module_states. What means nothing in C
 * (use_orig_params, RAM-efficient loading, activation checkpointing, layer classes to wrap) is not
 * asked and not written, and LOCAL_STATE_DICT / TRANSFORMER_BASED_WRAP are not offered. The keys are written as Accelerate writes them: FSDP1's strategy name goes into
 * fsdp_reshard_after_forward, which the launcher accepts. */
static int ask_fsdp(asker *a, acc_cli_cfg *c, int gpu) {
  static const char *const versions[] = {"1", "2"};
  static const char *const strategies[] = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD",
                                           "HYBRID_SHARD_ZERO2"};
  static const char *const wraps[] = {"NO_WRAP", "SIZE_BASED_WRAP"};
  static const char *const prefetches[] = {"BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"};
  static const char *const sdts[] = {"FULL_STATE_DICT", "SHARDED_STATE_DICT"};
  int r;
  long v;
  char num[32];
  ASK(r = ask_yes_no(a, "Do you want to use FullyShardedDataParallel?", 0));
  if (!r) return 0;
  if (gpu)
    fprintf(a->out, "Note: accelerate-c's FSDP trains on CPU processes so far; a program on a GPU is refused by "
                    "acc_fsdp_create (docs/fsdp.md).\n");
  set_str(&c->distributed_type, "FSDP");
  ASK(r = ask_menu(a, "What should be your FSDP version?", versions, 2, 0));
  const int v2 = r == 1;
  set_str(&c->fsdp_version, versions[r]);
  if (v2) {
    ASK(r = ask_yes_no(a, "Do you want to enable resharding after forward (FULL_SHARD; no: SHARD_GRAD_OP)?", 1));
    set_str(&c->fsdp_reshard_after_forward, r ? "true" : "false");
  } else {
    ASK(r = ask_menu(a, "What should be your sharding strategy?", strategies, 5, 0));
    set_str(&c->fsdp_reshard_after_forward, strategies[r]);
  }
  ASK(r = ask_yes_no(a, "Do you want to offload parameters and gradients to CPU?", 0));
  set_str(&c->fsdp_offload_params, r ? "true" : "false");
  ASK(r = ask_menu(a, "What should be your auto wrap policy (for a program that declares no units with "
                   "acc_fsdp_add_unit)?", wraps, 2, 0));
  set_str(&c->fsdp_auto_wrap_policy, wraps[r]);
  if (r == 1) {
    ASK(ask_int(a, "What should be your FSDP's minimum number of parameters for Default Auto Wrapping Policy?",
                100000000, 1, 1L << 62, &v));
    snprintf(num, sizeof num, "%ld", v);
    set_str(&c->fsdp_min_num_params, num);
  }
  if (!v2) {
    ASK(r = ask_menu(a, "What should be your FSDP's backward prefetch policy?", prefetches, 3, 0));
    set_str(&c->fsdp_backward_prefetch, prefetches[r]);
  }
  ASK(r = ask_menu(a, "What should be your FSDP's state dict type?", sdts, 2, 1));
  set_str(&c->fsdp_state_dict_type, sdts[r]);
  if (!v2) {
    ASK(r = ask_yes_no(a, "Do you want to enable FSDP's forward prefetch policy?", 0));
    set_str(&c->fsdp_forward_prefetch, r ? "true" : "false");
  }
  ASK(r = ask_yes_no(a, "Do you want each individually wrapped FSDP unit to broadcast module parameters from rank 0 "
                     "at the start?", 1));
  set_str(&c->fsdp_sync_module_states, r ? "true" : "false");
  return 0;
eof:
  return -1;
}

/* The question flow of Accelerate's `accelerate config`, for the types accelerate-c runs. */
static int questionnaire(asker *a, acc_cli_cfg *c) {
  static const char *const envs[] = {"This machine", "AWS (Amazon SageMaker)"};
  static const char *const types[] = {"No distributed training", "multi-CPU", "multi-GPU"};
  static const char *const types_val[] = {"NO", "MULTI_CPU", "MULTI_GPU"};
  static const char *const precisions[] = {"no", "fp16", "bf16"};
  int r;
  long v;
  char buf[1024];
  acc_cli_config_init(c);
  acc__device_probe_info gpus;
  const int ngpus = machine_gpus(&gpus);
  if (ngpus > 0) {
    fprintf(a->out, "This machine has %d GPU(s):\n", ngpus);
    for (int i = 0; i < ngpus && i < ACC__MAX_GPUS; i++)
      fprintf(a->out, "  %d) %s, %.1f GiB, PCI %s\n", i, gpus.gpus[i].name,
              (double)gpus.gpus[i].total_mem / (1024.0 * 1024.0 * 1024.0), gpus.gpus[i].pci_bus_id);
  }
  for (;;) {
    ASK(r = ask_menu(a, "In which compute environment are you running?", envs, 2, 0));
    if (r == 0) break;
    fprintf(a->out, "accelerate-c does not support Amazon SageMaker; please choose 0.\n");
  }
  set_str(&c->compute_environment, "LOCAL_MACHINE");
  ASK(r = ask_menu(a, "Which type of machine are you using?", types, 3, 0));
  set_str(&c->distributed_type, types_val[r]);
  int type = r;
  set_int(&c->num_machines, 1);
  set_int(&c->machine_rank, 0);
  set_int(&c->debug, 0);
  set_int(&c->same_network, 1);
  set_str(&c->rdzv_backend, "static");
  if (type != 0) {
    ASK(ask_int(a, "How many different machines will you use (use more than 1 for multi-node training)?",
                1, 1, 1 << 20, &v));
    set_int(&c->num_machines, v);
    if (v > 1) {
      ASK(ask_int(a, "What is the rank of this machine?", 0, 0, v - 1, &v));
      set_int(&c->machine_rank, v);
      ASK(ask_str(a, "What is the IP address of the machine that will host the main process?", NULL,
                  buf, sizeof buf));
      set_str(&c->main_process_ip, buf);
      ASK(ask_int(a, "What is the port you will use to communicate with the main process?", 29500, 0,
                  65535, &v));
      set_int(&c->main_process_port, v);
      ASK(r = ask_yes_no(a, "Are all the machines on the same local network? Answer `no` if nodes are "
                         "on the cloud and/or on different network hosts", 1));
      set_int(&c->same_network, r);
      /* Asked whatever the network (Accelerate asks it only for `no`): it decides how machines
       * get their ranks (docs/cli.md). Only what launch accepts is written. */
      for (;;) {
        ASK(ask_str(a, "What rendezvous backend will you use? ('static': every machine gives its rank; 'c10d': "
                    "machines without a rank get one in the order they join)", "static", buf, sizeof buf));
        if (!strcmp(buf, "static") || !strcmp(buf, "c10d")) break;
        fprintf(a->out, "Please enter static or c10d (accelerate-c has no other rendezvous backend).\n");
      }
      set_str(&c->rdzv_backend, buf);
    }
    ASK(r = ask_yes_no(a, "Should distributed operations be checked while running for errors? This can "
                       "avoid timeout issues but will be slower.", 0));
    set_int(&c->debug, r);
  }
  int use_cpu = 0;
  if (type == 0) {
    ASK(use_cpu = ask_yes_no(a, "Do you want to run your training on CPU only (even if a GPU / Apple "
                             "Silicon / Ascend NPU device is available)?", 0));
  } else if (type == 1) {
    use_cpu = 1;
    ASK(r = ask_yes_no(a, "Do you want accelerate to launch mpirun?", 0));
    if (r) {
      ASK(ask_str(a, "Please enter the path to the hostfile to use with mpirun", "~/hostfile", buf,
                  sizeof buf));
      set_str(&c->mpirun_hostfile, buf);
    }
  }
  set_int(&c->use_cpu, use_cpu);
  if (type != 0) ASK(ask_fsdp(a, c, type == 2));
  set_int(&c->num_processes, 1);
  if (type != 0) {
    const long machines = c->num_machines.i;
    char q[200];
    snprintf(q, sizeof q, "How many %s should be used for distributed training%s?", type == 2 ? "GPU(s)" : "processes",
             machines > 1 ? " (in total, over all the machines)" : "");
    /* The total over all machines, so a multiple of their number (launch refuses anything else):
     * by default one process per machine, or the GPUs of this machine on each. */
    const long per_machine = type == 2 && ngpus > 1 ? ngpus : 1;
    for (;;) {
      ASK(ask_int(a, q, per_machine * machines, 1, 1 << 20, &v));
      if (v % machines != 0) {
        fprintf(a->out, "The number of processes is the total over the %ld machines and must be a multiple of %ld "
                        "(for example %ld or %ld). Please enter another number.\n", machines, machines, machines,
                        2 * machines);
        continue;
      }
      if (type == 2 && v == 1 && machines == 1) {
        fprintf(a->out, "Specified distributed type MULTI_GPU but only using 1 GPU on a single "
                        "machine. Please select `No distributed training` for the type of machine "
                        "you are using, or use more GPUs.\n");
        continue;
      }
      break;
    }
    set_int(&c->num_processes, v);
  }
  if ((type == 0 || type == 2) && !use_cpu) {
    for (;;) {
      ASK(ask_str(a, "What GPU(s) (by id) should be used for training on this machine as a "
                  "comma-separated list?", "all", buf, sizeof buf));
      int nids = 0;
      if (acc__placement_check_gpu_ids(buf, ngpus, &nids) == ACC_OK) break;
      fprintf(a->out, "%s\n", acc_last_error());
      acc_clear_error();
    }
    set_str(&c->gpu_ids, buf);
  }
  ASK(r = ask_menu(a, "Do you wish to use mixed precision?", precisions, 3, 0));
  set_str(&c->mixed_precision, precisions[r]);
  set_str(&c->downcast_bf16, "no");
  set_int(&c->enable_cpu_affinity, 0);
  set_str(&c->main_training_function, "main");
  c->tpu_env.set = 1; /* [] like Accelerate writes */
  set_int(&c->tpu_use_cluster, 0);
  set_int(&c->tpu_use_sudo, 0);
  return 0;
eof:
  fprintf(stderr, "\naccelerate config: the input ended before every question was answered; "
                  "nothing was written\n");
  return -1;
}

static int ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && !strcmp(s + a - b, suffix);
}

static int config_default(int argc, char **argv) {
  const char *path = NULL, *mp = "no";
  for (int i = 1; i < argc; i++) {
    int m;
    if ((m = acc_cli_match_opt(argc, argv, &i, "config_file", &path)) ||
        (m = acc_cli_match_opt(argc, argv, &i, "save_location", &path)) ||
        (m = acc_cli_match_opt(argc, argv, &i, "mixed_precision", &mp))) {
      if (m < 0) {
        fprintf(stderr, "accelerate config default: %s needs a value\n", argv[i]);
        return 1;
      }
      continue;
    }
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      printf("usage: accelerate config default [--config_file PATH] [--mixed_precision {no,fp16,bf16}]\n");
      return 0;
    }
    fprintf(stderr, "accelerate config default: unknown argument '%s'\n", argv[i]);
    return 1;
  }
  acc_mixed_precision p;
  if (acc_mixed_precision_parse(mp, &p) != ACC_OK) {
    fprintf(stderr, "accelerate config default: --mixed_precision must be one of no, fp16, bf16 (got '%s')\n", mp);
    return 1;
  }
  char buf[4096];
  if (!path) {
    if (acc_cli_config_default_path(buf, sizeof buf) != ACC_OK) {
      fprintf(stderr, "accelerate config default: %s\n", acc_last_error());
      return 1;
    }
    path = buf;
  }
  struct stat sb;
  if (stat(path, &sb) == 0) {
    printf("Configuration already exists at %s, will not override. Run `accelerate config` manually "
           "or pass another path with --config_file PATH.\n", path);
    return 0;
  }
  /* Accelerate's detected setup: one process per GPU (MULTI_GPU with several), else the CPU. */
  acc__device_probe_info gpus;
  const int ngpus = machine_gpus(&gpus);
  acc_cli_cfg c;
  acc_cli_config_init(&c);
  set_str(&c.compute_environment, "LOCAL_MACHINE");
  set_int(&c.debug, 0);
  set_str(&c.distributed_type, ngpus > 1 ? "MULTI_GPU" : "NO");
  c.downcast_bf16.set = 1, c.downcast_bf16.is_bool = 1, c.downcast_bf16.i = 0;
  set_int(&c.enable_cpu_affinity, 0);
  set_int(&c.machine_rank, 0);
  set_str(&c.main_training_function, "main");
  set_str(&c.mixed_precision, acc_mixed_precision_name(p));
  set_int(&c.num_machines, 1);
  set_int(&c.num_processes, ngpus > 1 ? ngpus : 1);
  set_str(&c.rdzv_backend, "static");
  set_int(&c.same_network, 0);
  set_int(&c.tpu_use_cluster, 0);
  set_int(&c.tpu_use_sudo, 0);
  set_int(&c.use_cpu, ngpus == 0);
  if (ngpus > 0) set_str(&c.gpu_ids, "all");
  if (acc_cli_config_write(&c, path, 1) != ACC_OK) {
    fprintf(stderr, "accelerate config default: %s\n", acc_last_error());
    return 1;
  }
  printf("accelerate configuration saved at %s\n", path);
  return 0;
}

int acc_cli_config(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "default")) return config_default(argc - 1, argv + 1);
  const char *path = NULL;
  for (int i = 1; i < argc; i++) {
    int m = acc_cli_match_opt(argc, argv, &i, "config_file", &path);
    if (m > 0) continue;
    if (m < 0) {
      fprintf(stderr, "accelerate config: --config_file needs a value\n");
      return 1;
    }
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      printf("usage: accelerate config [--config_file PATH]\n"
             "       accelerate config default [--config_file PATH] [--mixed_precision {no,fp16,bf16}]\n\n"
             "Asks how you run your programs and writes the config file that `accelerate launch`\n"
             "reads (default: %s).\n", "$HF_HOME/accelerate/default_config.yaml");
      return 0;
    }
    fprintf(stderr, "accelerate config: unknown argument '%s'\n", argv[i]);
    return 1;
  }
  char buf[4096];
  if (!path) {
    if (acc_cli_config_default_path(buf, sizeof buf) != ACC_OK) {
      fprintf(stderr, "accelerate config: %s\n", acc_last_error());
      return 1;
    }
    path = buf;
  }
  asker a = {stdin, stdout, 0};
  struct stat sb;
  if (stat(path, &sb) == 0) {
    printf("A configuration file already exists at %s.\n", path);
    int r = ask_yes_no(&a, "Do you want to overwrite it?", 0);
    if (r <= 0) {
      printf("The existing configuration was kept.\n");
      return r < 0 ? 1 : 0;
    }
  }
  acc_cli_cfg c;
  if (questionnaire(&a, &c) != 0) return 1;
  if (acc_cli_config_write(&c, path, ends_with(path, ".json")) != ACC_OK) {
    fprintf(stderr, "accelerate config: %s\n", acc_last_error());
    return 1;
  }
  printf("accelerate configuration saved at %s\n", path);
  return 0;
}
