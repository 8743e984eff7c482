/* The step's phase clock in C: exclusive time per phase of the loop thread, written to the ring as
 * PHASE records when the step closes. probe/anatomy.py documents what the phases are and who
 * calls what; phases_py.py is the same clock in Python (ring.py picks one, as for RingWriter).
 *
 * Why C: enter/exit run a few times a step, close once, each from wrappers around torch calls.
 * In a real training step the interpreter's caches are cold: measured in a DDP step on the CPU, a
 * Python enter or exit cost ~3 us and the step boundary ~20 us, ten times what a warm timeit
 * says, and the whole probe ~75 us a step on two H200s: more than 1% of a 4.3 ms step.
 *
 * Phases nest; time goes to the innermost open one, so a step's phases add up to its duration.
 * Calls from any thread but the loop's are ignored. Nothing here raises into the loop: a bad
 * argument is ignored (a failing ring disables itself, as for every record). GIL held throughout.
 */
#include "_fastring.h"

#define MAX_PHASES 16 /* anatomy.PHASES has 7 */
#define MAX_NEST 64   /* open phases tracked; deeper ones are counted, their time stays with the 64th */

typedef struct {
    PyObject_HEAD
    PyObject *dict; /* (instances carry Python attributes: anatomy.Anatomy's call sites) */
    RingWriter *ring;
    uint32_t ids[MAX_PHASES]; /* each phase's name id */
    int nphases;
    uint32_t sync_count_id;
    int sync_phase;
    long walks;          /* call-site walks per step at most */
    unsigned long loop;  /* the loop thread (threading.get_ident()) */
    uint8_t stack[MAX_NEST];
    int depth;           /* entries in stack; stack[0] is phase 0 ("other") and never leaves */
    int untracked;       /* entries beyond MAX_NEST */
    int64_t t;           /* when the time so far was last given to a phase */
    int64_t since;       /* when the innermost open phase became the innermost (entered, or an inner one left) */
    int64_t acc[MAX_PHASES];
    long syncs;
    long period;         /* walk the call site of every period-th sync */
    long countdown;
    int64_t walk_gap;    /* of the chosen syncs, about one walked per walk_gap ns: each with probability 1/every */
    int64_t window_at;   /* when the current walk_gap window began */
    long window_chosen;  /* syncs chosen in it: the next window's `every` */
    long every;
    uint64_t rng;        /* xorshift64 state (the Python twin draws the same numbers) */
    long owed;           /* syncs chosen for a walk since the last walk, not walked: the next walk counts them */
    PyObject *spans;     /* sync_spans: this step's syncs' (t0, t1), appended by synced() (a list, or None) */
} Phases;

/* (p->ring is NULL until __init__ ran: every call is then ignored) */
static inline int on_loop(Phases *p) { return p->ring && PyThread_get_thread_ident() == p->loop; }

/* An optional time argument: None or absent -> now. Returns 0 on a bad value (the call is ignored). */
static inline int time_arg(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t k, int64_t *t) {
    if (nargs <= k || args[k] == Py_None) {
        *t = now_ns();
        return 1;
    }
    long long v = PyLong_AsLongLong(args[k]);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    *t = v;
    return 1;
}

static inline int phase_arg(Phases *p, PyObject *o, int *phase) {
    long v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    *phase = (int)v;
    return v >= 0 && v < p->nphases;
}

/* Give the time since p->t to the innermost open phase. */
static inline void account(Phases *p, int64_t t) {
    p->acc[p->stack[p->depth - 1]] += t - p->t;
    p->t = t;
}

/* enter's and exit's (phase, t=None), from the loop thread: the time so far accounted. 0: ignore the call. */
static inline int phase_call(Phases *p, PyObject *const *args, Py_ssize_t nargs, int *phase) {
    int64_t t;
    if (nargs < 1 || !on_loop(p) || !phase_arg(p, args[0], phase) || !time_arg(args, nargs, 1, &t))
        return 0;
    account(p, t);
    return 1;
}

