/* The channel's hot paths in C: appending records to a segment's ring and tuimon.range's
 * enter/exit (in the training process), and unpacking drained records (in the monitor).
 * Optional: ring_py.py holds the same logic in Python; ring.py picks one (Python when this
 * module was not built, or TUIMON_PURE_PYTHON=1).
 *
 * Why C: a Python-level context manager costs ~290 ns before it writes anything, about as much as
 * nvtx.annotate's whole enter+exit; the budget is "no more than nvtx.annotate".
 *
 * Concurrency: every function here runs with the GIL held and calls no Python code between
 * reading and publishing the head, so records from several threads never interleave (an
 * extension that does not declare Py_mod_gil keeps the GIL on free-threaded builds too). The head
 * is published with a release store after the record, so a reader that loads it with acquire
 * (or on x86-64, any load) sees the whole record: the ordering holds on aarch64 as well.
 *
 * Nothing here raises into the training loop: a failure disables the writer and keeps a reason.
 */
#include "_fastring.h"

/* Per-thread nesting depth, shared by every kind of range on a thread. */
static _Thread_local int t_depth;

static void ring_fail(RingWriter *w, const char *why) {
    w->enabled = 0;
    PyObject *msg = PyUnicode_FromString(why);
    if (msg) {
        Py_XSETREF(w->error, msg);
    }
    PyErr_Clear();
}

static int RingWriter_init(RingWriter *w, PyObject *args, PyObject *kw) {
    static char *names[] = {"buffer", "ring_offset", "ring_records", "head_offset", "steps_offset",
                            "heartbeat_offset", NULL};
    PyObject *buf;
    Py_ssize_t ring_offset, ring_records, head_offset, steps_offset, heartbeat_offset = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "Onnnn|n", names, &buf, &ring_offset, &ring_records,
                                     &head_offset, &steps_offset, &heartbeat_offset))
        return -1;
    if (w->has_view) {
        PyErr_SetString(PyExc_RuntimeError, "RingWriter already initialised");
        return -1;
    }
    if (ring_records <= 0 || (ring_records & (ring_records - 1))) {
        PyErr_SetString(PyExc_ValueError, "ring_records must be a power of two");
        return -1;
    }
    if (PyObject_GetBuffer(buf, &w->view, PyBUF_WRITABLE) < 0)
        return -1;
    w->has_view = 1;
    Py_ssize_t len = w->view.len;
    if (ring_offset < 0 || ring_offset % 8 || ring_offset + ring_records * (Py_ssize_t)sizeof(Record) > len ||
        head_offset < 0 || head_offset % 8 || head_offset + 8 > len || steps_offset < 0 ||
        steps_offset % 8 || steps_offset + 8 > len || ((uintptr_t)w->view.buf) % 8 ||
        (heartbeat_offset != -1 && (heartbeat_offset < 0 || heartbeat_offset % 8 || heartbeat_offset + 8 > len))) {
        PyErr_SetString(PyExc_ValueError, "offsets outside the buffer or not 8-byte aligned");
        return -1;
    }
    w->ring = (char *)w->view.buf + ring_offset;
    w->mask = (uint64_t)ring_records - 1;
    w->head_ptr = (uint64_t *)((char *)w->view.buf + head_offset);
    w->steps_ptr = (uint64_t *)((char *)w->view.buf + steps_offset);
    w->heartbeat_ptr = heartbeat_offset == -1 ? NULL : (uint64_t *)((char *)w->view.buf + heartbeat_offset);
    w->head = *w->head_ptr;
    w->enabled = 1;
    Py_XSETREF(w->error, Py_NewRef(Py_None));
    return 0;
}

