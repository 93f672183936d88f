/* Placement (placement.h): the device of this process from the program's wish, the launcher's
 * environment and the GPUs this process sees; then, with several processes, one comparison of
 * every process's choice over the CPU backend.
 *
 * No GPU context is made here: the CUDA probe only counts the GPUs and reads their properties and
 * PCI bus ids (cudaGetDeviceCount, cudaGetDeviceProperties, cudaDeviceGetPCIBusId: device
 * queries, which need no context); the first call that makes one is cudaSetDevice in the
 * module's open, on this process's GPU only. Not yet observed on a GPU (docs/gpu.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/collcheck.h"
#include "core/env.h"
#include "core/log.h"
#include "state/state.h"
#include "accelerate/comm.h"
#include "accelerate/device.h"
#include "device/nccl_boot.h"
#include "device/placement.h"

const char *acc_device_type_name(acc_device_type t) {
  switch (t) {
    case ACC_DEVICE_CPU: return "cpu";
    case ACC_DEVICE_CUDA: return "cuda";
    case ACC_DEVICE_AUTO: return "auto";
    case ACC_DEVICE_FAKE: return "fake";
  }
  return "unknown";
}

/* ---- the GPUs this process sees ------------------------------------------------------------ */

/* A comma-separated list of integers in [0, limit) into ids (at most cap); stops at the first
 * entry that is not one, is out of range or repeats when `lenient` (the CUDA runtime's rule for
 * CUDA_VISIBLE_DEVICES), else fails naming it. Returns the count, or -1 (message in bad). */
static int parse_ids(const char *s, int limit, int *ids, int cap, int lenient, char *bad,
                     size_t badcap) {
  int n = 0;
  const char *p = s;
  while (*p) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    char tok[32];
    int ok = len > 0 && len < sizeof tok;
    long v = -1;
    if (ok) {
      memcpy(tok, p, len);
      tok[len] = '\0';
      char *end;
      errno = 0;
      v = strtol(tok, &end, 10);
      ok = end != tok && *end == '\0' && errno == 0 && v >= 0 && tok[0] != '-' && tok[0] != '+';
      if (!ok) snprintf(bad, badcap, "'%s' is not a GPU id (a non-negative integer)", tok);
    } else {
      snprintf(bad, badcap, "%s", len ? "an entry is too long" : "an entry is empty");
    }
    if (ok && limit > 0 && v >= limit) {
      ok = 0;
      snprintf(bad, badcap, "GPU id %ld does not exist: this machine has %d GPU(s) (ids 0..%d)", v,
               limit, limit - 1);
    }
    for (int i = 0; ok && i < n; i++)
      if (ids[i] == v) {
        ok = 0;
        snprintf(bad, badcap, "GPU id %ld is listed twice", v);
      }
    if (ok && n >= cap) {
      ok = 0;
      snprintf(bad, badcap, "more than %d GPU ids", cap);
    }
    if (!ok) return lenient ? n : -1;
    ids[n++] = (int)v;
    if (!comma) break;
    p = comma + 1;
    if (!*p) {
      snprintf(bad, badcap, "an entry is empty");
      return lenient ? n : -1;
    }
  }
  return n;
}

acc_result acc__placement_check_gpu_ids(const char *ids, int gpu_count, int *n_ids) {
  *n_ids = 0;
  if (!ids || !*ids)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "--gpu_ids is empty: give \"all\" or a comma-separated list such as 0,1");
  if (strcmp(ids, "all") == 0) return ACC_OK;
  int list[1024];
  char bad[160] = "";
  int n = parse_ids(ids, gpu_count, list, 1024, 0, bad, sizeof bad);
  if (n < 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "--gpu_ids \"%s\": %s; expected \"all\" or distinct GPU ids such as 0,1", ids,
                      bad);
  *n_ids = n;
  return ACC_OK;
}

/* The fake machine: ACCELERATE_TEST_FAKE_GPUS GPUs (or `count`), whose PCI bus numbers come from
 * ACCELERATE_TEST_FAKE_GPU_BUS_IDS (default GPU i on bus i+1; two equal numbers make two ids of
 * one GPU), seen through CUDA_VISIBLE_DEVICES as the CUDA runtime would. */
