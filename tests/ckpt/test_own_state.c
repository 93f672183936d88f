/* The program's own state in save_state / load_state (include/accelerate/program_state.h), run by
 * the launcher at 1 and 2 processes:
 *  - named buffers: a lazily allocated F32 buffer and a fixed I64 counter are saved once and
 *    restored on every process (the NULL buffer is allocated by load_state); a buffer left NULL at
 *    save stays NULL; size or dtype changed since the save, an allocated buffer missing from the
 *    file and an unknown saved tensor are errors naming file and tensor; bad registrations
 *    (stem, duplicates, no data) and ZeRO are refused;
 *  - per-process objects: each process gets its own value back; a checkpoint that holds another
 *    number of processes' files is refused on every process naming both counts. */
#include <sys/stat.h>
#include <unistd.h>

#include "acc_test.h"

static int rank, nprocs;
static char base[512];

typedef struct counter {
  int64_t v;
} counter;

static acc_result csave(void *obj, void *buf, size_t cap, size_t *len) {
  *len = sizeof(int64_t);
  if (buf && cap >= sizeof(int64_t)) memcpy(buf, &((counter *)obj)->v, sizeof(int64_t));
  return ACC_OK;
}

static acc_result cload(void *obj, const void *data, size_t len) {
  if (len != sizeof(int64_t)) return acc_error_set(ACC_ERR_FORMAT, "counter: %zu bytes", len);
  memcpy(&((counter *)obj)->v, data, len);
  return ACC_OK;
}

static acc_accelerator *make(int zero) {
  acc_accelerator_options o;
  REQUIRE_OK(acc_accelerator_options_init(&o, ACC_ACCELERATOR_OPTIONS_VERSION));
  o.zero_stage = zero;
  acc_accelerator *acc;
  REQUIRE_OK(acc_accelerator_create(&acc, &o));
  return acc;
}

static void test_buffers(void) {
  char dir[600];
  snprintf(dir, sizeof dir, "%s/buffers", base);
  acc_accelerator *acc = make(0);
  float *m = malloc(4 * sizeof(float)), *lazy = NULL;
  int64_t t = 7;
  for (int i = 0; i < 4; i++) m[i] = 0.5f * (float)i;
  acc_named_buffer nb[3] = {{"m", ACC_F32, (void **)&m, 4, NULL}, {"lazy", ACC_F32, (void **)&lazy, 3, NULL},
                            {"t", ACC_I64, NULL, 1, &t}};
  REQUIRE_OK(acc_accelerator_register_buffers(acc, "adamw", nb, 3));
  CHECK_ERR(acc_accelerator_register_buffers(acc, "adamw", nb, 1), ACC_ERR_INVALID_ARGUMENT, "'adamw' is already");
  CHECK_ERR(acc_accelerator_register_buffers(acc, "../x", nb, 1), ACC_ERR_INVALID_ARGUMENT, "not a file name");
  acc_named_buffer dup[2] = {nb[0], nb[0]};
  CHECK_ERR(acc_accelerator_register_buffers(acc, "d", dup, 2), ACC_ERR_INVALID_ARGUMENT, "'m' appears twice");
  acc_named_buffer none[1] = {{"x", ACC_F32, NULL, 2, NULL}};
  CHECK_ERR(acc_accelerator_register_buffers(acc, "n", none, 1), ACC_ERR_INVALID_ARGUMENT, "data or fixed");
  REQUIRE_OK(acc_accelerator_save_state(acc, dir, NULL));
  /* a NULL buffer was left out, the others restored on every process */
  for (int i = 0; i < 4; i++) m[i] = -1.0f;
  t = 99;
  CHECK_OK(acc_accelerator_load_state(acc, dir, NULL));
  CHECK(m[3] == 1.5f && t == 7 && lazy == NULL, "restored m[3] %g, t %lld, lazy %p", m[3], (long long)t,
        (void *)lazy);
  /* the lazy buffer allocated after the save: the file has none, an error names it */
  lazy = calloc(3, sizeof(float));
  CHECK_ERR(acc_accelerator_load_state(acc, dir, NULL), ACC_ERR_MISMATCH, "has no tensor 'lazy'");
  lazy[2] = 4.25f;
  char dir2[600];
  snprintf(dir2, sizeof dir2, "%s/buffers2", base);
  REQUIRE_OK(acc_accelerator_save_state(acc, dir2, NULL));
  acc_accelerator_destroy(acc);
  /* a fresh program: NULL buffers are allocated by load_state (the program frees them) */
  acc = make(0);
  float *m2 = NULL, *lazy2 = NULL;
  int64_t t2 = 0;
  acc_named_buffer nb2[3] = {{"m", ACC_F32, (void **)&m2, 4, NULL}, {"lazy", ACC_F32, (void **)&lazy2, 3, NULL},
                             {"t", ACC_I64, NULL, 1, &t2}};
  REQUIRE_OK(acc_accelerator_register_buffers(acc, "adamw", nb2, 3));
  CHECK_OK(acc_accelerator_load_state(acc, dir2, NULL));
  CHECK(m2 && lazy2 && m2[1] == 0.5f && lazy2[2] == 4.25f && t2 == 7, "allocated and restored by load_state");
  acc_accelerator_destroy(acc);
  /* another size, another dtype, an unknown saved tensor */
  acc = make(0);
  float *m3 = NULL;
  double *t3 = NULL;
  acc_named_buffer sz[1] = {{"m", ACC_F32, (void **)&m3, 5, NULL}};
  REQUIRE_OK(acc_accelerator_register_buffers(acc, "adamw", sz, 1));
  CHECK_ERR(acc_accelerator_load_state(acc, dir2, NULL), ACC_ERR_MISMATCH, "'lazy', which is not a buffer registered");
  acc_accelerator_destroy(acc);
  acc = make(0);
  acc_named_buffer sz3[3] = {{"m", ACC_F32, (void **)&m3, 5, NULL}, {"lazy", ACC_F32, (void **)&lazy2, 3, NULL},
                             {"t", ACC_F64, (void **)&t3, 1, NULL}};
  REQUIRE_OK(acc_accelerator_register_buffers(acc, "adamw", sz3, 3));
  CHECK_ERR(acc_accelerator_load_state(acc, dir2, NULL), ACC_ERR_MISMATCH, "tensor 'm' of");
  CHECK(strstr(acc_last_error(), "expected F32 with 5 elements") != NULL, "size named: %s", acc_last_error());
  acc_accelerator_destroy(acc);
  /* ZeRO: replicated buffers are allowed (a step count, an RNG); the program's sharded ones are
   * acc_accelerator_register_zero_buffers (devtrain_llmc_*), which refuses zero_stage 0 and a
   * stem both kinds would write */
  acc = make(1);
  CHECK_OK(acc_accelerator_register_buffers(acc, "adamw", nb2, 3));
  acc_accelerator_destroy(acc);
  acc = make(0);
  CHECK_ERR(acc_accelerator_register_zero_buffers(acc, "adamw_z", NULL, nb2, 1), ACC_ERR_INVALID_ARGUMENT,
            "prepare the model first");
  acc_accelerator_destroy(acc);
  free(m);
  free(lazy);
  free(m2);
  free(lazy2);
}

