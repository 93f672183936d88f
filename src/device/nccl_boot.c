/* The NCCL bootstrap (src/device/nccl_boot.h). Through the rendezvous store when the job was
 * joined through it: process 0 sets acc/nccl/<n>/id, every process sets acc/nccl/<n>/peer/<rank>
 * and waits for the id and every peer (n counts the bootstraps of this process: every process
 * makes the same calls in the same order; a restarted group's keys are under "r<attempt>/").
 * Otherwise a broadcast and an all-gather over the CPU backend. */
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "backend/store.h"
#include "device/nccl_boot.h"
#include "state/join.h"

/* byte 0: process 0's status (an acc_result), then the id, then its message */
#define ID_MSG 256
#define ID_BUF (1 + ACC__NCCL_ID_BYTES + ID_MSG)

static acc__device_kind g_kind = ACC__DEVICE_CPU;
static char g_bus[32];
static int g_seq; /* bootstraps through the store so far (the main thread's) */

void acc__nccl_boot_note_device(acc__device_kind kind, const char *bus_id) {
  g_kind = kind;
  snprintf(g_bus, sizeof g_bus, "%s", bus_id ? bus_id : "");
}

/* Process 0: the id, or the reason there is none, into buf. */
static void make_id(uint8_t buf[ID_BUF]) {
  acc_result rc = ACC_OK;
  if (g_kind == ACC__DEVICE_FAKE) {
    /* The fake device stands for a GPU: its id is random bytes, as much of ncclGetUniqueId's
     * is (it needs no driver either). */
    size_t got = 0;
    while (got < ACC__NCCL_ID_BYTES) {
      ssize_t k = getrandom(buf + 1 + got, ACC__NCCL_ID_BYTES - got, 0);
      if (k <= 0) {
        rc = acc__error(ACC_ERR_SYSTEM, "getrandom failed making the fake device's NCCL id");
        break;
      }
      got += (size_t)k;
    }
  } else {
    const acc__device_ops *ops = NULL;
    rc = acc__device_module_load("cuda", &ops);
    if (rc == ACC_OK && !ops->nccl_unique_id)
      rc = acc__error(ACC_ERR_NOT_SUPPORTED, "the CUDA module was built without NCCL");
    if (rc == ACC_OK) {
      int r = ops->nccl_unique_id(buf + 1);
      if (r != ACC_OK) rc = acc__error((acc_result)r, "%s", ops->last_error());
    }
  }
  buf[0] = (uint8_t)rc;
  if (rc != ACC_OK) snprintf((char *)buf + 1 + ACC__NCCL_ID_BYTES, ID_MSG, "%.255s", acc_last_error());
}

static acc_result id_result(const uint8_t buf[ID_BUF], uint8_t id[ACC__NCCL_ID_BYTES]) {
  if (buf[0] != ACC_OK)
    return acc__error((acc_result)buf[0], "process 0 could not make the NCCL unique id: %.255s",
                      (const char *)buf + 1 + ACC__NCCL_ID_BYTES);
  memcpy(id, buf + 1, ACC__NCCL_ID_BYTES);
  return ACC_OK;
}

static void fill_mine(acc__nccl_peer *p, int rank, int machine) {
  memset(p, 0, sizeof *p);
  p->rank = rank;
  p->machine = machine;
  if (gethostname(p->host, sizeof p->host - 1) != 0) snprintf(p->host, sizeof p->host, "?");
  snprintf(p->bus, sizeof p->bus, "%s", g_bus);
}

