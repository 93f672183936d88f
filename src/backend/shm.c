/* Shared-memory backend: the built-in default for several processes on one machine.
 *
 * Segment. One POSIX shared-memory object "/acc-<job id>-<token>" (layout in shm.h): a header, one
 * control block per rank (arrival counter `seq` alone on a cache line, pid, flags, a robust
 * process-shared liveness mutex), per-rank data slots [2][CHUNK], a result area [2][CHUNK].
 * The whole mapping is prefaulted once (MAP_POPULATE), never per call.
 *
 * Rendezvous. The job id is predictable under some launchers, so the name also carries a random
 * token that only the job's user can learn (exported by `accelerate launch`, or published by
 * rank 0 in a 0600 file of the user's private runtime directory: rdzv.c). Rank 0 reclaims
 * segments whose creator died, creates the object with O_EXCL (a leftover of ours with the same
 * name is unlinked and recreated; another user's is refused), records itself as the creator,
 * reserves the memory (posix_fallocate: a full /dev/shm is an error, not a SIGBUS later),
 * initializes it, locks its liveness mutex and sets `ready`. The other ranks refuse an object
 * not owned by their euid with mode 0600 (before mapping it), and reopen the name until it is
 * ready and rank 0's mutex is held (otherwise it is a stale segment of a dead job: drop it,
 * retry). Each rank locks its own mutex and registers; after one step that every rank reaches,
 * rank 0 unlinks the name and the token file: the mappings stay valid and no /dev/shm entry can
 * outlive the job, even if everything crashes later. The whole rendezvous is bounded by
 * ACCELERATE_RENDEZVOUS_TIMEOUT, and under `accelerate launch` a sibling that exits before
 * attaching is learnt from the launcher's board at once.
 *
 * The other files of the backend: shm_step.c (one step: publish, wait, liveness and call-tag
 * checks, hang reports) and shm_coll.c (the collectives, their buffer rule and determinism);
 * shm_impl.h holds what they share.
 */
#include "backend/shm_impl.h"
#include "core/env.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend/rdzv.h"

/* Non-temporal stores into the segment from this message size: measured faster at every size
 * from 4 KiB on the 2-vCPU AMD EPYC guest (docs/PERFORMANCE.md, session 7), hence always. */
#define SHM_DEFAULT_STREAM_MIN 0L
#define SHM_DEFAULT_CHUNK (512u * 1024u) /* measured best of 64 KiB..1 MiB: docs/PERFORMANCE.md */
#define SHM_MAX_PHASE_US 1000000L     /* upper bound of ACCELERATE_SHM_SPIN_US / _YIELD_US */
#define SHM_RDZV_TIMEOUT_S 60.0       /* default ACCELERATE_RENDEZVOUS_TIMEOUT */

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

/* ---- the backend object -------------------------------------------------------------------- */

/* The process's live group, for its last words at exit (acc__shm_ctrl.exit_rc). */
static shm_be *_Atomic g_live;

static void last_words(void) {
  shm_be *s = atomic_load(&g_live);
  acc_result rc = acc__last_error_code();
  if (!s || !s->ctrl || rc == ACC_OK) return;
  acc__shm_ctrl *c = &s->ctrl[s->me];
  snprintf(c->exit_msg, sizeof c->exit_msg, "%s", acc_last_error());
  atomic_store_explicit(&c->exit_rc, (int32_t)rc, memory_order_release);
}

static void shm_destroy(acc__backend *be) {
  shm_be *s = (shm_be *)be;
  if (!s) return;
  shm_be *expect = s;
  atomic_compare_exchange_strong(&g_live, &expect, NULL);
  /* one-sided broadcasts not yet compared with every rank's: compare them now (shm_ring.c) */
  int mismatch = acc__shm_ring_final(s);
  if (s->registered) {
    atomic_store(&s->ctrl[s->me].departed, 1);
    pthread_mutex_unlock(&s->ctrl[s->me].lock);
    acc__shm_wake_sleepers(s);
  }
  if (s->me == 0 && !s->unlinked && s->name[0]) shm_unlink(s->name);
  if (s->map) munmap(s->map, s->map_bytes);
  acc__free(s->scratch);
  acc__free(s->cma_src);
  acc__free(s->tile);
  acc__free((void *)s->rsrc);
  acc__free(s->rdst);
  acc__shm_reg_destroy(s);
  acc__free(s);
  /* A program whose last collectives were mismatched one-sided broadcasts must not end with
   * diverged data and status 0; the message is on stderr and is the last error (the launcher's
   * report names it). */
  if (mismatch) exit(1);
}