static int Phases_init(Phases *p, PyObject *args, PyObject *kw) {
    static char *names[] = {"ring", "ids", "sync_count_id", "sync_phase", "walks", "loop", "walk_gap", NULL};
    PyObject *ring, *ids;
    unsigned long sync_count_id, loop;
    int sync_phase;
    long walks;
    long long walk_gap = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOkilk|L", names, &ring, &ids, &sync_count_id, &sync_phase, &walks,
                                     &loop, &walk_gap))
        return -1;
    if (!PyObject_TypeCheck(ring, &RingWriterType)) {
        PyErr_SetString(PyExc_TypeError, "ring: a RingWriter");
        return -1;
    }
    PyObject *seq = PySequence_Fast(ids, "ids: a sequence of name ids");
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n < 1 || n > MAX_PHASES || sync_phase < 0 || sync_phase >= n || walks < 1) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "1..16 phases, sync_phase among them, walks >= 1");
        return -1;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        unsigned long v = PyLong_AsUnsignedLong(PySequence_Fast_GET_ITEM(seq, k));
        if (v == (unsigned long)-1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
        p->ids[k] = (uint32_t)v;
    }
    Py_DECREF(seq);
    Py_XSETREF(p->ring, (RingWriter *)Py_NewRef(ring));
    p->nphases = (int)n;
    p->sync_count_id = (uint32_t)sync_count_id;
    p->sync_phase = sync_phase;
    p->walks = walks;
    p->loop = loop;
    p->stack[0] = 0;
    p->depth = 1;
    p->untracked = 0;
    p->t = p->since = now_ns();
    memset(p->acc, 0, sizeof p->acc);
    p->syncs = 0;
    p->period = p->countdown = 1;
    p->walk_gap = walk_gap;
    p->window_at = INT64_MIN / 2;
    p->window_chosen = 0;
    p->every = 1;
    p->rng = 0x9E3779B97F4A7C15ULL;
    p->owed = 0;
    Py_XSETREF(p->spans, PyList_New(0));
    return p->spans ? 0 : -1;
}

static void Phases_dealloc(Phases *p) {
    PyObject_GC_UnTrack(p);
    Py_CLEAR(p->dict);
    Py_CLEAR(p->ring);
    Py_CLEAR(p->spans);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

static int Phases_traverse(Phases *p, visitproc visit, void *arg) {
    Py_VISIT(p->dict);
    Py_VISIT(p->ring);
    Py_VISIT(p->spans);
    Py_VISIT(Py_TYPE(p));
    return 0;
}

static int Phases_clear(Phases *p) {
    Py_CLEAR(p->dict);
    Py_CLEAR(p->spans);
    return 0;
}

/* enter(phase, t=None): the loop thread enters a phase (at t, or now). */
static PyObject *Phases_enter(Phases *p, PyObject *const *args, Py_ssize_t nargs) {
    int phase;
    if (!phase_call(p, args, nargs, &phase))
        Py_RETURN_NONE;
    if (p->depth < MAX_NEST) {
        p->stack[p->depth++] = (uint8_t)phase;
        p->since = p->t;
    } else {
        p->untracked++;
    }
    Py_RETURN_NONE;
}

/* exit(phase, t=None): ...and leaves it. Unbalanced (an exception skipped an exit): the innermost
 * entry of that phase goes. */
static void leave(Phases *p, int phase);

static PyObject *Phases_exit(Phases *p, PyObject *const *args, Py_ssize_t nargs) {
    int phase;
    if (phase_call(p, args, nargs, &phase))
        leave(p, phase);
    Py_RETURN_NONE;
}

/* The innermost entry of phase goes (its time accounted already). */
static void leave(Phases *p, int phase) {
    if (p->untracked) {
        p->untracked--;
    } else if (p->depth > 1 && p->stack[p->depth - 1] == phase) {
        p->depth--;
        p->since = p->t;
    } else {
        for (int k = p->depth - 1; k > 0; k--) {
            if (p->stack[k] == phase) {
                memmove(p->stack + k, p->stack + k + 1, (size_t)(p->depth - k - 1));
                p->depth--;
                break;
            }
        }
    }
}

/* move(inner, phase, t0, t1): t0..t1, at the end of the open innermost phase `inner`, was `phase`
 * (known only afterwards: the wait for DDP's reduction at the end of backward). */
static PyObject *Phases_move(Phases *p, PyObject *const *args, Py_ssize_t nargs) {
    int inner, phase;
    long long t0, t1;
    if (nargs != 4 || !on_loop(p) || !phase_arg(p, args[0], &inner) || !phase_arg(p, args[1], &phase))
        Py_RETURN_NONE;
    t0 = PyLong_AsLongLong(args[2]);
    t1 = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (p->stack[p->depth - 1] != inner || p->untracked || !(p->t <= t0 && t0 <= t1))
        Py_RETURN_NONE;
    p->acc[inner] += t0 - p->t;
    p->acc[phase] += t1 - t0;
    p->t = t1;
    Py_RETURN_NONE;
}

/* data_wait(phase, t0, t1): the calling thread waited t0..t1 in next() on a DataLoader: on the loop
 * thread, it leaves `phase` (entered at t0) at t1; on any thread, a DATA_WAIT record (the probe's
 * data_wait in one call: it runs where the GPU may be waiting for the next batch's copy). */
static PyObject *Phases_data_wait(Phases *p, PyObject *const *args, Py_ssize_t nargs) {
    long long t0, t1;
    if (nargs != 3 || !p->ring)
        Py_RETURN_NONE;
    t0 = PyLong_AsLongLong(args[1]);
    t1 = PyLong_AsLongLong(args[2]);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *exit_args[2] = {args[0], args[2]};
    Py_XDECREF(Phases_exit(p, exit_args, 2)); /* (a bad phase is ignored there; the record is written) */
    RingWriter *w = p->ring;
    if (w->enabled)
        ring_append(w, KIND_DATA_WAIT, ranges_depth(), 0, thread_id(), current_step(w), t0, t1, 0.0);
    Py_RETURN_NONE;
}

/* One sync t0..t1: its time to the sync phase; 1 when its call site is to be walked (every period-th). */
static int count_one(Phases *p, int64_t t0, int64_t t1) {
    account(p, t0);
    p->acc[p->sync_phase] += t1 - t0;
    p->t = t1;
    p->syncs++;
    if (--p->countdown <= 0) {
        p->countdown = p->period;
        return 1;
    }
    return 0;
}

/* count_sync(t0, t1) -> bool: the loop thread was blocked t0..t1 in a device-to-host sync; True
 * when this sync's call site is to be walked (every period-th sync). */
static PyObject *Phases_count_sync(Phases *p, PyObject *const *args, Py_ssize_t nargs) {
    long long t0, t1;
    if (nargs != 2 || !p->ring)
        Py_RETURN_FALSE;
    t0 = PyLong_AsLongLong(args[0]);
    t1 = PyLong_AsLongLong(args[1]);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        Py_RETURN_FALSE;
    }
    return PyBool_FromLong(count_one(p, t0, t1));
}

