/* How the job ended, said by the process itself where Python no longer runs (issue 43 item 12).
 *
 * Python's atexit handlers never see the exit code (sys.exit(3) ends the interpreter, then main()
 * returns 3), and a signal whose default action ends the process runs no Python at all. So:
 * - glibc's on_exit() hands the status passed to exit() to its handler: the exit code;
 * - each signal asked for whose action is still the default (SIGTERM, SIGSEGV, ...; never one the
 *   job handles or ignores) gets a handler that says the signal and raises it again: installed with
 *   SA_RESETHAND, the default action is back when it runs, so the process still dies of it, as
 *   without tuimon.
 * Both write an EXIT record (layout.CTL_EXIT: when, how, value) into a mapping of the segment's
 * control page of their own (the probe's mmap may be gone by then), and only in the process that
 * asked (a forked DataLoader worker inherits the handlers and the mapping: getpid() tells).
 * Async-signal-safe: plain stores, getpid, clock_gettime, raise. */
#include "_fastring.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define EXIT_CODE 1
#define EXIT_SIGNAL 2

static char *volatile exit_page;  /* the control page, mapped MAP_SHARED */
static long exit_page_size;
static long exit_record_at;       /* the EXIT record's offset in it */
static volatile pid_t exit_pid;   /* the process that asked */
static int exit_registered;

static void exit_put(int how, int value) {
    char *page = exit_page;
    if (!page || getpid() != exit_pid)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t when = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    int32_t *fields = (int32_t *)(page + exit_record_at + 8);
    __atomic_store_n(&fields[0], (int32_t)how, __ATOMIC_RELAXED);
    __atomic_store_n(&fields[1], (int32_t)value, __ATOMIC_RELAXED);
    __atomic_store_n((int64_t *)(page + exit_record_at), when ? when : 1, __ATOMIC_RELEASE);  /* published last */
}

static void exit_status_seen(int status, void *arg) {
    (void)arg;
    exit_put(EXIT_CODE, status & 0xff);  /* (what the parent's wait() sees) */
}

static void exit_signal_seen(int sig) {
    int saved = errno;
    exit_put(EXIT_SIGNAL, sig);
    raise(sig);  /* blocked while this runs; the default action (back: SA_RESETHAND) ends the process after */
    errno = saved;
}

/* watch_exit(path, control_offset, record_offset, signals) -> the signals watched (a list) */
static PyObject *fr_watch_exit(PyObject *self, PyObject *args) {
    const char *path;
    long control_offset, record_offset;
    PyObject *signals;
    if (!PyArg_ParseTuple(args, "sllO", &path, &control_offset, &record_offset, &signals))
        return NULL;
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0 || control_offset < 0 || control_offset % page || record_offset < 0 || record_offset % 8 ||
        record_offset + 16 > page) {
        PyErr_SetString(PyExc_ValueError, "watch_exit: a control page at a page boundary, a record inside it");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(signals, "watch_exit: signals must be a sequence of ints");
    if (!seq)
        return NULL;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        Py_DECREF(seq);
        return PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
    }
    void *m = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)control_offset);
    close(fd);
    if (m == MAP_FAILED) {
        Py_DECREF(seq);
        return PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
    }
    char *old = exit_page;
    long old_size = exit_page_size;
    exit_record_at = record_offset;
    exit_page_size = page;
    exit_pid = getpid();
    exit_page = (char *)m;
    if (old)
        munmap(old, (size_t)old_size);
    if (!exit_registered) {
#if defined(__GLIBC__)
        if (on_exit(exit_status_seen, NULL) != 0) {
#else
        (void)exit_status_seen;  /* (no on_exit() outside glibc: the exit code stays unknown there) */
        if (0) {
#endif
            Py_DECREF(seq);
            PyErr_SetString(PyExc_OSError, "watch_exit: on_exit() refused");
            return NULL;
        }
        exit_registered = 1;
    }
    PyObject *watched = PyList_New(0);
    if (!watched) {
        Py_DECREF(seq);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        long sig = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if (sig == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            Py_DECREF(watched);
            return NULL;
        }
        struct sigaction now, sa;
        if (sig <= 0 || sig >= NSIG || sigaction((int)sig, NULL, &now) != 0)
            continue;
        if (now.sa_handler != exit_signal_seen &&
            ((now.sa_flags & SA_SIGINFO) || now.sa_handler != SIG_DFL))
            continue;  /* the job's own handler, or ignored: its choice, left alone */
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = exit_signal_seen;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESETHAND | SA_RESTART | SA_ONSTACK;
        if (sigaction((int)sig, &sa, NULL) != 0)
            continue;
        PyObject *n = PyLong_FromLong(sig);
        if (!n || PyList_Append(watched, n) < 0) {
            Py_XDECREF(n);
            Py_DECREF(seq);
            Py_DECREF(watched);
            return NULL;
        }
        Py_DECREF(n);
    }
    Py_DECREF(seq);
    return watched;
}

static PyMethodDef exitwatch_methods[] = {
    {"watch_exit", fr_watch_exit, METH_VARARGS,
     "watch_exit(path, control_offset, record_offset, signals) -> the signals watched: the exit status "
     "(on_exit) and those signals (default action only) written into the segment's EXIT record"},
    {NULL}};

int exitwatch_add_functions(PyObject *m) {
    return PyModule_AddFunctions(m, exitwatch_methods);
}