static const acc__backend_ops shm_ops = {
    "shm",
    acc__shm_barrier,
    acc__shm_broadcast,
    acc__shm_all_reduce,
    acc__shm_reduce,
    acc__shm_all_gather,
    acc__shm_gather,
    acc__shm_all_gather_v,
    shm_destroy,
    acc__shm_call_end,
    1,
    acc__shm_reduce_scatter,
    acc__shm_all_reduce_scaled_f32,
    acc__shm_alloc_shared,
    acc__shm_free_shared,
    NULL, /* subgroup: shm is one machine; comm.c answers for one machine itself */
    NULL, /* all_gather_strided: only the leaders of the hierarchical backend call it */
};

/* ---- rendezvous --------------------------------------------------------------------------- */

static void set_pointers(shm_be *s) {
  s->hdr = (acc__shm_header *)s->map;
  s->ctrl = (acc__shm_ctrl *)(s->map + acc__shm_ctrl_off());
  s->slots = s->map + acc__shm_slots_off(s->n);
  s->ring = (acc__shm_ring_slot *)(s->map + acc__shm_ring_off(s->n, s->chunk));
}

static acc_result read_chunk_env(int rank, size_t *chunk) {
  long v = 0;
  int set = 0;
  ACC_CHECK(acc__env_int("ACCELERATE_SHM_CHUNK_BYTES", &v, &set));
  if (!set) {
    *chunk = SHM_DEFAULT_CHUNK;
    return ACC_OK;
  }
  if (v < 4096 || v > (64L << 20) || v % 64 != 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "rank %d: ACCELERATE_SHM_CHUNK_BYTES=%ld must be a multiple of 64 between "
                      "4096 and 67108864",
                      rank, v);
  *chunk = (size_t)v;
  return ACC_OK;
}

/* Rank 0's segment name "/acc-<job id>-<token>". */
static void make_name(shm_be *s, const char *job_id) {
  snprintf(s->name, sizeof s->name, "/acc-%s-%s", job_id, s->token);
  s->name[NAME_MAX] = '\0'; /* "/" + at most NAME_MAX - 1 characters */
}

/* The name exists already: a leftover of ours (an earlier job with the same id and token) is
 * removed; one of another user is refused. */
static acc_result remove_existing(shm_be *s) {
  char path[NAME_MAX + 16];
  struct stat st;
  snprintf(path, sizeof path, "/dev/shm%s", s->name);
  if (lstat(path, &st) == 0 && st.st_uid != geteuid())
    return acc__error(ACC_ERR_SYSTEM,
                      "rank 0: cannot create the shared-memory segment %s: it already exists and "
                      "belongs to uid %u (another local user created this name; see the threat "
                      "model in docs/backends.md)",
                      s->name, (unsigned)st.st_uid);
  shm_unlink(s->name); /* a leftover of an earlier job with the same id: never reuse it */
  return ACC_OK;
}