/* synced(t0, t1=None, timed=False) -> int: count_sync's count, plus what the probe does for every
 * sync in one call (it runs at the sync's return, where the GPU waits for the host): timed (the sync
 * phase was entered at t0), the loop thread leaves it at t1 (now if None); (t0, t1) is appended to
 * sync_spans; returns how many syncs a walk of this call site stands for, 0 for none.
 * A sync chosen by the period is walked with probability 1/every, every being the number chosen in
 * the last walk_gap window (about one walk a window). Drawn per sync, not by time: the first sync after
 * a time gap is, in a periodic loop, always the same one (a loop with an .item() and a synchronize()
 * named only the second), while a draw per sync gives each call site its share whatever the loop's
 * period; the syncs since the last walk are what the walk stands for (its weight). */
static PyObject *Phases_synced(Phases *p, PyObject *const *args, Py_ssize_t nargs) {
    long long t0, t1;
    if (nargs < 1 || nargs > 3 || !p->ring)
        return PyLong_FromLong(0);
    t0 = PyLong_AsLongLong(args[0]);
    t1 = nargs > 1 && args[1] != Py_None ? PyLong_AsLongLong(args[1]) : now_ns();
    int timed = nargs > 2 ? PyObject_IsTrue(args[2]) : 0;
    if (PyErr_Occurred() || timed < 0) {
        PyErr_Clear();
        return PyLong_FromLong(0);
    }
    if (timed && on_loop(p)) {
        account(p, t1);
        leave(p, p->sync_phase);
    }
    int chosen = timed ? count_one(p, t1, t1) : count_one(p, t0, t1);
    if (p->spans && PyList_Check(p->spans)) {
        PyObject *span = Py_BuildValue("(LL)", t0, t1);
        if (!span || PyList_Append(p->spans, span) < 0)
            PyErr_Clear();
        Py_XDECREF(span);
    }
    if (!chosen)
        return PyLong_FromLong(0);
    if (t1 - p->window_at >= p->walk_gap) {
        p->every = p->window_chosen > 1 ? p->window_chosen : 1;
        p->window_at = t1;
        p->window_chosen = 0;
    }
    p->window_chosen++;
    p->rng ^= p->rng << 13;
    p->rng ^= p->rng >> 7;
    p->rng ^= p->rng << 17;
    if (p->rng % (uint64_t)p->every != 0) {
        p->owed++;
        return PyLong_FromLong(0);
    }
    long weight = 1 + p->owed;
    p->owed = 0;
    return PyLong_FromLong(weight);
}

