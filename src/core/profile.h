/* The step profiler's span macro, for library code. Not API.
 *
 *   ACC_PROF_SCOPE(ACC_PROF_COMM, "all_reduce");         at the top of a function
 *   ACC_PROF_SCOPE_ARG(ACC_PROF_COMM, "bucket", index);  with one integer argument
 *
 * records the time from that line to the end of the enclosing block (the span ends when the
 * block is left, by return or otherwise). Off (the default), a span costs one predictable
 * branch where it opens and one where it closes, and never allocates. name must be a string
 * literal (its pointer is kept). */
#ifndef ACC_OBS_PROFILE_H
#define ACC_OBS_PROFILE_H

enum {
  ACC_PROF_DATA = 0,
  ACC_PROF_COMM,
  ACC_PROF_OPTIM,
  ACC_PROF_CKPT,
  ACC_PROF_OTHER,
  ACC_PROF_NCAT
};

typedef struct acc__prof_span {
  double t0; /* 0: not recording */
  const char *name;
  long arg;
  int cat;
} acc__prof_span;

extern int acc__prof_on; /* set while the profiler records */

double acc__prof_open(void); /* clock, and one level deeper on this thread */
void acc__prof_record(acc__prof_span *s);

static inline acc__prof_span acc__prof_begin(int cat, const char *name, long arg) {
  acc__prof_span s = {0.0, name, arg, cat};
  if (__builtin_expect(__atomic_load_n(&acc__prof_on, __ATOMIC_RELAXED), 0))
    s.t0 = acc__prof_open();
  return s;
}

static inline void acc__prof_end(acc__prof_span *s) {
  if (__builtin_expect(s->t0 != 0.0, 0)) acc__prof_record(s);
}

#define ACC_PROF_CAT2_(a, b) a##b
#define ACC_PROF_CAT_(a, b) ACC_PROF_CAT2_(a, b)
#define ACC_PROF_SCOPE_ARG(cat, name, arg)                                                     \
  __attribute__((cleanup(acc__prof_end))) acc__prof_span ACC_PROF_CAT_(acc__span_, __LINE__) = \
      acc__prof_begin((cat), (name), (long)(arg))
#define ACC_PROF_SCOPE(cat, name) ACC_PROF_SCOPE_ARG(cat, name, -1)

#endif