static acc_result create_segment(shm_be *s) {
  size_t chunk = SHM_DEFAULT_CHUNK;
  ACC_CHECK(read_chunk_env(s->me, &chunk));
  uint64_t total = acc__shm_total(s->n, chunk);
  int fd = -1;
  for (int tries = 0; fd < 0; tries++) {
    fd = shm_open(s->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) break;
    if (errno != EEXIST || tries >= 100)
      return acc__error(ACC_ERR_SYSTEM, "rank 0: cannot create the shared-memory segment %s: %s",
                        s->name, strerror(errno));
    ACC_CHECK(remove_existing(s));
  }
  /* creator first, so that a kill from here on leaves a segment the next job can reclaim */
  acc__shm_header early;
  memset(&early, 0, sizeof early);
  early.magic = ACC_SHM_MAGIC;
  early.version = ACC_SHM_VERSION;
  early.creator_pid = (int32_t)getpid();
  early.creator_start = acc__proc_start_time(getpid());
  early.creator_pidns = acc__pid_namespace();
  int err = fchmod(fd, 0600) != 0 ? errno : 0; /* whatever the umask: the others check 0600 */
  if (!err) err = ftruncate(fd, (off_t)total) != 0 ? errno : 0;
  if (!err && pwrite(fd, &early, sizeof early, 0) != (ssize_t)sizeof early)
    err = errno ? errno : EIO;
  if (!err) err = posix_fallocate(fd, 0, (off_t)total);
  if (err) {
    close(fd);
    shm_unlink(s->name);
    return acc__error(ACC_ERR_SYSTEM,
                      "rank 0: cannot reserve %llu bytes of shared memory for %s: %s (is /dev/shm "
                      "full or too small? lower ACCELERATE_SHM_CHUNK_BYTES or enlarge /dev/shm)",
                      (unsigned long long)total, s->name, strerror(err));
  }
  void *m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  err = errno;
  close(fd);
  if (m == MAP_FAILED) {
    shm_unlink(s->name);
    return acc__error(ACC_ERR_SYSTEM, "rank 0: cannot map the shared-memory segment %s (%llu bytes): %s",
                      s->name, (unsigned long long)total, strerror(err));
  }
  s->map = m;
  s->map_bytes = total;
  s->chunk = chunk;
  memset(s->map + sizeof early, 0, total - sizeof early); /* touch every page once, now */
  set_pointers(s);
  s->hdr->world = s->n;
  s->hdr->chunk = chunk;
  s->hdr->total_bytes = total;
  ACC_CHECK(acc__shm_cma_choose(s));
  ACC_CHECK(acc__shm_algo_choose(s));
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  for (int r = 0; r < s->n; r++) {
    if ((err = pthread_mutex_init(&s->ctrl[r].lock, &a)) != 0) {
      pthread_mutexattr_destroy(&a);
      return acc__error(ACC_ERR_SYSTEM, "rank 0: cannot create the liveness lock of rank %d: %s", r,
                        strerror(err));
    }
  }
  pthread_mutexattr_destroy(&a);
  if ((err = pthread_mutex_lock(&s->ctrl[0].lock)) != 0)
    return acc__error(ACC_ERR_SYSTEM, "rank 0: cannot take its liveness lock: %s", strerror(err));
  s->registered = 1;
  atomic_store(&s->hdr->ready, 1);
  return ACC_OK;
}

/* Opens the segment and validates it; returns 1 when usable, 0 to retry, -1 on error. */
static int try_attach(shm_be *s) {
  int fd = shm_open(s->name, O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    if (errno == ENOENT) return 0;
    acc__error(ACC_ERR_SYSTEM, "rank %d: cannot open the shared-memory segment %s: %s", s->me,
               s->name, strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return 0;
  }
  /* Trust nothing in a segment that another user could have written: rank 0 creates it as
   * the same user, mode 0600. Checked before mapping it. */
  if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 07777) != 0600) {
    close(fd);
    acc__error(ACC_ERR_SYSTEM,
               "rank %d: refusing the shared-memory segment %s: it belongs to uid %u with mode "
               "%04o, but this job's segment must belong to uid %u with mode 0600 (another local "
               "user may be trying to intercept the rendezvous; see the threat model in "
               "docs/backends.md)",
               s->me, s->name, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777),
               (unsigned)geteuid());
    return -1;
  }
  if ((uint64_t)st.st_size < acc__shm_slots_off(s->n)) {
    close(fd);
    return 0;
  }
  size_t size = (size_t)st.st_size;
  uint8_t *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    close(fd);
    return 0;
  }
  s->map = m;
  s->map_bytes = size;
  set_pointers(s);
  acc__shm_header *h = s->hdr;
  int ok = atomic_load(&h->ready) && h->magic == ACC_SHM_MAGIC && h->version == ACC_SHM_VERSION &&
           h->world == s->n && h->chunk >= 4096 && h->total_bytes == size &&
           acc__shm_total(s->n, h->chunk) == size;
  if (ok) {
    /* rank 0 holds its lock while its job lives: otherwise this is a dead job's segment */
    int rc = pthread_mutex_trylock(&s->ctrl[0].lock);
    if (rc != EBUSY) {
      /* we may now own it: release it (made consistent, or glibc would keep it ours) */
      if (rc == EOWNERDEAD) pthread_mutex_consistent(&s->ctrl[0].lock);
      if (rc == 0 || rc == EOWNERDEAD) pthread_mutex_unlock(&s->ctrl[0].lock);
      ok = 0;
    }
  }
  if (ok) {
    s->chunk = (size_t)h->chunk;
    set_pointers(s); /* the ring's place depends on the chunk */
    /* prefault the whole mapping once */
    void *m2 = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (m2 != MAP_FAILED) {
      munmap(m, size);
      s->map = m2;
      set_pointers(s);
    }
  } else {
    munmap(m, size);
    s->map = NULL;
  }
  close(fd);
  return ok;
}