static void RingWriter_dealloc(RingWriter *w) {
    if (w->has_view)
        PyBuffer_Release(&w->view);
    Py_XDECREF(w->error);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

/* A non-negative int no larger than max (what struct.pack_into would accept for the field). */
static inline int as_uint(PyObject *o, unsigned long long max, unsigned long long *out) {
    *out = PyLong_AsUnsignedLongLong(o);
    return !(*out == (unsigned long long)-1 && PyErr_Occurred()) && *out <= max;
}

/* emit(kind, depth, name_id, tid, step, t0, t1, value=0.0): append one record. Never raises. */
static PyObject *RingWriter_emit(RingWriter *w, PyObject *const *args, Py_ssize_t nargs) {
    if (!w->enabled)
        Py_RETURN_NONE;
    if (nargs != 7 && nargs != 8) {
        ring_fail(w, "TypeError: emit() takes 7 or 8 arguments");
        Py_RETURN_NONE;
    }
    unsigned long long kind, name_id, tid, step;
    long long depth, t0, t1;
    double value = 0.0;
    if (!as_uint(args[0], 255, &kind) || (depth = PyLong_AsLongLong(args[1]), depth == -1 && PyErr_Occurred()) ||
        !as_uint(args[2], UINT32_MAX, &name_id) || !as_uint(args[3], UINT32_MAX, &tid) ||
        !as_uint(args[4], UINT32_MAX, &step) ||
        (t0 = PyLong_AsLongLong(args[5]), t0 == -1 && PyErr_Occurred()) ||
        (t1 = PyLong_AsLongLong(args[6]), t1 == -1 && PyErr_Occurred()) ||
        (nargs == 8 && (value = PyFloat_AsDouble(args[7]), value == -1.0 && PyErr_Occurred()))) {
        ring_fail(w, "error: emit() got a value of the wrong type or out of range");
        Py_RETURN_NONE;
    }
    ring_append(w, (uint8_t)kind, (int)(depth > 255 ? 255 : depth), (uint32_t)name_id, (uint32_t)tid,
                (uint32_t)step, t0, t1, value);
    Py_RETURN_NONE;
}

/* publish_steps(steps, now_ns): the header's completed steps and heartbeat. Never raises. */
static PyObject *RingWriter_publish_steps(RingWriter *w, PyObject *const *args, Py_ssize_t nargs) {
    unsigned long long steps;
    long long now;
    if (!w->enabled)
        Py_RETURN_NONE;
    if (nargs != 2 || !as_uint(args[0], UINT64_MAX, &steps) ||
        (now = PyLong_AsLongLong(args[1]), now == -1 && PyErr_Occurred())) {
        ring_fail(w, "error: publish_steps() takes two ints");
        Py_RETURN_NONE;
    }
    ring_publish_steps(w, steps, now);
    Py_RETURN_NONE;
}

static PyObject *RingWriter_disable(RingWriter *w, PyObject *why) {
    w->enabled = 0;
    if (why != Py_None) {
        Py_XSETREF(w->error, Py_NewRef(why));
    }
    Py_RETURN_NONE;
}

static PyObject *RingWriter_get_head(RingWriter *w, void *c) { return PyLong_FromUnsignedLongLong(w->head); }
static PyObject *RingWriter_get_enabled(RingWriter *w, void *c) { return PyBool_FromLong(w->enabled); }
static PyObject *RingWriter_get_error(RingWriter *w, void *c) { return Py_NewRef(w->error ? w->error : Py_None); }

static PyMethodDef RingWriter_methods[] = {
    {"emit", (PyCFunction)(void (*)(void))RingWriter_emit, METH_FASTCALL,
     "emit(kind, depth, name_id, tid, step, t0, t1, value=0.0): append one record; never raises"},
    {"publish_steps", (PyCFunction)(void (*)(void))RingWriter_publish_steps, METH_FASTCALL,
     "publish_steps(steps, now_ns): the header's completed steps and heartbeat; never raises"},
    {"disable", (PyCFunction)RingWriter_disable, METH_O, "disable(reason or None): stop writing"},
    {NULL}};

static PyGetSetDef RingWriter_getset[] = {
    {"head", (getter)RingWriter_get_head, NULL, "records ever written", NULL},
    {"enabled", (getter)RingWriter_get_enabled, NULL, "False once disabled or failed", NULL},
    {"error", (getter)RingWriter_get_error, NULL, "why it was disabled, or None", NULL},
    {NULL}};

PyTypeObject RingWriterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tuimon.channel._fastring.RingWriter",
    .tp_basicsize = sizeof(RingWriter),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "RingWriter(buffer, ring_offset, ring_records, head_offset, steps_offset, heartbeat_offset=-1)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)RingWriter_init,
    .tp_dealloc = (destructor)RingWriter_dealloc,
    .tp_methods = RingWriter_methods,
    .tp_getset = RingWriter_getset,
};

/* ---- the bound probe: what tuimon.range writes to --------------------------------------- */

static RingWriter *bound_ring;  /* NULL: no probe, ranges cost almost nothing */
static PyObject *bound_names;   /* dict name -> id (the writer's, read without a lock) */
static PyObject *bound_intern;  /* intern(name) -> id, for names not yet in the table */
static PyObject *bound_push;    /* nvtx_push(name) or NULL: forwarding to NVTX */
static PyObject *bound_pop;     /* nvtx_pop() or NULL */
static PyObject *bound_count;   /* count(name, n) in Python, for what count() here does not take, or NULL */

