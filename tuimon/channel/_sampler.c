/* Samples of the main thread's Python stack, HZ a second, asked for by a native thread that never
 * takes the GIL. Each period it asks the interpreter for a pending call (Py_AddPendingCall needs no
 * GIL), which the main thread runs at its next check between bytecodes: within microseconds while it
 * runs Python, and the callback notes where (the innermost frame not tuimon's, torch's or the standard
 * library's: the job's own code, or an installed library's with the job's own frame that led there, by
 * the rules of probe/present.py line_rules), the innermost frame and the open phase.
 * When the call has not run LATE_NS later and the main thread ran on a CPU meanwhile (its CPU clock) or
 * sleeps, it is inside a native call (a torch op, a copy, a sleep, a wait) and would run the call
 * only at its next check, wherever that is: so the request goes
 * stale, and a byte on a pipe (saying whether the main thread sleeps) wakes probe/sampler.py's
 * thread, which reads the main thread's stack from outside (the GIL is free while the call runs: no
 * hand-off on the loop) at the line of the call.
 * Until the stale call has run, each period goes to that thread. probe/sampler.py says more.
 *
 * The callback holds the GIL, never raises (an error is cleared: a raised one would surface in the
 * job) and keeps only code objects (never frames, which would keep the job's locals alive). Pending
 * calls run on the main thread only: a loop on another thread is sampled from outside altogether. */
#include "_fastring.h"
#include <fcntl.h>
#include <pthread.h>

/* Until Python 3.13, a pending call added by a thread other than the main one does not set the
 * interpreter's "look between bytecodes" flag (its eval breaker): the main thread would notice the
 * call only when it next gives up the GIL. So the flag is set here, as the interpreter's own signal
 * handling sets it (an atomic store). That needs CPython's internal header; without it the sampler
 * is not used (probe/sampler.py samples from outside instead): PROMPT says which. */
#if PY_VERSION_HEX >= 0x030D0000
#define PROMPT 1
#define wake_main() ((void)0)
#elif PY_VERSION_HEX >= 0x030A0000 && defined(__has_include)
#if __has_include("internal/pycore_interp.h")
#define Py_BUILD_CORE 1
#undef _PyGC_FINALIZED
#include "internal/pycore_interp.h"
#undef Py_BUILD_CORE
#define PROMPT 1
static inline void wake_main(void) {
    _Py_atomic_store_relaxed(&PyInterpreterState_Main()->ceval.eval_breaker, 1);
}
#endif
#endif
#ifndef PROMPT
#define PROMPT 0
#define wake_main() ((void)0)
#endif

#define SAMPLES 512

#define LATE_NS 1000000 /* a request not run by then: the main thread is inside a native call... */
#define PREEMPTED_MAX 20 /* ...unless it waited for a core (little CPU time meanwhile): LATE_NS more, this often */

#define CONTEXT_FRAMES 200 /* frames walked out from a library's line to find the job's own (sampler.py) */

/* a frame's code: the job's own, an installed library's, passed through; the import system's (a library's
 * line under an import is not named, the line that imports it is: probe/sampler.py LineNames says why) */
enum { OWN, LIBRARY, SKIPPED, IMPORTING };
static PyObject *importing = NULL; /* "<frozen importlib" */

typedef struct {
    int64_t asked, taken;
    PyObject *own_code, *inner_code; /* strong references: the line named, the innermost frame's */
    PyObject *ctx_code;              /* the job's own frame that led to a library's line, or NULL */
    int own_line, inner_line, phase, ctx_line;
    int periods; /* the periods it stands for (1: those the main thread spent waiting for a core are not
                  * counted: the line it resumed at says nothing about them) */
} Sample;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static Sample samples[SAMPLES];
static int count;                /* samples waiting to be taken */
static int pending;              /* a request queued and not yet run */
static int stale;                /* ...which was sampled from outside instead: dropped when it runs */
static int skipped;              /* periods a request not stale waited (the main thread waited for a core) */
static int64_t asked_at;
static PyObject *skip = NULL, *installed = NULL, *stdlib = NULL; /* line_rules(): tuples of str */
static PyObject *phases = NULL;  /* the probe's Phases, or None */
static volatile int active;      /* the native thread runs while this is set */
static volatile int paused;
static int64_t period_ns;
static int wake_fd = -1;         /* a byte here: sample the main thread from outside */
static pid_t main_tid;
static pthread_t thread;
static int started;