static void test_per_process(void) {
  char dir[600];
  snprintf(dir, sizeof dir, "%s/perproc", base);
  acc_accelerator *acc = make(0);
  counter c = {100 + rank}, same = {5};
  REQUIRE_OK(acc_accelerator_register_for_checkpointing_per_process(acc, &c, csave, cload));
  REQUIRE_OK(acc_accelerator_register_for_checkpointing(acc, &same, csave, cload));
  CHECK_ERR(acc_accelerator_register_for_checkpointing_per_process(acc, &c, NULL, cload), ACC_ERR_INVALID_ARGUMENT,
            "both a save and a load");
  REQUIRE_OK(acc_accelerator_save_state(acc, dir, NULL));
  c.v = -1;
  CHECK_OK(acc_accelerator_load_state(acc, dir, NULL));
  CHECK(c.v == 100 + rank, "process %d got %lld back, expected its own %d", rank, (long long)c.v, 100 + rank);
  /* a checkpoint holding one more process's file: as if saved by nprocs + 1 processes */
  REQUIRE_OK(acc_accelerator_wait_for_everyone(acc));
  if (rank == 0) {
    char src[700], dst[700], cmd[1500];
    snprintf(src, sizeof src, "%s/process_object_0_0.bin", dir);
    snprintf(dst, sizeof dst, "%s/process_object_0_%d.bin", dir, nprocs);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", src, dst);
    REQUIRE_OK(system(cmd) == 0 ? ACC_OK : ACC_ERR_IO);
  }
  REQUIRE_OK(acc_accelerator_wait_for_everyone(acc));
  char want[128];
  snprintf(want, sizeof want, "was saved by %d process(es)", nprocs + 1);
  CHECK_ERR(acc_accelerator_load_state(acc, dir, NULL), ACC_ERR_MISMATCH, want);
  snprintf(want, sizeof want, "but %d processes are loading", nprocs);
  CHECK(strstr(acc_last_error(), want) != NULL, "both counts named: %s", acc_last_error());
  acc_accelerator_destroy(acc);
}

int main(int argc, char **argv) {
  acc_state *st;
  REQUIRE_OK(acc_state_create(&st, NULL));
  rank = acc_state_process_index(st);
  nprocs = acc_state_num_processes(st);
  acc_test_rank = rank;
  if (argc < 2) return 2;
  mkdir(argv[1], 0755);
  snprintf(base, sizeof base, "%s/np%d", argv[1], nprocs);
  if (rank == 0) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
    if (system(cmd) != 0) return 3;
    mkdir(base, 0755);
  }
  acc_accelerator *sync = make(0);
  REQUIRE_OK(acc_accelerator_wait_for_everyone(sync)); /* the directory exists before anyone writes */
  acc_accelerator_destroy(sync);
  test_buffers();
  test_per_process();
  return acc_test_finish("ckpt_own_state");
}
