/* The strict fake device faults like a GPU: a host load or store through device memory (from
 * acc_accelerator_alloc, or from the device layer's own allocations) kills the process that
 * makes it by SIGSEGV (under AddressSanitizer: its SEGV report and a non-zero exit), while the
 * device's copies and acc_accelerator_host_kernel reach the bytes.
 *
 * Each access runs in a forked child whose stderr comes back through a pipe, so the test sees
 * how the child ended. Run with ACCELERATE_TEST_DEVICE=fake. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "acc_test.h"
#include "device/device.h"

enum { N = 1024 };

typedef enum { WRITE, READ, WRITE_INTERNAL, WRITE_AFTER_KERNEL, WRITE_IN_KERNEL } access_kind;

static acc_accelerator *acc;
static float *dev;       /* from acc_accelerator_alloc */
static float *internal;  /* from acc__device_alloc of a device the test opens */
static volatile float sink;

static void write_kernel(void *arg) {
  float *p = arg;
  for (int i = 0; i < N; i++) p[i] = (float)i * 0.5f;
}

static void touch(access_kind k) {
  switch (k) {
    case WRITE: dev[7] = 1.0f; break;
    case READ: sink = dev[3]; break;
    case WRITE_INTERNAL: internal[0] = 2.0f; break;
    case WRITE_AFTER_KERNEL: dev[1] = 3.0f; break;
    case WRITE_IN_KERNEL:
      if (acc_accelerator_host_kernel(acc, write_kernel, dev) != ACC_OK) _exit(3);
      break;
  }
}

/* Runs touch(k) in a child; returns 1 when it died by SIGSEGV (or ASan's SEGV report), 0 when
 * it exited 0; -1 otherwise (message printed). */
static int in_child(access_kind k, const char *what) {
  int fds[2];
  REQUIRE_OK(pipe(fds) == 0 ? ACC_OK : ACC_ERR_SYSTEM);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], 2);
    touch(k);
    _exit(0);
  }
  close(fds[1]);
  char err[8192];
  size_t got = 0;
  ssize_t r;
  while ((r = read(fds[0], err + got, sizeof err - 1 - got)) > 0) got += (size_t)r;
  err[got] = '\0';
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV) return 1;
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0 && strstr(err, "SEGV")) return 1; /* ASan */
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
  fprintf(stderr, "%s: the child ended with status 0x%x: %s\n", what, status, err);
  return -1;
}

int main(void) {
  const char *td = getenv("ACCELERATE_TEST_DEVICE");
  if (!td || strcmp(td, "fake") != 0) {
    fprintf(stderr, "run with ACCELERATE_TEST_DEVICE=fake\n");
    return 2;
  }
  acc_accelerator_options o = ACC_ACCELERATOR_OPTIONS_INIT;
  o.device = ACC_DEVICE_AUTO;
  REQUIRE_OK(acc_accelerator_create(&acc, &o));
  REQUIRE_OK(acc_accelerator_device_type(acc) == ACC_DEVICE_FAKE ? ACC_OK : ACC_ERR_INTERNAL);
  REQUIRE_OK(acc_accelerator_alloc(acc, N * sizeof(float), (void **)&dev));
  acc__device *d = NULL;
  REQUIRE_OK(acc__device_open(&d, ACC__DEVICE_FAKE, 0));
  REQUIRE_OK(acc__device_alloc(d, 64, (void **)&internal));

  CHECK(in_child(WRITE, "write") == 1, "a host write into acc_accelerator_alloc memory dies");
  CHECK(in_child(READ, "read") == 1, "a host read of acc_accelerator_alloc memory dies");
  CHECK(in_child(WRITE_INTERNAL, "internal") == 1, "a host write into acc__device_alloc memory dies");
  CHECK(in_child(WRITE_IN_KERNEL, "kernel") == 0, "a host kernel writes device memory");

  /* the same in this process: a host kernel writes, a copy reads it back, the memory closes */
  REQUIRE_OK(acc_accelerator_host_kernel(acc, write_kernel, dev));
  static float back[N];
  REQUIRE_OK(acc_accelerator_memcpy(acc, back, dev, sizeof back, ACC_COPY_DEVICE_TO_HOST));
  int same = 1;
  for (int i = 0; i < N; i++) same &= back[i] == (float)i * 0.5f;
  CHECK(same, "the host kernel's writes are what the device copy reads");
  CHECK(in_child(WRITE_AFTER_KERNEL, "after") == 1, "device memory closes after the host kernel");
  /* a copy into device memory and a memset reach it too */
  static float host[N];
  for (int i = 0; i < N; i++) host[i] = (float)-i;
  REQUIRE_OK(acc_accelerator_memcpy(acc, dev, host, sizeof host, ACC_COPY_HOST_TO_DEVICE));
  REQUIRE_OK(acc_accelerator_memcpy(acc, back, dev, sizeof back, ACC_COPY_DEVICE_TO_HOST));
  CHECK(memcmp(back, host, sizeof back) == 0, "host -> device -> host round trip");

  acc__device_free(d, internal);
  acc__device_close(d);
  REQUIRE_OK(acc_accelerator_free(acc, dev));
  acc_accelerator_destroy(acc);
  return acc_test_finish("device_fault");
}
