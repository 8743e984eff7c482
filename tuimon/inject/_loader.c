/* The library `tuimon inject` loads into a running CPython (3.10-3.13) through a ptrace injector
 * (pyinjector). Its constructor runs on a thread of the target that was stopped wherever it was,
 * perhaps inside the interpreter or malloc, so it does one thing: Py_AddPendingCall, which needs
 * neither the GIL nor a thread state. The interpreter then calls run() on its main thread, between
 * two bytecodes, holding the GIL: there it is safe to run Python.
 *
 * run() reads the bootstrap beside this file (same name, ".py" for ".so"), and runs it only if it
 * is a regular file of this process's effective user, writable by nobody else (the injector wrote
 * it, mode 0600, in a private folder). Anything missing (not CPython, no interpreter yet, no file)
 * and nothing happens: the process goes on untouched.
 *
 * Python's symbols are looked up at run time (dlsym), not linked: a process that is not CPython is
 * never broken by an undefined symbol (a bash that loaded a library linked against libpython died
 * of exit 127). No Python.h: only these three functions, whose C signatures are stable from 3.10 on.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef int (*pending_fn)(void *);
typedef int (*add_pending_call_t)(pending_fn, void *);
typedef int (*run_string_t)(const char *, void *); /* PyRun_SimpleStringFlags(str, PyCompilerFlags *) */
typedef int (*is_initialized_t)(void);

#define MAX_BOOT 65536

static char boot_path[PATH_MAX];
static run_string_t run_string;

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
    is_initialized_t ready = (is_initialized_t)dlsym(RTLD_DEFAULT, "Py_IsInitialized");
    run_string = (run_string_t)dlsym(RTLD_DEFAULT, "PyRun_SimpleStringFlags");
    if (add == NULL || ready == NULL || run_string == NULL || !ready())
        return;
    add(run, NULL);
}