static int starts_with(PyObject *file, PyObject *prefixes) {
    Py_ssize_t n = prefixes ? PyTuple_GET_SIZE(prefixes) : 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        Py_ssize_t hit = PyUnicode_Tailmatch(file, PyTuple_GET_ITEM(prefixes, k), 0, PY_SSIZE_T_MAX, -1);
        if (hit == 1)
            return 1;
        if (hit < 0)
            PyErr_Clear();
    }
    return 0;
}

static int holds(PyObject *file, PyObject *markers) {
    Py_ssize_t n = markers ? PyTuple_GET_SIZE(markers) : 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        Py_ssize_t at = PyUnicode_Find(file, PyTuple_GET_ITEM(markers, k), 0, PY_SSIZE_T_MAX, 1);
        if (at >= 0)
            return 1;
        if (at == -2)
            PyErr_Clear();
    }
    return 0;
}

/* probe/sampler.py LineNames.kind, the same rules in the same order. */
static int kind_of(PyCodeObject *code) {
    PyObject *file = code->co_filename;
    if (!PyUnicode_Check(file))
        return OWN;
    if (PyUnicode_GET_LENGTH(file) > 0 && PyUnicode_READ_CHAR(file, 0) == '<') {
        Py_ssize_t hit = importing ? PyUnicode_Tailmatch(file, importing, 0, PY_SSIZE_T_MAX, -1) : 0;
        if (hit < 0)
            PyErr_Clear();
        return hit == 1 ? IMPORTING : SKIPPED;
    }
    if (starts_with(file, skip))
        return SKIPPED;
    if (holds(file, installed))
        return LIBRARY;
    return starts_with(file, stdlib) ? SKIPPED : OWN;
}

/* kind_of per code object, remembered (a walk to a library line's context passes tens of frames a sample,
 * each a dozen prefix matches: 58 against 17 us a sample, 30 library frames deep; line_sampler_cost.py).
 * Direct-mapped; each entry holds its code object (never a frame), so its address is not reused while
 * remembered. Cleared when the rules change. With the GIL only. */
#define KINDS_KEPT 512
static PyObject *kept_code[KINDS_KEPT];
static unsigned char kept_kind[KINDS_KEPT];

static int kind_kept(PyCodeObject *code) {
    uintptr_t p = (uintptr_t)code;
    size_t at = ((p >> 4) ^ (p >> 13)) & (KINDS_KEPT - 1);
    if (kept_code[at] == (PyObject *)code)
        return kept_kind[at];
    int kind = kind_of(code);
    Py_XSETREF(kept_code[at], Py_NewRef((PyObject *)code));
    kept_kind[at] = (unsigned char)kind;
    return kind;
}

static void kinds_forget(void) {
    for (int k = 0; k < KINDS_KEPT; k++)
        Py_CLEAR(kept_code[k]);
}