/* close(step, t0, t1, tid) -> period: the step ran t0..t1. Writes its STEP record, a PHASE record
 * per phase it spent time in and its sync count, publishes the completed steps; the next step
 * starts at t1 with the same phases open. Returns the call-site period this step's syncs had. */
static PyObject *Phases_close(Phases *p, PyObject *const *args, Py_ssize_t nargs) {
    long long step, t0, t1, tid;
    long period = p->period;
    if (nargs != 4 || !p->ring)
        return PyLong_FromLong(period);
    step = PyLong_AsLongLong(args[0]);
    t0 = PyLong_AsLongLong(args[1]);
    t1 = PyLong_AsLongLong(args[2]);
    tid = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred() || step < 0 || step > UINT32_MAX || tid < 0 || tid > UINT32_MAX) {
        PyErr_Clear();
        return PyLong_FromLong(period);
    }
    account(p, t1);
    RingWriter *w = p->ring;
    if (w->enabled) {
        ring_append(w, KIND_STEP, 0, 0, (uint32_t)tid, (uint32_t)step, t0, t1, 0.0);
        for (int k = 0; k < p->nphases; k++)
            if (p->acc[k] > 0)
                ring_append(w, KIND_PHASE, 0, p->ids[k], (uint32_t)tid, (uint32_t)step, 0, t1, (double)p->acc[k]);
        if (p->syncs)
            ring_append(w, KIND_STEP_VALUE, 0, p->sync_count_id, (uint32_t)tid, (uint32_t)step, 0, t1,
                        (double)p->syncs);
        ring_publish_steps(w, (uint64_t)step, t1);
    }
    /* walk the stack at most `walks` times per step, given this step's syncs */
    p->period = p->syncs / p->walks > 1 ? p->syncs / p->walks : 1;
    if (p->countdown > p->period)
        p->countdown = p->period;
    memset(p->acc, 0, sizeof p->acc);
    p->syncs = 0;
    return PyLong_FromLong(period);
}