static acc_result via_store(acc_state *st, acc__store *store, int machine, uint8_t buf[ID_BUF],
                            acc__nccl_peer *all) {
  const int n = acc_state_num_processes(st), me = acc_state_process_index(st);
  double t = acc_state_timeout(st);
  if (t <= 0) t = 1800.0;
  int seq = g_seq++;
  char key[96];
  snprintf(key, sizeof key, "acc/nccl/%d/id", seq);
  if (me == 0) {
    make_id(buf);
    ACC_CHECK(acc__store_set(store, key, buf, ID_BUF));
  }
  acc__nccl_peer mine;
  fill_mine(&mine, me, machine);
  char pk[96];
  snprintf(pk, sizeof pk, "acc/nccl/%d/peer/%d", seq, me);
  ACC_CHECK(acc__store_set(store, pk, &mine, sizeof mine));
  void *v = NULL;
  size_t len = 0;
  acc_result rc = acc__store_get(store, key, &v, &len, t);
  if (rc != ACC_OK)
    return acc__error_context(rc, "process %d waiting for the NCCL unique id from process 0 "
                                  "through the rendezvous store", me);
  if (len != ID_BUF) {
    acc__free(v);
    return acc__error(ACC_ERR_FORMAT, "the NCCL unique id in the rendezvous store has %zu bytes, "
                                      "expected %d (another version on process 0's machine?)",
                      len, ID_BUF);
  }
  memcpy(buf, v, ID_BUF);
  acc__free(v);
  for (int r = 0; r < n; r++) {
    snprintf(pk, sizeof pk, "acc/nccl/%d/peer/%d", seq, r);
    if ((rc = acc__store_get(store, pk, &v, &len, t)) != ACC_OK)
      return acc__error_context(rc, "process %d waiting for the GPU of process %d through the "
                                    "rendezvous store", me, r);
    if (len != sizeof *all) {
      acc__free(v);
      return acc__error(ACC_ERR_FORMAT, "process %d's GPU entry in the rendezvous store has %zu "
                                        "bytes, expected %zu", r, len, sizeof *all);
    }
    memcpy(&all[r], v, sizeof *all);
    acc__free(v);
    all[r].host[sizeof all[r].host - 1] = all[r].bus[sizeof all[r].bus - 1] = 0;
  }
  return ACC_OK;
}

static acc_result via_backend(acc_state *st, uint8_t buf[ID_BUF], acc__nccl_peer *all) {
  const int me = acc_state_process_index(st);
  if (me == 0) make_id(buf);
  ACC_CHECK(acc_broadcast(st, buf, ID_BUF, ACC_U8, 0));
  acc__nccl_peer mine;
  fill_mine(&mine, me, -1);
  ACC_CHECK(acc_all_gather(st, &mine, all, sizeof mine, ACC_U8));
  for (int r = 0; r < acc_state_num_processes(st); r++)
    all[r].host[sizeof all[r].host - 1] = all[r].bus[sizeof all[r].bus - 1] = 0;
  return ACC_OK;
}

/* Two processes of one machine (the store's machine rank, else the host name) on one GPU. */
static acc_result check_peers(const acc__nccl_peer *all, int n) {
  for (int a = 0; a < n; a++) {
    if (all[a].rank != a)
      return acc__error(ACC_ERR_FORMAT, "the GPU table's entry %d says rank %d", a, (int)all[a].rank);
    if (!all[a].bus[0] || strcmp(all[a].bus, "unknown") == 0) continue;
    for (int b = a + 1; b < n; b++) {
      int same = all[a].machine >= 0 ? all[a].machine == all[b].machine
                                     : strcmp(all[a].host, all[b].host) == 0;
      if (same && strcmp(all[a].bus, all[b].bus) == 0)
        return acc__error(ACC_ERR_INVALID_USAGE,
                          "NCCL: processes %d and %d (machine %d, host %s) are on the same GPU "
                          "(PCI %s); NCCL needs one GPU per process",
                          a, b, (int)all[a].machine, all[a].host, all[a].bus);
    }
  }
  return ACC_OK;
}

acc_result acc__device_nccl_bootstrap(acc_state *st, uint8_t id[ACC__NCCL_ID_BYTES],
                                      acc__nccl_peer *peers, int *via) {
  const int n = acc_state_num_processes(st);
  uint8_t buf[ID_BUF];
  memset(buf, 0, sizeof buf);
  acc__nccl_peer *all = peers ? peers : acc__calloc((size_t)n, sizeof *all);
  if (!all) return acc__error(ACC_ERR_NOMEM, "out of memory for the GPU table of %d processes", n);
  int machine = -1;
  acc__store *store = acc__state_join_store(&machine);
  if (via) *via = store != NULL;
  acc_result rc = store ? via_store(st, store, machine, buf, all) : via_backend(st, buf, all);
  if (rc == ACC_OK) rc = id_result(buf, id);
  if (rc == ACC_OK) rc = check_peers(all, n);
  if (!peers) acc__free(all);
  return rc;
}

acc_result acc__device_nccl_bootstrap_id(acc_state *st, uint8_t id[ACC__NCCL_ID_BYTES]) {
  return acc__device_nccl_bootstrap(st, id, NULL, NULL);
}
