/* The step profiler: spans recorded per thread while on, written as Chrome trace events plus a
 * summary (share of the time in data / compute / communication / optimizer / checkpoint).
 * ACCELERATE_PROFILE=DIR starts it when the library is loaded and writes the files at exit. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/env.h"
#include "core/log.h"
#include "core/fs.h"
#include "core/profile.h"

int acc__prof_on;

typedef struct event {
  const char *name;
  double t0, t1;
  long arg;
  int cat, depth;
} event;

#define CHUNK_EVENTS 4096

typedef struct chunk {
  struct chunk *next;
  size_t n;
  event ev[CHUNK_EVENTS];
} chunk;

typedef struct thread_buf {
  struct thread_buf *next;
  pthread_mutex_t mu; /* uncontended except against the writer */
  long tid;
  unsigned generation; /* the recording session this buffer belongs to */
  int depth;
  chunk *head, *tail;
} thread_buf;

static pthread_mutex_t prof_mu = PTHREAD_MUTEX_INITIALIZER;
static thread_buf *threads; /* every buffer ever made (kept: threads may still hold them) */
static unsigned generation; /* bumped by each start */
static char prof_dir[4096];
static double t_start;
static long main_tid;
static __thread thread_buf *my_buf;

static const char *cat_names[ACC_PROF_NCAT] = {"data", "communication", "optimizer", "checkpoint",
                                               "other"};

static long gettid_(void) { return (long)syscall(SYS_gettid); }

static thread_buf *get_buf(void) {
  thread_buf *b = my_buf;
  if (b) return b;
  b = calloc(1, sizeof *b);
  if (!b) return NULL;
  pthread_mutex_init(&b->mu, NULL);
  b->tid = gettid_();
  pthread_mutex_lock(&prof_mu);
  b->generation = generation;
  b->next = threads;
  threads = b;
  pthread_mutex_unlock(&prof_mu);
  my_buf = b;
  return b;
}

double acc__prof_open(void) {
  thread_buf *b = get_buf();
  if (b) b->depth++;
  return acc__now();
}

void acc__prof_record(acc__prof_span *s) {
  double t1 = acc__now();
  thread_buf *b = get_buf();
  if (!b) return;
  int depth = b->depth > 0 ? --b->depth : 0;
  double start;
  __atomic_load(&t_start, &start, __ATOMIC_ACQUIRE);
  /* stopped (or restarted) meanwhile */
  if (!__atomic_load_n(&acc__prof_on, __ATOMIC_ACQUIRE) || s->t0 < start) return;
  pthread_mutex_lock(&b->mu);
  if (b->generation != generation) { /* a buffer left from an earlier session */
    for (chunk *c = b->head, *n; c; c = n) {
      n = c->next;
      free(c);
    }
    b->head = b->tail = NULL;
    b->generation = generation;
  }
  if (!b->tail || b->tail->n == CHUNK_EVENTS) {
    chunk *c = malloc(sizeof *c);
    if (!c) {
      pthread_mutex_unlock(&b->mu);
      return;
    }
    c->next = NULL;
    c->n = 0;
    if (b->tail)
      b->tail->next = c;
    else
      b->head = c;
    b->tail = c;
  }
  b->tail->ev[b->tail->n++] = (event){s->name, s->t0, t1, s->arg, s->cat, depth};
  pthread_mutex_unlock(&b->mu);
}

int acc_profile_active(void) { return __atomic_load_n(&acc__prof_on, __ATOMIC_ACQUIRE); }