/* The pending call, on the main thread with the GIL. */
static int sample_now(void *unused) {
    int64_t t = now_ns();
    pthread_mutex_lock(&lock);
    int64_t asked = asked_at;
    int dropped = stale || count >= SAMPLES || !active, periods = 1; /* (stopped: the interpreter may be exiting) */
    pending = stale = skipped = 0;
    pthread_mutex_unlock(&lock);
    PyFrameObject *f = dropped ? NULL : PyEval_GetFrame(); /* borrowed */
    if (!f)
        return 0;
    PyCodeObject *inner = PyFrame_GetCode(f);
    int inner_line = PyFrame_GetLineNumber(f);
    Py_INCREF(f);
    /* walked outward (strong references): the first frame not passed through is the line named; a
     * library's line goes on to the job's own frame, its context, CONTEXT_FRAMES frames at most */
    PyFrameObject *at = f;
    PyCodeObject *own_code = NULL, *ctx_code = NULL;
    int own_line = inner_line, ctx_line = 0, beyond = 0;
    while (at) {
        PyCodeObject *c = PyFrame_GetCode(at);
        int kind = kind_kept(c);
        if (kind == IMPORTING) { /* (the library's line found so far runs under an import: not named) */
            Py_CLEAR(own_code);
            own_line = inner_line;
            beyond = 0;
        } else if (kind != SKIPPED && !own_code) {
            own_code = (PyCodeObject *)Py_NewRef((PyObject *)c);
            own_line = PyFrame_GetLineNumber(at);
            if (kind == OWN) {
                Py_DECREF(c);
                break;
            }
        } else if (kind == OWN) {
            ctx_code = c;
            ctx_line = PyFrame_GetLineNumber(at);
            break;
        } else if (own_code && ++beyond >= CONTEXT_FRAMES) {
            Py_DECREF(c);
            break;
        }
        Py_DECREF(c);
        PyFrameObject *back = PyFrame_GetBack(at);
        Py_DECREF(at);
        at = back;
    }
    Py_XDECREF(at);
    int phase = phases && phases != Py_None ? phases_top(phases) : -1;
    if (PyErr_Occurred())
        PyErr_Clear();
    pthread_mutex_lock(&lock);
    if (count < SAMPLES) {
        Sample *s = &samples[count++];
        s->asked = asked;
        s->taken = t;
        s->inner_code = (PyObject *)inner;
        s->inner_line = inner_line;
        s->own_code = own_code ? (PyObject *)own_code : Py_NewRef((PyObject *)inner);
        s->own_line = own_line;
        s->ctx_code = (PyObject *)ctx_code;
        s->ctx_line = ctx_line;
        s->phase = phase;
        s->periods = periods;
        inner = NULL;
        own_code = NULL;
        ctx_code = NULL;
    }
    pthread_mutex_unlock(&lock);
    Py_XDECREF(inner);
    Py_XDECREF(own_code);
    Py_XDECREF(ctx_code);
    return 0;
}

static clockid_t main_cpu;       /* the main thread's CPU-time clock */

static int64_t main_cpu_ns(void) {
    struct timespec ts;
    if (clock_gettime(main_cpu, &ts) != 0)
        return -1;
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Is the main thread asleep ('S' or 'D' in /proc/self/task/TID/stat)? */
static int main_asleep(void) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)main_tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    char *end = strrchr(buf, ')'); /* (the command name may hold anything) */
    return end && end[1] == ' ' && (end[2] == 'S' || end[2] == 'D');
}

/* A period for the Python thread to sample from outside, as a byte that says how the main thread was
 * ('S' asleep, 'R' on a CPU): read here, on a thread that never takes the GIL (a /proc read of a
 * running thread costs ~0.2 ms on a VM: on the Python thread it held the GIL that long, each period). */
static void outside(int asleep) {
    if (wake_fd >= 0 && write(wake_fd, asleep ? "S" : "R", 1) < 0) { /* (the pipe is full: that thread is behind already) */
    }
}

/* How the main thread spent the time since `*cpu_then` (its CPU clock then, updated): asleep only
 * when it used less than half of `span_ns` on a CPU and /proc says it sleeps (the file is read only
 * then: each read of a running thread's stat costs ~0.1-0.2 ms on a VM). */
static int asleep_since(int64_t *cpu_then, int64_t span_ns) {
    int64_t cpu = main_cpu_ns();
    int ran = *cpu_then >= 0 && cpu >= 0 ? cpu - *cpu_then >= span_ns / 2 : 0;
    *cpu_then = cpu;
    return !ran && main_asleep();
}