static acc_result fake_machine(acc__device_probe_info *info, int count) {
  int bus[ACC__MAX_GPUS];
  for (int i = 0; i < count; i++) bus[i] = i + 1;
  const char *map = acc__env_str("ACCELERATE_TEST_FAKE_GPU_BUS_IDS");
  if (map && *map) {
    int n = 0;
    const char *p = map;
    while (*p) {
      char *end;
      errno = 0;
      long v = strtol(p, &end, 10);
      if (end == p || errno || v < 0 || v > 255 || (*end && *end != ',') || n >= count)
        return acc__error(ACC_ERR_INVALID_ARGUMENT,
                          "ACCELERATE_TEST_FAKE_GPU_BUS_IDS=\"%s\": expected %d bus numbers "
                          "(0..255) separated by commas, one per fake GPU",
                          map, count);
      bus[n++] = (int)v;
      p = *end ? end + 1 : end;
    }
    if (n != count)
      return acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "ACCELERATE_TEST_FAKE_GPU_BUS_IDS=\"%s\" has %d entries; the fake machine "
                        "has %d GPUs (ACCELERATE_TEST_FAKE_GPUS)",
                        map, n, count);
  }
  int visible[ACC__MAX_GPUS], nvis = count;
  for (int i = 0; i < count; i++) visible[i] = i;
  const char *cvd = acc__env_str("CUDA_VISIBLE_DEVICES");
  if (cvd) {
    char bad[160];
    nvis = parse_ids(cvd, count, visible, ACC__MAX_GPUS, 1, bad, sizeof bad);
  }
  snprintf(info->module_path, sizeof info->module_path, "(fake GPUs: ACCELERATE_TEST_FAKE_GPUS)");
  info->device_count = nvis;
  for (int k = 0; k < nvis; k++) {
    acc__gpu_info *g = &info->gpus[k];
    snprintf(g->name, sizeof g->name, "fake GPU %d", visible[k]);
    g->total_mem = (size_t)16 << 30;
    snprintf(g->pci_bus_id, sizeof g->pci_bus_id, "00000000:%02X:00.0", bus[visible[k]]);
  }
  if (nvis == 0)
    return acc__error(ACC_ERR_NOT_SUPPORTED,
                      "no CUDA GPU: the fake machine's %d GPU(s) are all hidden by "
                      "CUDA_VISIBLE_DEVICES=\"%s\"",
                      count, cvd ? cvd : "");
  return ACC_OK;
}

acc_result acc__placement_gpus(acc__device_probe_info *info, int *fake, int fake_default) {
  memset(info, 0, sizeof *info);
  *fake = 0;
  long n = 0;
  int set = 0;
  ACC_CHECK(acc__env_int("ACCELERATE_TEST_FAKE_GPUS", &n, &set));
  if (!set) {
    int test = 0, test_set = 0;
    ACC_CHECK(acc__env_enum("ACCELERATE_TEST_DEVICE", &test, &test_set));
    if (test_set && test == 1 && fake_default > 0) {
      set = 1;
      n = fake_default < ACC__MAX_GPUS ? fake_default : ACC__MAX_GPUS;
    }
  }
  if (set) {
    *fake = 1;
    return fake_machine(info, (int)n);
  }
  return acc__device_cuda_probe(info);
}

/* ---- this process's choice --------------------------------------------------------------- */

/* " (CUDA_VISIBLE_DEVICES=...)" when it is set, for messages about GPU numbers. */
static void cvd_note(char *buf, size_t cap) {
  const char *cvd = acc__env_str("CUDA_VISIBLE_DEVICES");
  if (cvd) snprintf(buf, cap, " (CUDA_VISIBLE_DEVICES=%s)", cvd);
  else buf[0] = '\0';
}

static const char *bus_of(const acc__device_probe_info *info, int ordinal) {
  return ordinal < ACC__MAX_GPUS ? info->gpus[ordinal].pci_bus_id : "unknown";
}