acc_result acc_profile_start(const char *dir) {
  if (!dir || !*dir)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_profile_start: dir is NULL or empty");
  if (strlen(dir) + 64 >= sizeof prof_dir)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "acc_profile_start: directory name too long: %s",
                      dir);
  if (acc__prof_on)
    return acc__error(ACC_ERR_INVALID_USAGE, "acc_profile_start: the profiler is already on (%s)",
                      prof_dir);
  ACC_CHECK(acc__error_context(acc__mkdirs(dir), "acc_profile_start"));
  pthread_mutex_lock(&prof_mu);
  snprintf(prof_dir, sizeof prof_dir, "%s", dir);
  generation++;
  double now = acc__now();
  __atomic_store(&t_start, &now, __ATOMIC_RELEASE);
  main_tid = gettid_();
  pthread_mutex_unlock(&prof_mu);
  if (my_buf) my_buf->depth = 0;
  __atomic_store_n(&acc__prof_on, 1, __ATOMIC_RELEASE);
  return ACC_OK;
}

/* ---- writing --------------------------------------------------------------------------------- */

typedef struct name_stat {
  const char *name;
  int cat;
  long count;
  double total;
} name_stat;

static void add_stat(name_stat *st, size_t *n, size_t cap, const event *e) {
  for (size_t i = 0; i < *n; i++)
    if (st[i].name == e->name || strcmp(st[i].name, e->name) == 0) {
      st[i].count++;
      st[i].total += e->t1 - e->t0;
      return;
    }
  if (*n < cap) st[(*n)++] = (name_stat){e->name, e->cat, 1, e->t1 - e->t0};
}

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20)
      fprintf(f, "\\u%04x", *s);
    else
      fputc(*s, f);
  }
  fputc('"', f);
}

acc_result acc_profile_stop(void) {
  if (!acc__prof_on) return ACC_OK;
  __atomic_store_n(&acc__prof_on, 0, __ATOMIC_RELEASE);
  double t_end = acc__now();
  int rank = acc__obs_rank();
  char path[4200], spath[4200];
  snprintf(path, sizeof path, "%s/trace.rank%d.json", prof_dir, rank);
  snprintf(spath, sizeof spath, "%s/summary.rank%d.txt", prof_dir, rank);
  FILE *f = fopen(path, "w");
  if (!f) return acc__error(ACC_ERR_IO, "profiler: cannot write \"%s\": %s", path, strerror(errno));
  double busy[ACC_PROF_NCAT] = {0}, first = INFINITY, last = -INFINITY;
  name_stat stats[64];
  size_t nstats = 0;
  long nevents = 0;
  fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
  fprintf(f,
          "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"rank "
          "%d\"}}",
          rank, rank);
  pthread_mutex_lock(&prof_mu);
  for (thread_buf *b = threads; b; b = b->next) {
    pthread_mutex_lock(&b->mu);
    if (b->generation == generation) {
      fprintf(f,
              ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%ld,\"args\":{\"name\":"
              "\"%s\"}}",
              rank, b->tid, b->tid == main_tid ? "main" : "worker");
      for (chunk *c = b->head; c; c = c->next)
        for (size_t i = 0; i < c->n; i++) {
          const event *e = &c->ev[i];
          fprintf(f, ",\n{\"name\":");
          json_string(f, e->name);
          fprintf(f, ",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%ld",
                  cat_names[e->cat], (e->t0 - t_start) * 1e6, (e->t1 - e->t0) * 1e6, rank, b->tid);
          if (e->arg >= 0) fprintf(f, ",\"args\":{\"index\":%ld}", e->arg);
          fputc('}', f);
          nevents++;
          if (b->tid == main_tid) {
            if (e->depth == 0) busy[e->cat] += e->t1 - e->t0;
            first = e->t0 < first ? e->t0 : first;
            last = e->t1 > last ? e->t1 : last;
            add_stat(stats, &nstats, sizeof stats / sizeof *stats, e);
          }
        }
    }
    for (chunk *c = b->head, *n; c; c = n) {
      n = c->next;
      free(c);
    }
    b->head = b->tail = NULL;
    pthread_mutex_unlock(&b->mu);
  }
  pthread_mutex_unlock(&prof_mu);
  fprintf(f, "\n]}\n");
  int bad = ferror(f);
  if (fclose(f) != 0 || bad) return acc__error(ACC_ERR_IO, "profiler: writing \"%s\" failed", path);

  /* Summary over the steps: from the first span to the end of the last one of the thread that
   * started the profiler (setup before and work after are left out); the time in its top-level
   * spans by category, and the rest is compute. */
  if (!(first <= last)) first = t_start, last = t_end;
  double wall = last - first, spent = 0;
  for (int c = 0; c < ACC_PROF_NCAT; c++) spent += busy[c];
  double compute = wall > spent ? wall - spent : 0;
  char text[4096];
  size_t o = 0;
#define OUT(...) o += (size_t)snprintf(text + o, o < sizeof text ? sizeof text - o : 0, __VA_ARGS__)
  OUT("profile of rank %d: %.3f s, %ld spans (%s)\n", rank, wall, nevents, path);
  double share = wall > 0 ? 100.0 / wall : 0;
  OUT("  data           %6.1f%%  %9.3f s\n", busy[ACC_PROF_DATA] * share, busy[ACC_PROF_DATA]);
  OUT("  compute        %6.1f%%  %9.3f s\n", compute * share, compute);
  OUT("  communication  %6.1f%%  %9.3f s\n", busy[ACC_PROF_COMM] * share, busy[ACC_PROF_COMM]);
  OUT("  optimizer      %6.1f%%  %9.3f s\n", busy[ACC_PROF_OPTIM] * share, busy[ACC_PROF_OPTIM]);
  OUT("  checkpoint     %6.1f%%  %9.3f s\n", busy[ACC_PROF_CKPT] * share, busy[ACC_PROF_CKPT]);
  if (busy[ACC_PROF_OTHER] > 0)
    OUT("  other          %6.1f%%  %9.3f s\n", busy[ACC_PROF_OTHER] * share, busy[ACC_PROF_OTHER]);
  for (size_t i = 0; i < nstats; i++)
    OUT("  span %-24s %8ld calls  %10.3f ms total  %10.1f us mean\n", stats[i].name, stats[i].count,
        stats[i].total * 1e3, stats[i].total * 1e6 / (double)stats[i].count);
#undef OUT
  if (o >= sizeof text) o = sizeof text - 1;
  FILE *sf = fopen(spath, "w");
  if (!sf)
    return acc__error(ACC_ERR_IO, "profiler: cannot write \"%s\": %s", spath, strerror(errno));
  fwrite(text, 1, o, sf);
  if (fclose(sf) != 0) return acc__error(ACC_ERR_IO, "profiler: writing \"%s\" failed", spath);
  acc__log(ACC_LOG_INFO, "%.*s", (int)o, text);
  return ACC_OK;
}