/* restart(t): the step starts at t; time before is dropped. */
static PyObject *Phases_restart(Phases *p, PyObject *arg) {
    long long t = PyLong_AsLongLong(arg);
    if (t == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (!p->ring)
        Py_RETURN_NONE;
    memset(p->acc, 0, sizeof p->acc);
    p->syncs = 0;
    p->t = t;
    if (p->depth == 1) /* no phase open: "other" starts with the step */
        p->since = t;
    Py_RETURN_NONE;
}

/* reset(loop): another thread steps: it is the loop now, with no phase open. */
static PyObject *Phases_reset(Phases *p, PyObject *arg) {
    unsigned long loop = PyLong_AsUnsignedLong(arg);
    if (loop == (unsigned long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (!p->ring)
        Py_RETURN_NONE;
    p->loop = loop;
    p->depth = 1;
    p->untracked = 0;
    p->since = now_ns();
    Py_RETURN_NONE;
}

static PyObject *Phases_on_loop(Phases *p, PyObject *unused) { return PyBool_FromLong(on_loop(p)); }

static PyObject *Phases_get_top(Phases *p, void *c) { return PyLong_FromLong(p->depth ? p->stack[p->depth - 1] : 0); }
static PyObject *int_list(const int64_t *v, int n) {
    PyObject *list = PyList_New(n);
    for (int k = 0; list && k < n; k++) {
        PyObject *x = PyLong_FromLongLong(v[k]);
        if (!x) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, k, x);
    }
    return list;
}
static PyObject *Phases_get_open(Phases *p, void *c) {
    int64_t open[MAX_NEST];
    for (int k = 0; k < p->depth; k++)
        open[k] = p->stack[k];
    return int_list(open, p->depth);
}
static PyObject *Phases_get_acc(Phases *p, void *c) { return int_list(p->acc, p->nphases); }
static PyObject *Phases_get_loop(Phases *p, void *c) { return PyLong_FromUnsignedLong(p->loop); }
static PyObject *Phases_get_t(Phases *p, void *c) { return PyLong_FromLongLong(p->t); }
static PyObject *Phases_get_since(Phases *p, void *c) { return PyLong_FromLongLong(p->since); }
static PyObject *Phases_get_syncs(Phases *p, void *c) { return PyLong_FromLong(p->syncs); }
static PyObject *Phases_get_period(Phases *p, void *c) { return PyLong_FromLong(p->period); }

static PyMethodDef Phases_methods[] = {
    {"enter", (PyCFunction)(void (*)(void))Phases_enter, METH_FASTCALL, "enter(phase, t=None)"},
    {"exit", (PyCFunction)(void (*)(void))Phases_exit, METH_FASTCALL, "exit(phase, t=None)"},
    {"move", (PyCFunction)(void (*)(void))Phases_move, METH_FASTCALL, "move(inner, phase, t0, t1)"},
    {"data_wait", (PyCFunction)(void (*)(void))Phases_data_wait, METH_FASTCALL,
     "data_wait(phase, t0, t1): left phase at t1 (the loop thread); a DATA_WAIT record t0..t1 (any thread)"},
    {"count_sync", (PyCFunction)(void (*)(void))Phases_count_sync, METH_FASTCALL,
     "count_sync(t0, t1) -> walk this sync's call site?"},
    {"synced", (PyCFunction)(void (*)(void))Phases_synced, METH_FASTCALL,
     "synced(t0, t1=None, timed=False) -> the syncs a walk of this call site stands for (0: no walk)"},
    {"close", (PyCFunction)(void (*)(void))Phases_close, METH_FASTCALL,
     "close(step, t0, t1, tid) -> the call-site period the step's syncs had"},
    {"restart", (PyCFunction)Phases_restart, METH_O, "restart(t): the step starts at t"},
    {"reset", (PyCFunction)Phases_reset, METH_O, "reset(loop): this thread is the loop, no phase open"},
    {"on_loop", (PyCFunction)Phases_on_loop, METH_NOARGS, "is the calling thread the loop?"},
    {NULL}};

static PyMemberDef Phases_members[] = {
    {"sync_spans", T_OBJECT, offsetof(Phases, spans), 0, "this step's syncs (t0, t1): synced() appends"},
    {NULL}};

static PyGetSetDef Phases_getset[] = {
    {"top", (getter)Phases_get_top, NULL, "the innermost open phase", NULL},
    {"open", (getter)Phases_get_open, NULL, "the open phases, outermost first", NULL},
    {"acc", (getter)Phases_get_acc, NULL, "ns per phase so far this step", NULL},
    {"loop", (getter)Phases_get_loop, NULL, "the loop thread's ident", NULL},
    {"t", (getter)Phases_get_t, NULL, "when time was last given to a phase", NULL},
    {"since", (getter)Phases_get_since, NULL, "when the innermost open phase became the innermost", NULL},
    {"syncs", (getter)Phases_get_syncs, NULL, "syncs so far this step", NULL},
    {"period", (getter)Phases_get_period, NULL, "walk every period-th sync's call site", NULL},
    {NULL}};

static PyTypeObject PhasesType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tuimon.channel._fastring.Phases",
    .tp_basicsize = sizeof(Phases),
    .tp_dictoffset = offsetof(Phases, dict),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Phases(ring, ids, sync_count_id, sync_phase, walks, loop, walk_gap=0): the step's phase clock",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Phases_init,
    .tp_dealloc = (destructor)Phases_dealloc,
    .tp_traverse = (traverseproc)Phases_traverse,
    .tp_clear = (inquiry)Phases_clear,
    .tp_methods = Phases_methods,
    .tp_getset = Phases_getset,
    .tp_members = Phases_members,
};

int phases_top(PyObject *o) {
    if (!PyObject_TypeCheck(o, &PhasesType))
        return -1;
    Phases *p = (Phases *)o;
    return p->depth ? p->stack[p->depth - 1] : 0;
}

int phases_add_type(PyObject *m) {
    if (PyType_Ready(&PhasesType) < 0)
        return -1;
    return PyModule_AddObjectRef(m, "Phases", (PyObject *)&PhasesType);
}