/* The error of processes that outnumber the GPUs: which local ranks would share which GPU. */
static acc_result outnumber_error(acc_state *st, const acc__device_probe_info *info) {
  const int local_size = acc_state_local_num_processes(st), count = info->device_count;
  char groups[512] = "", note[160];
  size_t len = 0;
  for (int g = 0; g < count && local_size > count && len + 80 < sizeof groups; g++) {
    if (g + count >= local_size) continue; /* this GPU has one process */
    len += (size_t)snprintf(groups + len, sizeof groups - len, "%slocal ranks", len ? "; " : "");
    for (int r = g; r < local_size && len + 40 < sizeof groups; r += count)
      len += (size_t)snprintf(groups + len, sizeof groups - len, "%s %d", r == g ? "" : ",", r);
    len += (size_t)snprintf(groups + len, sizeof groups - len, " would share cuda:%d (PCI %s)", g,
                            bus_of(info, g));
  }
  cvd_note(note, sizeof note);
  return acc__error(ACC_ERR_INVALID_USAGE,
                    "%d processes on this machine but %d GPU(s) visible%s: %s. Start at most %d "
                    "process(es) per machine (--num_processes), share GPUs on purpose with "
                    "--gpu_sharing (ACCELERATE_GPU_SHARING=1; slower, no NCCL), or pass --cpu",
                    local_size, count, note, groups, count);
}

/* ACCELERATE_TORCH_DEVICE: *cpu = 1 for "cpu", *explicit_ordinal = N for "cuda:N". */
static acc_result torch_device(int *cpu, int *explicit_ordinal) {
  *explicit_ordinal = -1;
  const char *v = acc__env_str("ACCELERATE_TORCH_DEVICE");
  if (!v || !*v || strcmp(v, "cuda") == 0) return ACC_OK;
  if (strcmp(v, "cpu") == 0) {
    *cpu = 1;
    return ACC_OK;
  }
  if (strncmp(v, "cuda:", 5) == 0 && v[5] >= '0' && v[5] <= '9') {
    char *end;
    errno = 0;
    long n = strtol(v + 5, &end, 10);
    if (*end == '\0' && errno == 0 && n < 65536) {
      *explicit_ordinal = (int)n;
      return ACC_OK;
    }
  }
  return acc__error(ACC_ERR_INVALID_ARGUMENT,
                    "ACCELERATE_TORCH_DEVICE=\"%s\": expected cuda, cuda:N (N a GPU number) or cpu",
                    v);
}

static acc_result resolve_local(acc_state *st, int want, int sharing, acc__placement *out) {
  int cpu = st->cpu, explicit_ordinal = -1;
  ACC_CHECK(torch_device(&cpu, &explicit_ordinal));
  if (cpu) {
    snprintf(out->why, sizeof out->why, "%s",
             st->cpu ? "ACCELERATE_USE_CPU is set (--cpu)" : "ACCELERATE_TORCH_DEVICE=cpu");
    return ACC_OK;
  }
  acc__device_probe_info info;
  int fake = 0;
  acc_result rc = acc__placement_gpus(&info, &fake, acc_state_local_num_processes(st));
  if (rc != ACC_OK) {
    char reason[512];
    snprintf(reason, sizeof reason, "%s", acc_last_error());
    if (want == ACC_DEVICE_CUDA || explicit_ordinal >= 0)
      return acc__error(rc, "the program asked for a GPU (%s) but none can be used: %s",
                        explicit_ordinal >= 0 ? "ACCELERATE_TORCH_DEVICE" : "ACC_DEVICE_CUDA",
                        reason);
    snprintf(out->why, sizeof out->why, "%.159s", reason);
    acc_clear_error();
    return ACC_OK;
  }
  const int local = acc_state_local_process_index(st), count = info.device_count;
  char note[160];
  cvd_note(note, sizeof note);
  int ordinal = local;
  if (explicit_ordinal >= 0) {
    if (explicit_ordinal >= count)
      return acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "ACCELERATE_TORCH_DEVICE=cuda:%d, but this process sees %d GPU(s)%s "
                        "(cuda:0..cuda:%d)",
                        explicit_ordinal, count, note, count - 1);
    ordinal = explicit_ordinal;
  } else if (acc_state_local_num_processes(st) > count) {
    /* One visible GPU per process through a CUDA_VISIBLE_DEVICES of its own (a per-rank
     * wrapper, Slurm's binding): cuda:0 everywhere, and the PCI bus ids compared across the
     * processes below tell whether they really are different GPUs. */
    const int pinned = count == 1 && acc__env_str("CUDA_VISIBLE_DEVICES");
    if (!sharing && !pinned) return outnumber_error(st, &info);
    ordinal = local % count;
  }
  out->kind = fake ? ACC__DEVICE_FAKE : ACC__DEVICE_CUDA;
  out->ordinal = ordinal;
  snprintf(out->bus_id, sizeof out->bus_id, "%s", bus_of(&info, ordinal));
  const char *cvd = acc__env_str("CUDA_VISIBLE_DEVICES");
  snprintf(out->detail, sizeof out->detail, "PCI %s%s%.100s", out->bus_id,
           cvd ? ", CUDA_VISIBLE_DEVICES=" : "", cvd ? cvd : "");
  return ACC_OK;
}