/* Ranks other than 0: learn the name (token file, unless the launcher exported the token) and
 * attach once rank 0 of a living job has initialized the segment. */
static acc_result attach_segment(shm_be *s, const char *job_id) {
  double last_board = s->rdzv_t0, pause = 0.0005;
  int have_name = s->token_path[0] == '\0';
  if (have_name) make_name(s, job_id);
  for (;;) {
    if (s->token_path[0]) {
      /* re-read every time: a file left by a dead job with the same id is replaced by rank 0 */
      int t = acc__rdzv_read_token(s->token_path, s->me, s->token, sizeof s->token);
      if (t < 0) return ACC_ERR_SYSTEM;
      if (t > 0) {
        make_name(s, job_id);
        have_name = 1;
      }
    }
    if (have_name) {
      int r = try_attach(s);
      if (r < 0) return ACC_ERR_SYSTEM;
      if (r > 0) break;
    }
    double now = acc__now();
    if (now - last_board >= SHM_CHECK_PERIOD_S / 2) {
      last_board = now;
      ACC_CHECK(acc__shm_board_check(s));
    }
    if (now - s->rdzv_t0 > s->rdzv_timeout_s) {
      if (!have_name)
        return acc__error(ACC_ERR_TIMEOUT,
                          "rank %d: timed out after %g s (%s) waiting for rank 0 to create the "
                          "shared-memory segment: its rendezvous token file %s does not exist (is "
                          "rank 0 running, with the same job?)",
                          s->me, s->rdzv_timeout_s, s->rdzv_var, s->token_path);
      return acc__error(ACC_ERR_TIMEOUT,
                        "rank %d: timed out after %g s (%s) waiting for rank 0 to create the "
                        "shared-memory segment %s (is rank 0 running, with the same job?)",
                        s->me, s->rdzv_timeout_s, s->rdzv_var, s->name);
    }
    sleep_s(pause);
    if (pause < 0.004) pause *= 1.2; /* 0.5 ms at first, 4 ms after ~25 ms */
  }
  acc__shm_ctrl *c = &s->ctrl[s->me];
  int err = pthread_mutex_trylock(&c->lock);
  if (err != 0)
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "rank %d: another process already joined the shared-memory group %s as rank "
                      "%d (%s): are two jobs sharing one ACCELERATE_RUN_ID?",
                      s->me, s->name, s->me, strerror(err));
  s->registered = 1;
  return ACC_OK;
}

/* Environment of the backend: wait phases (bounded: the checks of a phase run at most every
 * SHM_CHECK_PERIOD_S, and a phase must end for the futex sleep's own checks to run) and the
 * rendezvous timeout. */
static acc_result read_env(shm_be *s) {
  static const char *const names[2] = {"ACCELERATE_SHM_SPIN_US", "ACCELERATE_SHM_YIELD_US"};
  double *dst[2] = {&s->spin_s, &s->yield_s};
  for (int i = 0; i < 2; i++) {
    long us = 0;
    int set = 0;
    ACC_CHECK(acc__env_int(names[i], &us, &set));
    if (!set) continue;
    if (us > SHM_MAX_PHASE_US)
      return acc__error(ACC_ERR_INVALID_ARGUMENT,
                        "rank %d: %s=%ld is out of range: expected 0..%ld microseconds (longer "
                        "waits sleep on a futex)",
                        s->me, names[i], us, SHM_MAX_PHASE_US);
    *dst[i] = (double)us * 1e-6;
  }
  long smin = SHM_DEFAULT_STREAM_MIN;
  int sset = 0;
  ACC_CHECK(acc__env_int("ACCELERATE_SHM_STREAM_MIN_BYTES", &smin, &sset));
  s->stream_min = (size_t)smin;
  double t = SHM_RDZV_TIMEOUT_S;
  int set = 0;
  ACC_CHECK(acc__env_rdzv_timeout(&t, &set, &s->rdzv_var));
  if (!set && s->timeout_s < t) {
    t = s->timeout_s; /* never wait longer than the collective timeout either */
    s->rdzv_var = "ACCELERATE_TIMEOUT";
  }
  s->rdzv_timeout_s = t;
  return ACC_OK;
}

/* The unpredictable part of the name: exported by the launcher, or published by rank 0 in the
 * runtime directory. Rank 0 also reclaims what dead jobs left. */