static void *sampler_thread(void *unused) {
    struct timespec due;
    int64_t cpu_at_period = -1; /* the main thread's CPU clock at the last period sampled from outside */
    clock_gettime(CLOCK_MONOTONIC, &due);
    while (active) {
        int64_t next = (int64_t)due.tv_sec * 1000000000LL + due.tv_nsec + period_ns;
        int64_t now = now_ns();
        if (next < now) /* (asleep for longer than a period: no catching up) */
            next = now + period_ns;
        due.tv_sec = next / 1000000000LL;
        due.tv_nsec = next % 1000000000LL;
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, NULL);
        if (!active)
            break;
        if (paused)
            continue;
        int ask = 0, out = 0;
        pthread_mutex_lock(&lock);
        if (!pending) {
            pending = ask = 1;
            stale = skipped = 0;
            asked_at = now_ns();
        } else if (stale) { /* still inside the native call: this period from outside too */
            out = 1;
        } else { /* still waiting for a core: this period is not counted */
            skipped++;
        }
        pthread_mutex_unlock(&lock);
        if (out)
            outside(asleep_since(&cpu_at_period, period_ns));
        if (!ask)
            continue;
        if (Py_AddPendingCall(sample_now, NULL) < 0) { /* (the interpreter's queue is full) */
            pthread_mutex_lock(&lock);
            pending = 0;
            pthread_mutex_unlock(&lock);
            continue;
        }
        wake_main();
        int missed = 0, asleep = 0;
        for (int waits = 0; waits < PREEMPTED_MAX; waits++) {
            int64_t before = cpu_at_period = main_cpu_ns();
            struct timespec late = {0, LATE_NS};
            nanosleep(&late, NULL);
            asleep = asleep_since(&cpu_at_period, LATE_NS); /* (cpu_at_period: its CPU clock now) */
            int ran = before < 0 || cpu_at_period < 0 || cpu_at_period - before >= LATE_NS / 2;
            /* it ran (on a CPU) and did not take the call, or it sleeps: it is inside a native call;
             * runnable with little CPU meanwhile, it waits for a core: the call runs once it has one */
            int native_call = ran || asleep;
            pthread_mutex_lock(&lock);
            int still = pending && !stale;
            if (still && native_call)
                stale = missed = 1;
            pthread_mutex_unlock(&lock);
            if (!still || missed)
                break;
        }
        if (missed)
            outside(asleep);
    }
    return NULL;
}

/* In a forked child (a DataLoader worker) the thread is gone: the lock may have been held by it at the
 * fork, a pending call copied with the interpreter must sample nothing, and the child's copy of the
 * pipe's write end would keep the parent's reader from its end of file at exit (sample_stop). The
 * child's copies of the samples' code references are left (it never takes them). */
static void in_forked_child(void) {
    pthread_mutex_init(&lock, NULL);
    active = paused = started = 0;
    pending = stale = skipped = count = 0;
    if (wake_fd >= 0)
        close(wake_fd);
    wake_fd = -1;
}

/* The rules (probe/present.py line_rules): (skip prefixes, installed markers, stdlib prefixes), each a
 * tuple of str; () for none (every frame the job's own). */
static int set_rules(PyObject *rules) {
    Py_ssize_t n = PyTuple_Check(rules) ? PyTuple_GET_SIZE(rules) : -1;
    if (n != 0 && n != 3) {
        PyErr_SetString(PyExc_TypeError, "rules: () or (skip prefixes, installed markers, stdlib prefixes)");
        return -1;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *part = PyTuple_GET_ITEM(rules, k);
        if (!PyTuple_Check(part)) {
            PyErr_SetString(PyExc_TypeError, "rules: each a tuple of str");
            return -1;
        }
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(part); j++)
            if (!PyUnicode_Check(PyTuple_GET_ITEM(part, j))) {
                PyErr_SetString(PyExc_TypeError, "rules: each a tuple of str");
                return -1;
            }
    }
    if (!importing && !(importing = PyUnicode_InternFromString("<frozen importlib")))
        return -1;
    kinds_forget();
    Py_XSETREF(skip, n ? Py_NewRef(PyTuple_GET_ITEM(rules, 0)) : NULL);
    Py_XSETREF(installed, n ? Py_NewRef(PyTuple_GET_ITEM(rules, 1)) : NULL);
    Py_XSETREF(stdlib, n ? Py_NewRef(PyTuple_GET_ITEM(rules, 2)) : NULL);
    return 0;
}

/* sample_start(hz, main_native_id, rules, phases or None) -> the fd to read (a byte: sample the main
 * thread from outside), or -1 */