/* ---- every process's choice, compared ---------------------------------------------------- */

/* One process's choice, as all-gathered (fixed size: every field a byte string or int32). */
typedef struct choice {
  int32_t status;  /* acc_result of the process's own resolution */
  int32_t kind;    /* acc__device_kind */
  int32_t ordinal;
  int32_t sharing; /* ACCELERATE_GPU_SHARING on that process */
  char host[64];
  char bus[32];
  char msg[320];   /* the error when status != ACC_OK, else the device with its detail */
} choice;

static void describe_choice(const choice *c, char *buf, size_t cap) {
  snprintf(buf, cap, "%s:%d", c->kind == ACC__DEVICE_FAKE ? "fake" : "cuda", (int)c->ordinal);
}

static acc_result agree(acc_state *st, acc_result mine_rc, int sharing, acc__placement *out) {
  const int n = acc_state_num_processes(st), me = acc_state_process_index(st);
  choice mine;
  memset(&mine, 0, sizeof mine);
  mine.status = (int32_t)mine_rc;
  mine.kind = (int32_t)out->kind;
  mine.ordinal = out->ordinal;
  mine.sharing = sharing;
  if (gethostname(mine.host, sizeof mine.host - 1) != 0) snprintf(mine.host, sizeof mine.host, "?");
  snprintf(mine.bus, sizeof mine.bus, "%s", out->bus_id);
  if (mine_rc != ACC_OK) snprintf(mine.msg, sizeof mine.msg, "%s", acc_last_error());
  else if (out->kind != ACC__DEVICE_CPU) snprintf(mine.msg, sizeof mine.msg, "%s", out->detail);
  else snprintf(mine.msg, sizeof mine.msg, "%s", out->why);
  choice *all = acc__calloc((size_t)n, sizeof *all);
  if (!all)
    return acc__error(ACC_ERR_NOMEM, "out of memory comparing the devices of %d processes", n);
  acc__comm_origin(ACC__ORIGIN_PLACEMENT, 0);
  acc_result rc = acc_all_gather(st, &mine, all, sizeof mine, ACC_U8);
  if (rc != ACC_OK) {
    acc__free(all);
    return acc__error_context(rc, "comparing the devices of the processes");
  }
  for (int i = 0; i < n; i++) {
    all[i].host[sizeof all[i].host - 1] = all[i].bus[sizeof all[i].bus - 1] = '\0';
    all[i].msg[sizeof all[i].msg - 1] = '\0';
  }
  /* 1. a process could not choose: every process fails with its reason */
  int failed = -1, nfailed = 0;
  for (int i = 0; i < n; i++)
    if (all[i].status != ACC_OK && nfailed++ == 0) failed = i;
  if (failed >= 0) {
    if (all[me].status != ACC_OK) failed = me; /* its own reason first */
    rc = acc__error((acc_result)all[failed].status,
                    "process %d could not choose its device (%d of %d processes failed): %s",
                    failed, nfailed, n, all[failed].msg);
    acc__free(all);
    return rc;
  }
  /* 2. every process on the same kind of device */
  int gpu = -1, cpu = -1;
  for (int i = 0; i < n; i++) {
    if (all[i].kind == ACC__DEVICE_CPU && cpu < 0) cpu = i;
    if (all[i].kind != ACC__DEVICE_CPU && gpu < 0) gpu = i;
  }
  if (gpu >= 0 && cpu >= 0) {
    char d[32];
    describe_choice(&all[gpu], d, sizeof d);
    rc = acc__error(ACC_ERR_INVALID_USAGE,
                    "process %d trains on %s (host %s) but process %d on the CPU (host %s: %s); "
                    "every process must train on the same kind of device: give every machine a "
                    "GPU per process, or pass --cpu",
                    gpu, d, all[gpu].host, cpu, all[cpu].host, all[cpu].msg);
    acc__free(all);
    return rc;
  }
  /* 3. two processes of one machine on one GPU (same PCI bus id) */
  int a = -1, b = -1, pairs = 0, allow = 1;
  for (int i = 0; i < n; i++) {
    if (!all[i].sharing) allow = 0;
    for (int j = i + 1; gpu >= 0 && j < n; j++)
      if (strcmp(all[i].host, all[j].host) == 0 && strcmp(all[i].bus, all[j].bus) == 0 &&
          strcmp(all[i].bus, "unknown") != 0 && pairs++ == 0) {
        a = i;
        b = j;
      }
  }
  if (pairs && !allow) {
    char da[32], db[32];
    describe_choice(&all[a], da, sizeof da);
    describe_choice(&all[b], db, sizeof db);
    rc = acc__error(ACC_ERR_INVALID_USAGE,
                    "processes %d and %d would share one GPU: PCI %s on host %s (process %d: %s, "
                    "%s; process %d: %s, %s)%s. Each process needs a GPU of its own: check "
                    "CUDA_VISIBLE_DEVICES / --gpu_ids and ACCELERATE_TORCH_DEVICE, or share GPUs "
                    "on purpose with --gpu_sharing (ACCELERATE_GPU_SHARING=1 on every process; "
                    "slower, no NCCL)",
                    a, b, all[a].bus, all[a].host, a, da, all[a].msg, b, db, all[b].msg,
                    pairs > 1 ? " (and more)" : "");
    acc__free(all);
    return rc;
  }
  if (pairs) {
    out->shared = 1;
    int gpus = 0; /* distinct (host, bus) pairs */
    for (int i = 0; i < n; i++) {
      int seen = 0;
      for (int j = 0; j < i && !seen; j++)
        seen = strcmp(all[i].host, all[j].host) == 0 && strcmp(all[i].bus, all[j].bus) == 0;
      gpus += !seen;
    }
    acc__log(ACC_LOG_WARNING,
             "GPU sharing (--gpu_sharing): %d processes train on %d GPU(s); collectives go through "
             "host memory instead of NCCL, which is slower",
             n, gpus);
  }
  acc__free(all);
  return ACC_OK;
}