static PyObject *fr_bind(PyObject *m, PyObject *args) {
    PyObject *ring, *names = Py_None, *intern = Py_None, *push = Py_None, *pop = Py_None, *count = Py_None;
    if (!PyArg_ParseTuple(args, "O|OOOOO", &ring, &names, &intern, &push, &pop, &count))
        return NULL;
    if (ring != Py_None && (!PyObject_TypeCheck(ring, &RingWriterType) || !PyDict_Check(names) ||
                            !PyCallable_Check(intern))) {
        PyErr_SetString(PyExc_TypeError, "bind(RingWriter, dict, callable[, push, pop]) or bind(None)");
        return NULL;
    }
    if (ring == Py_None) {
        Py_CLEAR(bound_ring);
        Py_CLEAR(bound_names);
        Py_CLEAR(bound_intern);
        Py_CLEAR(bound_push);
        Py_CLEAR(bound_pop);
        Py_CLEAR(bound_count);
        Py_RETURN_NONE;
    }
    Py_XSETREF(bound_ring, (RingWriter *)Py_NewRef(ring));
    Py_XSETREF(bound_names, Py_NewRef(names));
    Py_XSETREF(bound_intern, Py_NewRef(intern));
    Py_XSETREF(bound_push, push == Py_None ? NULL : Py_NewRef(push));
    Py_XSETREF(bound_pop, pop == Py_None ? NULL : Py_NewRef(pop));
    Py_XSETREF(bound_count, count == Py_None ? NULL : Py_NewRef(count));
    Py_RETURN_NONE;
}

/* The name's id in names (interned on first use); 0 when that fails. The caller owns names and
 * intern: intern (and NVTX's pop before it) run Python code, which may re-bind and drop the bound ones. */
static uint32_t name_id(PyObject *names, PyObject *intern, PyObject *name) {
    uint32_t nid = 0;
    PyObject *id = names ? PyDict_GetItemWithError(names, name) : NULL; /* borrowed */
    if (id) {
        nid = (uint32_t)PyLong_AsUnsignedLongMask(id);
    } else if (!PyErr_Occurred() && intern) {
        PyObject *r = PyObject_CallOneArg(intern, name);
        if (r) {
            nid = (uint32_t)PyLong_AsUnsignedLongMask(r);
            Py_DECREF(r);
        }
    }
    PyErr_Clear();
    return nid;
}

/* ---- count(name, n=1): tuimon.count -------------------------------------------------------
 * Called once or more a step, often right after the step's sync, where the GPU waits for the host:
 * in C, one call (the Python api.count -> Probe.count path cost ~8-10 us there on an H200's host,
 * cold, against ~1.5 warm: .gpu cold.py of the session). A str name and an int or float n are
 * written here; anything else (a tensor, a numpy number) goes to the bound Python count, which
 * converts it as float() and str() do and says a bad one once. */
static PyObject *fr_count(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "count(name, n=1)");
        return NULL;
    }
    RingWriter *w = bound_ring;
    if (!w)
        Py_RETURN_NONE;
    PyObject *name = args[0], *n = nargs > 1 ? args[1] : NULL;
    double value = 1.0;
    if (!PyUnicode_CheckExact(name) || (n && !PyFloat_CheckExact(n) && !PyLong_CheckExact(n)))
        goto slow;
    if (n && PyFloat_CheckExact(n)) {
        value = PyFloat_AS_DOUBLE(n);
    } else if (n) {
        value = PyLong_AsDouble(n);
        if (value == -1.0 && PyErr_Occurred()) { /* too large for a float: as float() says it */
            PyErr_Clear();
            goto slow;
        }
    }
    if (!w->enabled)
        Py_RETURN_NONE;
    Py_INCREF(w); /* (intern may run Python code that re-binds) */
    int64_t t = now_ns();
    PyObject *names = Py_XNewRef(bound_names), *intern = Py_XNewRef(bound_intern);
    uint32_t nid = name_id(names, intern, name);
    Py_XDECREF(names);
    Py_XDECREF(intern);
    if (w->enabled)
        ring_append(w, KIND_COUNT, t_depth, nid, thread_id(), current_step(w), t, t, value);
    Py_DECREF(w);
    Py_RETURN_NONE;
slow:
    if (!bound_count)
        Py_RETURN_NONE;
    PyObject *f = Py_NewRef(bound_count), *one = n ? NULL : PyLong_FromLong(1);
    PyObject *r = (n || one) ? PyObject_CallFunctionObjArgs(f, name, n ? n : one, NULL) : NULL;
    Py_DECREF(f);
    Py_XDECREF(one);
    if (!r)
        return NULL; /* (the Python count never raises; a failing allocation does) */
    Py_DECREF(r);
    Py_RETURN_NONE;
}

