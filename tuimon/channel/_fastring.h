/* What the C files of the _fastring extension share: the record layout, the ring writer and the
 * clock. _fastring.c: the ring writer, tuimon.range, the reader's unpacking; _phases.c: the step's
 * phase clock (probe/anatomy.py); _sampler.c: samples of the main thread's stack (probe/sampler.py). */
#ifndef TUIMON_FASTRING_H
#define TUIMON_FASTRING_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

/* layout.RECORD, "<BBHIIIqqdQ": 48 bytes, naturally aligned, little-endian hosts only. */
typedef struct {
    uint8_t kind;
    uint8_t depth;
    uint16_t flags;
    uint32_t name_id;
    uint32_t tid;
    uint32_t step;
    int64_t t0;
    int64_t t1;
    double value;
    uint64_t seq;
} Record;
_Static_assert(sizeof(Record) == 48, "layout.RECORD is 48 bytes");
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the segment layout is little-endian"
#endif

/* layout.RANGE, STEP, DATA_WAIT, COUNT, PHASE, STEP_VALUE (a test checks they agree) */
#define KIND_RANGE 1
#define KIND_STEP 2
#define KIND_DATA_WAIT 3
#define KIND_COUNT 4
#define KIND_PHASE 5
#define KIND_STEP_VALUE 6
#define KIND_MAX 9 /* layout.KINDS are 1..KIND_MAX (a test checks they agree) */

static inline int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* time.monotonic_ns() reads the same clock */
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* This thread's OS thread id (each C file caches its own copy). */
static _Thread_local uint32_t t_tid;

static inline uint32_t thread_id(void) {
    if (!t_tid)
        t_tid = (uint32_t)syscall(SYS_gettid); /* threading.get_native_id() on Linux */
    return t_tid;
}

/* ---- RingWriter ----------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    Py_buffer view;
    int has_view;
    char *ring;
    uint64_t mask;
    uint64_t head;
    uint64_t *head_ptr;
    uint64_t *steps_ptr;     /* the header's completed steps */
    uint64_t *heartbeat_ptr; /* the header's heartbeat, or NULL */
    int enabled;
    PyObject *error; /* str or None */
} RingWriter;

static inline void ring_append(RingWriter *w, uint8_t kind, int depth, uint32_t name_id, uint32_t tid,
                               uint32_t step, int64_t t0, int64_t t1, double value) {
    uint64_t h = w->head;
    Record *r = (Record *)(w->ring + (h & w->mask) * sizeof(Record));
    Record rec = {kind, (uint8_t)(depth < 0 ? 0 : depth > 255 ? 255 : depth), 0, name_id, tid, step,
                  t0, t1, value, h};
    memcpy(r, &rec, sizeof rec);
    w->head = ++h;
    __atomic_store_n(w->head_ptr, h, __ATOMIC_RELEASE);
}

/* The header's completed steps and heartbeat (the step boundary). */
static inline void ring_publish_steps(RingWriter *w, uint64_t steps, int64_t now) {
    __atomic_store_n(w->steps_ptr, steps, __ATOMIC_RELAXED);
    if (w->heartbeat_ptr)
        __atomic_store_n(w->heartbeat_ptr, (uint64_t)now, __ATOMIC_RELAXED);
}

/* The step a record made now belongs to: the header's completed steps + 1. */
static inline uint32_t current_step(RingWriter *w) {
    return (uint32_t)(__atomic_load_n(w->steps_ptr, __ATOMIC_RELAXED) + 1);
}

extern PyTypeObject RingWriterType;
int ranges_depth(void);                  /* _fastring.c: this thread's range depth */
int phases_add_type(PyObject *m);        /* _phases.c */
int phases_top(PyObject *o);             /* _phases.c: the innermost open phase, -1 if o is not a Phases */
int sampler_add_functions(PyObject *m);  /* _sampler.c */
int exitwatch_add_functions(PyObject *m); /* _exitwatch.c */

#endif
