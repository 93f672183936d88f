/* The table of every environment variable that libaccelerate and the `accelerate` CLI read or
 * set. Not API. Every read goes through the functions below, which find the variable in the table
 * and check its value against the table's type and range; docs/environment.md is generated from
 * the same table (tests/unit/test_env_table.sh fails when they differ). */
#ifndef ACC_ENV_H
#define ACC_ENV_H

#include <stdio.h>

#include "core/internal.h"

typedef enum acc__env_type {
  ACC__ENV_INT,    /* decimal integer within [min, max] */
  ACC__ENV_DOUBLE, /* finite decimal number within [min, max] */
  ACC__ENV_BOOL,   /* 1/0, true/false, yes/no, on/off, y/n, t/f (any case) */
  ACC__ENV_STRING, /* free text */
  ACC__ENV_ENUM    /* one of the '|'-separated choices (any case) */
} acc__env_type;

/* Who reads or sets a variable (a bit set). */
enum {
  ACC__ENV_LIB = 1,       /* the library reads it */
  ACC__ENV_CLI = 2,       /* the accelerate CLI reads it */
  ACC__ENV_LAUNCHER = 4,  /* accelerate launch (or acc_launch_function) sets it for the processes */
  ACC__ENV_EXTERNAL = 8   /* another launcher sets it (torchrun, mpirun, srun) */
};

typedef struct acc__env_var {
  const char *name;
  acc__env_type type;
  double min, max;     /* ACC__ENV_INT / ACC__ENV_DOUBLE: the accepted range, inclusive */
  const char *choices; /* ACC__ENV_ENUM: "a|b|c" */
  const char *def;     /* the default, as text ("" when unset means "not used") */
  int who;             /* ACC__ENV_* bits */
  const char *meaning;
} acc__env_var;

/* The table, in documentation order; *count receives its length. */
const acc__env_var *acc__env_table(size_t *count);
/* The row of name, or NULL when the table has none. */
const acc__env_var *acc__env_find(const char *name);

/* The raw value of a table variable (NULL when unset). For string variables and for code that
 * hands the text on unchanged; typed values use the readers of internal.h (acc__env_int,
 * acc__env_double, acc__env_bool), which check the table's range. */
const char *acc__env_str(const char *name);
/* An enum variable: *index receives the position of the value among the row's choices;
 * *was_set = 0 and *index untouched when unset or empty. */
/* The one bound of every join (ACCELERATE_RDZV_TIMEOUT, or its alias
 * ACCELERATE_RENDEZVOUS_TIMEOUT; both set to different values is an error). *out keeps its
 * value when neither is set; *name (may be NULL) gets the variable to name in messages. */
acc_result acc__env_rdzv_timeout(double *out, int *was_set, const char **name);
acc_result acc__env_enum(const char *name, int *index, int *was_set);

/* Parsers of one value against a row (used by the readers and by the unit tests). */
acc_result acc__env_parse_int(const acc__env_var *v, const char *text, long *out);
acc_result acc__env_parse_double(const acc__env_var *v, const char *text, double *out);

/* The table as the Markdown rows of docs/environment.md. */
void acc__env_print_markdown(FILE *out);
/* "name=value" for each table variable that is set (but PATH and HOME), one a line, each after
 * prefix; returns how many. */
int acc__env_print_set(FILE *out, const char *prefix);

#endif