/* ---- Range: tuimon.range's enter and exit --------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *name; /* str */
    RingWriter *ring; /* the ring bound at enter (a borrowed-then-owned reference) */
    int64_t t0;
    int depth;
} Range;

static int Range_init(Range *self, PyObject *args, PyObject *kw) {
    PyObject *name;
    if (kw && PyDict_GET_SIZE(kw)) {
        static char *names[] = {"name", NULL};
        if (!PyArg_ParseTupleAndKeywords(args, kw, "O", names, &name))
            return -1;
    } else if (PyTuple_GET_SIZE(args) != 1) {
        PyErr_SetString(PyExc_TypeError, "range(name) takes exactly one argument");
        return -1;
    } else {
        name = PyTuple_GET_ITEM(args, 0);
    }
    PyObject *s = PyUnicode_CheckExact(name) ? Py_NewRef(name) : PyObject_Str(name);
    if (!s) { /* a name whose str() fails is not worth an exception in the training loop */
        PyErr_Clear();
        s = PyUnicode_FromString("(unprintable name)");
        if (!s)
            return -1;
    }
    Py_XSETREF(self->name, s);
    return 0;
}

static void Range_dealloc(Range *self) {
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->name);
    Py_CLEAR(self->ring);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Range_traverse(Range *self, visitproc visit, void *arg) {
    Py_VISIT(self->name);
    Py_VISIT(self->ring);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static PyObject *Range_enter(Range *self, PyObject *unused) {
    RingWriter *w = bound_ring;
    if (w && w->enabled) {
        Py_XSETREF(self->ring, (RingWriter *)Py_NewRef(w));
        self->depth = t_depth++;
        if (bound_push) {
            PyObject *r = PyObject_CallOneArg(bound_push, self->name);
            if (r)
                Py_DECREF(r);
            else
                PyErr_Clear(); /* a failing NVTX never reaches the loop */
        }
        self->t0 = now_ns();
    }
    return Py_NewRef(self);
}

static PyObject *Range_exit(Range *self, PyObject *const *args, Py_ssize_t nargs) {
    RingWriter *w = self->ring;
    if (!w)
        Py_RETURN_FALSE;
    int64_t t1 = now_ns();
    self->ring = NULL; /* owned reference, released below */
    t_depth = self->depth;
    if (w == bound_ring) { /* still the same probe (not re-bound or forked meanwhile) */
        /* Own what we use: the NVTX pop and intern calls run Python code, during which another
         * thread may re-bind and drop the bound objects. */
        PyObject *names = Py_XNewRef(bound_names), *intern = Py_XNewRef(bound_intern), *pop = Py_XNewRef(bound_pop);
        if (pop) {
            PyObject *r = PyObject_CallNoArgs(pop);
            if (r)
                Py_DECREF(r);
            else
                PyErr_Clear();
        }
        uint32_t nid = name_id(names, intern, self->name);
        Py_XDECREF(names);
        Py_XDECREF(intern);
        Py_XDECREF(pop);
        if (w->enabled)
            ring_append(w, KIND_RANGE, self->depth, nid, thread_id(), current_step(w), self->t0, t1, 0.0);
    }
    Py_DECREF(w);
    Py_RETURN_FALSE;
}

static PyMethodDef Range_methods[] = {
    {"__enter__", (PyCFunction)Range_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))Range_exit, METH_FASTCALL, NULL},
    {NULL}};

static PyMemberDef Range_members[] = {
    {"name", T_OBJECT_EX, offsetof(Range, name), READONLY, "the range's name"},
    {NULL}};

static PyTypeObject RangeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tuimon.channel._fastring.Range",
    .tp_basicsize = sizeof(Range),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Range(name): a named range on the current thread, written to the bound ring on exit",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Range_init,
    .tp_dealloc = (destructor)Range_dealloc,
    .tp_traverse = (traverseproc)Range_traverse,
    .tp_methods = Range_methods,
    .tp_members = Range_members,
};

/* ---- per-thread depth, for ranges that are not Range objects (push/pop APIs) ------------- */

int ranges_depth(void) { return t_depth; }

static PyObject *fr_thread_id(PyObject *m, PyObject *unused) { return PyLong_FromUnsignedLong(thread_id()); }
static PyObject *fr_depth_enter(PyObject *m, PyObject *unused) { return PyLong_FromLong(t_depth++); }
static PyObject *fr_depth(PyObject *m, PyObject *unused) { return PyLong_FromLong(t_depth); }
static PyObject *fr_set_depth(PyObject *m, PyObject *arg) {
    long d = PyLong_AsLong(arg);
    if (d == -1 && PyErr_Occurred())
        return NULL;
    t_depth = (int)d;
    Py_RETURN_NONE;
}