static acc_result setup_token(shm_be *s, const char *job_id) {
  int set = 0;
  ACC_CHECK(acc__rdzv_env_token(s->token, sizeof s->token, &set));
  if (set) {
    if (s->me == 0) acc__rdzv_reclaim(NULL);
    return ACC_OK;
  }
  char dir[PATH_MAX];
  ACC_CHECK(acc__rdzv_runtime_dir(dir, sizeof dir));
  acc__rdzv_token_path(s->token_path, sizeof s->token_path, dir, job_id);
  if (s->me != 0) return ACC_OK;
  acc__rdzv_reclaim(dir);
  ACC_CHECK(acc__rdzv_publish_token(s->token_path, s->token, sizeof s->token));
  s->token_published = 1;
  return ACC_OK;
}

acc_result acc__backend_shm_create(acc__backend **out, const acc__proc_info *info) {
  if (!out || !info || !info->job_id)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc__backend_shm_create: NULL argument");
  *out = NULL;
  if (info->size < 1 || info->rank < 0 || info->rank >= info->size)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "shm backend: rank %d is not in 0..%d", info->rank,
                      info->size - 1);
  shm_be *s = acc__calloc(1, sizeof *s);
  if (!s) return ACC_ERR_NOMEM;
  s->base.ops = &shm_ops;
  s->base.rank = info->rank;
  s->base.size = info->size;
  s->base.op_name = "joining the process group";
  s->n = info->size;
  s->me = info->rank;
  if (info->machine_group) { /* one machine's group inside the hierarchical backend (hier.c):
                              * consecutive ranks per machine, checked there */
    s->rank_base = info->machine_rank * info->size;
    snprintf(s->where, sizeof s->where, " on machine %d", info->machine_rank);
  }
  s->timeout_s = info->timeout_s > 0 ? info->timeout_s : 1800.0;
  s->board_fd = -1;
  s->rdzv_t0 = acc__now();
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  int enough_cores = ncpu > 0 && ncpu >= info->local_size;
  s->spin_s = enough_cores ? 20e-6 : 1e-6;
  s->yield_s = enough_cores ? 2e-3 : 200e-6;
  acc_result rc = read_env(s);
  if (rc == ACC_OK) { /* all_reduce's tile and source pointers (shm_coll.c) */
    s->tile = acc__malloc(ACC__SHM_REDUCE_TILE);
    s->rsrc = acc__malloc((size_t)s->n * sizeof *s->rsrc);
    s->rdst = acc__malloc((size_t)s->n * sizeof *s->rdst);
    if (!s->tile || !s->rsrc || !s->rdst)
      rc = acc__error(ACC_ERR_NOMEM, "rank %d: cannot allocate the shm backend's buffers", s->me);
  }
  if (rc == ACC_OK) {
    int nudge = 0, set = 0;
    rc = acc__env_bool("ACCELERATE_SHM_NUDGE", &nudge, &set);
    s->can_nudge = set && nudge && enough_cores && ncpu > 1;
  }
  if (rc == ACC_OK) rc = acc__hang_report_env(&s->hang_s);
  if (rc == ACC_OK) {
    s->board_fd = acc__board_open();
    rc = setup_token(s, info->job_id);
  }
  if (rc == ACC_OK) {
    if (s->me == 0) {
      make_name(s, info->job_id);
      rc = create_segment(s);
    } else {
      rc = attach_segment(s, info->job_id);
    }
  }
  if (rc == ACC_OK) {
    acc__shm_ctrl *c = &s->ctrl[s->me];
    atomic_store(&c->pid, (int32_t)getpid());
    acc__shm_cma_publish(s);
    atomic_store(&c->registered, 1);
    s->joining = 1;
    rc = acc__shm_step(s); /* everyone attached */
    s->joining = 0;
  }
  if (s->me == 0 && s->map) {
    shm_unlink(s->name); /* from now on no /dev/shm entry exists, whatever happens */
    s->unlinked = 1;
  }
  if (s->token_published) { /* the others have read it (or the rendezvous failed) */
    acc__rdzv_remove_token(s->token_path, s->token);
    s->token_published = 0;
  }
  if (rc == ACC_OK) rc = acc__shm_cma_agree(s);
  if (rc == ACC_OK) acc__shm_algo_load(s);
  if (rc != ACC_OK) {
    shm_destroy(&s->base);
    return rc;
  }
  s->base.op_name = NULL;
  static atomic_int armed;
  if (!atomic_exchange(&armed, 1)) atexit(last_words);
  atomic_store(&g_live, s);
  *out = &s->base;
  return ACC_OK;
}