static PyObject *fr_sample_start(PyObject *m, PyObject *args) {
    double hz;
    int tid;
    PyObject *lib, *ph;
    int fds[2];
    if (!PyArg_ParseTuple(args, "diO!O", &hz, &tid, &PyTuple_Type, &lib, &ph))
        return NULL;
    if (started || hz <= 0)
        return PyLong_FromLong(-1);
    if (set_rules(lib) < 0)
        return NULL;
    main_tid = (pid_t)tid;
    if (pthread_getcpuclockid(pthread_self(), &main_cpu) != 0) /* (called on the main thread: probe/sampler.py) */
        return PyLong_FromLong(-1);
    static int fork_handled;
    if (!fork_handled && pthread_atfork(NULL, NULL, in_forked_child) != 0)
        return PyLong_FromLong(-1);
    fork_handled = 1;
    if (started || hz <= 0 || pipe2(fds, O_CLOEXEC) < 0)
        return PyLong_FromLong(-1);
    fcntl(fds[1], F_SETFL, O_NONBLOCK);
    Py_XSETREF(phases, Py_NewRef(ph));
    period_ns = (int64_t)(1e9 / hz);
    wake_fd = fds[1];
    active = 1;
    paused = 0;
    if (pthread_create(&thread, NULL, sampler_thread, NULL) != 0) {
        active = 0;
        close(fds[0]);
        close(fds[1]);
        wake_fd = -1;
        return PyLong_FromLong(-1);
    }
    started = 1;
    return PyLong_FromLong(fds[0]);
}

/* sample_library(rules): the rules change (torch imported later). */
static PyObject *fr_sample_library(PyObject *m, PyObject *rules) {
    if (set_rules(rules) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *fr_sample_pause(PyObject *m, PyObject *on) {
    paused = PyObject_IsTrue(on) == 1;
    Py_RETURN_NONE;
}

/* sample_stop(): the thread ends, waited for (at exit: no request may reach an interpreter being
 * torn down; it wakes within a period, LATE_NS * PREEMPTED_MAX at most after a request); then the
 * pipe's write end is closed, so that the reader (probe/sampler.py) reads its end of file and ends. */
static PyObject *fr_sample_stop(PyObject *m, PyObject *unused) {
    active = 0;
    if (started) { /* (not in a forked child: in_forked_child) */
        Py_BEGIN_ALLOW_THREADS
        pthread_join(thread, NULL);
        Py_END_ALLOW_THREADS
        started = 0;
    }
    if (wake_fd >= 0)
        close(wake_fd);
    wake_fd = -1;
    Py_RETURN_NONE;
}

/* sample_take() -> [(asked ns, taken ns, own code, own line, inner code, inner line, phase, periods,
 *                   context code or None, context line)] */
static PyObject *fr_sample_take(PyObject *m, PyObject *unused) {
    Sample taken[SAMPLES];
    pthread_mutex_lock(&lock);
    int n = count;
    memcpy(taken, samples, (size_t)n * sizeof(Sample));
    count = 0;
    pthread_mutex_unlock(&lock);
    PyObject *list = PyList_New(n);
    for (int k = 0; k < n; k++) {
        Sample *s = &taken[k];
        PyObject *row = list ? Py_BuildValue("(LLOiOiiiOi)", (long long)s->asked, (long long)s->taken, s->own_code,
                                             s->own_line, s->inner_code, s->inner_line, s->phase, s->periods,
                                             s->ctx_code ? s->ctx_code : Py_None, s->ctx_line) : NULL;
        Py_DECREF(s->own_code);
        Py_DECREF(s->inner_code);
        Py_XDECREF(s->ctx_code);
        if (list && !row)
            Py_CLEAR(list);
        if (list)
            PyList_SET_ITEM(list, k, row);
    }
    return list;
}

static PyMethodDef sampler_methods[] = {
    {"sample_start", fr_sample_start, METH_VARARGS,
     "sample_start(hz, main_native_id, rules, phases) -> the fd whose bytes ask for a sample from "
     "outside, or -1"},
    {"sample_library", fr_sample_library, METH_O, "sample_library(rules): how frames are told apart (probe/present.py line_rules)"},
    {"sample_pause", fr_sample_pause, METH_O, "sample_pause(bool): no requests while paused"},
    {"sample_stop", fr_sample_stop, METH_NOARGS, "sample_stop(): the thread ends, waited for; the pipe closes"},
    {"sample_take", fr_sample_take, METH_NOARGS, "sample_take() -> the samples taken since the last take"},
    {NULL}};

int sampler_add_functions(PyObject *m) {
    if (PyModule_AddIntConstant(m, "SAMPLE_PROMPT", PROMPT) < 0)
        return -1;
    return PyModule_AddFunctions(m, sampler_methods);
}