/* ---- the reader's side: records out of a copied run of the ring ------------------------ */

/* unpack_records(data, first_seq) -> (list of layout.RECORD tuples, corrupt): keeps the records
 * whose sequence number is their position (first_seq, first_seq + 1, ...) and whose kind is known
 * (layout.KINDS: 1..KIND_MAX); the rest are counted. ring_py.unpack_records is the same in Python. */
static PyObject *fr_unpack_records(PyObject *m, PyObject *args) {
    Py_buffer buf;
    unsigned long long first;
    if (!PyArg_ParseTuple(args, "y*K", &buf, &first))
        return NULL;
    Py_ssize_t n = buf.len / (Py_ssize_t)sizeof(Record), kept = 0, corrupt = 0;
    PyObject *list = PyList_New(n);
    if (!list) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Record r;
        memcpy(&r, (const char *)buf.buf + i * sizeof(Record), sizeof r);
        unsigned long long want = first + (unsigned long long)i;
        if (want < first || r.seq != want || r.kind < 1 || r.kind > KIND_MAX) { /* (want < first: wrapped) */
            corrupt++;
            continue;
        }
        PyObject *t = PyTuple_New(10);
        if (!t)
            goto fail;
        PyObject *items[10] = {
            PyLong_FromLong(r.kind), PyLong_FromLong(r.depth), PyLong_FromLong(r.flags),
            PyLong_FromUnsignedLong(r.name_id), PyLong_FromUnsignedLong(r.tid), PyLong_FromUnsignedLong(r.step),
            PyLong_FromLongLong(r.t0), PyLong_FromLongLong(r.t1), PyFloat_FromDouble(r.value),
            PyLong_FromUnsignedLongLong(r.seq)};
        for (int k = 0; k < 10; k++) {
            if (!items[k]) { /* out of memory: nothing is in the tuple yet */
                for (int j = 0; j < 10; j++)
                    Py_XDECREF(items[j]);
                Py_DECREF(t);
                goto fail;
            }
        }
        for (int k = 0; k < 10; k++)
            PyTuple_SET_ITEM(t, k, items[k]);
        /* Ints and a float only: it can never be part of a cycle, so the collector need not walk
         * it (it would untrack it itself, later, after walking it: ~40% of the drain's time). */
        PyObject_GC_UnTrack(t);
        PyList_SET_ITEM(list, kept++, t);
    }
    PyBuffer_Release(&buf);
    if (kept < n && PyList_SetSlice(list, kept, n, NULL) < 0) {
        Py_DECREF(list);
        return NULL;
    }
    return Py_BuildValue("(Nn)", list, corrupt);
fail:
    /* unfilled slots are NULL, which list_dealloc skips */
    PyBuffer_Release(&buf);
    Py_DECREF(list);
    return NULL;
}

static PyMethodDef module_methods[] = {
    {"unpack_records", fr_unpack_records, METH_VARARGS,
     "unpack_records(data, first_seq) -> (records, corrupt): checked layout.RECORD tuples"},
    {"bind", fr_bind, METH_VARARGS,
     "bind(ring, names, intern, nvtx_push=None, nvtx_pop=None, count=None): where Range and count records go; "
     "bind(None) stops"},
    {"count", (PyCFunction)(void (*)(void))fr_count, METH_FASTCALL,
     "count(name, n=1): a COUNT record of n under name in the bound ring (nothing when none is bound)"},
    {"thread_id", fr_thread_id, METH_NOARGS, "this thread's OS thread id (as records carry it)"},
    {"depth_enter", fr_depth_enter, METH_NOARGS, "this thread's depth, then one deeper"},
    {"depth", fr_depth, METH_NOARGS, "this thread's current depth"},
    {"set_depth", fr_set_depth, METH_O, "set this thread's depth"},
    {NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastring", NULL, -1, module_methods};

PyMODINIT_FUNC PyInit__fastring(void) {
    if (PyType_Ready(&RingWriterType) < 0 || PyType_Ready(&RangeType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    if (PyModule_AddObjectRef(m, "RingWriter", (PyObject *)&RingWriterType) < 0 ||
        PyModule_AddObjectRef(m, "Range", (PyObject *)&RangeType) < 0 || phases_add_type(m) < 0 ||
        sampler_add_functions(m) < 0 || exitwatch_add_functions(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