acc_result acc__placement_resolve(acc_state *st, int want, acc__placement *out) {
  memset(out, 0, sizeof *out);
  out->kind = ACC__DEVICE_CPU;
  out->ordinal = -1;
  if (want == ACC_UNSET || want == ACC_DEVICE_CPU) {
    acc__state_set_device(st, "cpu", -1, "", 0);
    return ACC_OK;
  }
  if (want != ACC_DEVICE_AUTO && want != ACC_DEVICE_CUDA)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "device is %d; choose ACC_DEVICE_CPU, ACC_DEVICE_AUTO or ACC_DEVICE_CUDA "
                      "(ACC_DEVICE_FAKE comes only from ACCELERATE_TEST_DEVICE=fake)",
                      want);
  int sharing = 0;
  acc_result rc = acc__env_bool("ACCELERATE_GPU_SHARING", &sharing, NULL);
  if (rc == ACC_OK) rc = resolve_local(st, want, sharing, out);
  if (acc_state_num_processes(st) > 1) rc = agree(st, rc, sharing, out);
  if (rc != ACC_OK) {
    out->kind = ACC__DEVICE_CPU;
    out->ordinal = -1;
    return rc;
  }
  acc__nccl_boot_note_device(out->kind, out->bus_id);
  if (out->kind == ACC__DEVICE_CPU) acc__state_set_device(st, "cpu", -1, "", 0);
  else {
    char detail[200];
    snprintf(detail, sizeof detail, "%s%s", out->detail, out->shared ? ", shared" : "");
    acc__state_set_device(st, out->kind == ACC__DEVICE_FAKE ? "fake" : "cuda", out->ordinal,
                          detail, 1);
  }
  return ACC_OK;
}
