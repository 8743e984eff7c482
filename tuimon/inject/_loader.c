/* The library `tuimon inject` loads into a running CPython (3.10-3.13) through a ptrace injector
 * (pyinjector). Its constructor runs on a thread of the target that was stopped wherever it was,
 * perhaps inside the interpreter or malloc, so it runs no Python: Py_AddPendingCall, which needs
 * neither the GIL nor a thread state, and one short thread (below). The interpreter then calls run() on its main thread, between
 * two bytecodes, holding the GIL: there it is safe to run Python.
 *
 * run() reads the bootstrap beside this file (same name, ".py" for ".so"), and runs it only if it
 * is a regular file of this process's effective user, writable by nobody else (the injector wrote
 * it, mode 0600, in a private folder). Anything missing (not CPython, no interpreter yet, no file)
 * and nothing happens: the process goes on untouched.
 *
 * A pending call added from a thread other than the main one does not wake the main thread on
 * CPython 3.10-3.12 here (3.9 too, python/cpython#95820): the main thread sees it only when it next takes the GIL
 * back, which a torch loop does at every op but a pure-Python loop never does. So the constructor
 * also starts one short thread that takes the GIL once and gives it back (PyGILState_Ensure and
 * Release, the embedding API): asking for the GIL makes the main thread stop at its next bytecode
 * boundary, where it runs its pending calls first.
 *
 * Python's symbols are looked up at run time (dlsym), not linked: a process that is not CPython is
 * never broken by an undefined symbol (a bash that loaded a library linked against libpython died
 * of exit 127). No Python.h: only these five functions, whose C signatures are stable from 3.10 on.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef int (*pending_fn)(void *);
typedef int (*add_pending_call_t)(pending_fn, void *);
typedef int (*run_string_t)(const char *, void *); /* PyRun_SimpleStringFlags(str, PyCompilerFlags *) */
typedef int (*is_initialized_t)(void);
typedef int (*gil_ensure_t)(void);      /* PyGILState_Ensure: returns PyGILState_STATE, an enum */
typedef void (*gil_release_t)(int);     /* PyGILState_Release(PyGILState_STATE) */

#define MAX_BOOT 65536

static char boot_path[PATH_MAX];
static run_string_t run_string;
static gil_ensure_t gil_ensure;
static gil_release_t gil_release;
static is_initialized_t initialized;

static int run(void *unused) {
    (void)unused;
    int fd = open(boot_path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct stat st;
    char *code = NULL;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() && !(st.st_mode & 022) &&
        st.st_size > 0 && st.st_size < MAX_BOOT && (code = malloc((size_t)st.st_size + 1)) != NULL) {
        ssize_t got = 0, n;
        while (got < st.st_size && (n = read(fd, code + got, (size_t)(st.st_size - got))) > 0)
            got += n;
        code[got] = '\0';
        if (got != st.st_size) {
            free(code);
            code = NULL;
        }
    }
    close(fd);
    if (code != NULL) {
        run_string(code, NULL); /* the bootstrap catches everything itself; returns -1 only if it could not */
        free(code);
    }
    return 0; /* never an error: a pending call that fails raises into whatever the main thread runs */
}

static void *nudge(void *unused) {
    (void)unused;
    /* (not once the interpreter is finalizing: PyGILState_Ensure would then exit this thread or, late
     * enough, fail; the check narrows that window, nothing can close it from outside the interpreter) */
    if (initialized())
        gil_release(gil_ensure()); /* the request for the GIL is what wakes the main thread */
    return NULL;
}

static void start_nudge(void) {
    pthread_attr_t attr;
    pthread_t thread;
    if (gil_ensure == NULL || gil_release == NULL || pthread_attr_init(&attr) != 0)
        return;
    if (pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0)
        pthread_create(&thread, &attr, nudge, NULL); /* none started: the call waits for the next GIL handoff */
    pthread_attr_destroy(&attr);
}

__attribute__((constructor)) static void tuimon_loader(void) {
    Dl_info info;
    if (!dladdr((void *)&tuimon_loader, &info) || info.dli_fname == NULL)
        return;
    size_t n = strlen(info.dli_fname);
    if (n < 3 || n >= sizeof boot_path || strcmp(info.dli_fname + n - 3, ".so") != 0)
        return;
    memcpy(boot_path, info.dli_fname, n - 3);
    memcpy(boot_path + n - 3, ".py", 4);
    add_pending_call_t add = (add_pending_call_t)dlsym(RTLD_DEFAULT, "Py_AddPendingCall");
    is_initialized_t ready = initialized = (is_initialized_t)dlsym(RTLD_DEFAULT, "Py_IsInitialized");
    run_string = (run_string_t)dlsym(RTLD_DEFAULT, "PyRun_SimpleStringFlags");
    gil_ensure = (gil_ensure_t)dlsym(RTLD_DEFAULT, "PyGILState_Ensure");
    gil_release = (gil_release_t)dlsym(RTLD_DEFAULT, "PyGILState_Release");
    if (add == NULL || ready == NULL || run_string == NULL || !ready())
        return;
    if (add(run, NULL) == 0)
        start_nudge();
}