static int from_env; /* started by ACCELERATE_PROFILE: a process without spans (the launcher
                      * itself) writes nothing */

static long recorded_events(void) {
  long n = 0;
  pthread_mutex_lock(&prof_mu);
  for (thread_buf *b = threads; b; b = b->next) {
    pthread_mutex_lock(&b->mu);
    if (b->generation == generation)
      for (chunk *c = b->head; c; c = c->next) n += (long)c->n;
    pthread_mutex_unlock(&b->mu);
  }
  pthread_mutex_unlock(&prof_mu);
  return n;
}

static void stop_at_exit(void) {
  if (!acc__prof_on) return;
  if (from_env && recorded_events() == 0) {
    acc__prof_on = 0;
    return;
  }
  if (acc_profile_stop() != ACC_OK)
    fprintf(stderr, "accelerate: ACCELERATE_PROFILE: %s\n", acc_last_error());
}

__attribute__((constructor)) static void start_from_env(void) {
  const char *dir = acc__env_str("ACCELERATE_PROFILE");
  if (!dir || !*dir) return;
  if (acc_profile_start(dir) != ACC_OK) {
    fprintf(stderr, "accelerate: ACCELERATE_PROFILE=\"%s\": %s (profiler off)\n", dir,
            acc_last_error());
    return;
  }
  from_env = 1;
  atexit(stop_at_exit);
}
