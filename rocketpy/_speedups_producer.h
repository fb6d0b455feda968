/* rocketpy._speedups, the producer's part: included once from _speedups.c (after _speedups_remoting.h and
 * _speedups_storeput.h: member_offsets, named_offsets).
 *
 * An automatic batch's answer gives each member (a Deferred its caller holds) its own SendResult
 * (rocketpy.client.autobatch._deliver). Per member, Twisted's Deferred.callback (callback,
 * _startRunCallbacks, _runCallbacks: ~1.4 us with two callbacks) and the SendResult's dataclass
 * __init__ were a quarter of the producer's CPU per pipelined send. fire() does what
 * Deferred.callback does, in C, for the usual Deferred: not called yet, not paused, no debugging,
 * callbacks added by addCallback(s)/addErrback/addBoth; a callback that returns a Deferred is
 * chained as _runCallbacks chains it. Anything else -- a chained Deferred's continuation, a
 * callbacks list of another shape, a Deferred already fired -- goes to Twisted's own code at the
 * point reached (rocketpy/client/firing.py holds the Python reference and checks that the
 * installed Twisted keeps its Deferred's state as this code expects; doc/client.md).
 */

enum { FN_CALLED, FN_PAUSED, FN_RUNNING, FN_DEBUG, FN_CALLBACKS, FN_CANCELLER, FN_RESULT, FN_DEBUG_INFO,
       FN_FAIL_RESULT, FN_RUN_CALLBACKS, FN_START_RUN, FN_CHAINED_TO, FN_PAUSE, FN_CONTINUATION,
       FN_CAPTURE_VARS, FN_COUNT };
static const char *const FIRE_NAMES[FN_COUNT] = {
    "called", "paused", "_runningCallbacks", "debug", "_callbacks", "_canceller", "result", "_debugInfo",
    "failResult", "_runCallbacks", "_startRunCallbacks", "_chainedTo", "pause", "_continuation", "captureVars"};
static PyObject *fire_names[FN_COUNT];

/* Registered by fire_setup (rocketpy/client/firing.py); fire_ready is 0 until then. */
static PyObject *fd_failure, *fd_continue, *fd_no_result, *fd_subclasses, *fd_debug_info, *fd_warn_self,
    *fd_errback_pass, *fd_callback_pass, *fd_send_result, *fd_empty_kwargs, *fd_none_kwargs, *fd_empty_args;
static int fire_ready;

/* 1 when the attribute is true, 0 when false, -1 on error. */
static int attr_true(PyObject *obj, PyObject *name) {
    PyObject *v = PyObject_GetAttr(obj, name);
    int truth;
    if (v == NULL)
        return -1;
    truth = PyObject_IsTrue(v);
    Py_DECREF(v);
    return truth;
}

/* 1 when type(obj) is Deferred or one of its subclasses (Twisted's _DEFERRED_SUBCLASSES test). */
static int is_deferred(PyObject *obj) {
    return PySequence_Contains(fd_subclasses, (PyObject *)Py_TYPE(obj));
}

/* A Failure of the exception being raised, made as `except BaseException: Failure(captureVars=debug)`
 * makes it (the exception is set as the one being handled while Failure() reads sys.exc_info()). */
static PyObject *failure_of_raised(PyObject *d) {
    PyObject *type, *value, *tb, *previous, *failure = NULL, *kwargs = NULL, *empty;
    int debug;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL)
        PyException_SetTraceback(value, tb);
    debug = attr_true(d, fire_names[FN_DEBUG]);
    if (debug < 0)
        goto done;
    previous = PyErr_GetHandledException();
    PyErr_SetHandledException(value);
    if (debug) {
        kwargs = Py_BuildValue("{O:O}", fire_names[FN_CAPTURE_VARS], Py_True);
        empty = PyTuple_New(0);
        if (kwargs != NULL && empty != NULL)
            failure = PyObject_Call(fd_failure, empty, kwargs);
        Py_XDECREF(empty);
        Py_XDECREF(kwargs);
    } else {
        failure = PyObject_CallNoArgs(fd_failure);
    }
    PyErr_SetHandledException(previous);
    Py_XDECREF(previous);
done:
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return failure;
}

/* isinstance(obj, Failure), without the call for the usual results (None, a SendResult, str, int). */
static inline int is_failure(PyObject *obj) {
    PyTypeObject *type = Py_TYPE(obj);
    if (type == (PyTypeObject *)fd_failure)
        return 1;
    if (obj == Py_None || type == (PyTypeObject *)fd_send_result || type == &PyUnicode_Type || type == &PyLong_Type)
        return 0;
    return PyObject_IsInstance(obj, fd_failure);
}

/* callback(current, *args, **kwargs) */
static PyObject *call_link(PyObject *callback, PyObject *current, PyObject *args, PyObject *kwargs) {
    PyObject *stack[8];
    Py_ssize_t i, n = PyTuple_GET_SIZE(args);
    if (n < 7 && PyDict_GET_SIZE(kwargs) == 0) {
        stack[0] = current;
        for (i = 0; i < n; i++)
            stack[i + 1] = PyTuple_GET_ITEM(args, i);
        return PyObject_Vectorcall(callback, stack, (size_t)(n + 1), NULL);
    } else {
        PyObject *all = PyTuple_New(n + 1), *r;
        if (all == NULL)
            return NULL;
        PyTuple_SET_ITEM(all, 0, Py_NewRef(current));
        for (i = 0; i < n; i++)
            PyTuple_SET_ITEM(all, i + 1, Py_NewRef(PyTuple_GET_ITEM(args, i)));
        r = PyObject_Call(callback, all, kwargs);
        Py_DECREF(all);
        return r;
    }
}

/* _runCallbacks's handling of a callback's result that is a Deferred (r): 1 when d now waits on it
 * (the loop ends), 0 when its result was taken (*current replaced, d.result set), -1 on error. */
static int chain_to(PyObject *d, PyObject *r, PyObject **current) {
    PyObject *taken = PyObject_GetAttr(r, fire_names[FN_RESULT]), *cont, *cbs, *info;
    int waits, status = -1;
    if (taken == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return -1;
        PyErr_Clear();
        taken = Py_NewRef(fd_no_result);
    }
    waits = taken == fd_no_result;
    if (!waits && (waits = is_deferred(taken)) == 0)
        waits = attr_true(r, fire_names[FN_PAUSED]);
    if (waits < 0)
        goto done;
    if (waits) {  /* current.pause(); current._chainedTo = r; r._callbacks.append(current._continuation()) */
        PyObject *paused = PyObject_CallMethodNoArgs(d, fire_names[FN_PAUSE]);
        if (paused == NULL)
            goto done;
        Py_DECREF(paused);
        if (PyObject_SetAttr(d, fire_names[FN_CHAINED_TO], r) < 0)
            goto done;
        if ((cont = PyObject_CallMethodNoArgs(d, fire_names[FN_CONTINUATION])) == NULL)
            goto done;
        cbs = PyObject_GetAttr(r, fire_names[FN_CALLBACKS]);
        status = cbs == NULL ? -1 : PyList_Append(cbs, cont) < 0 ? -1 : 1;
        Py_XDECREF(cbs);
        Py_DECREF(cont);
        goto done;
    }
    /* steal its result */
    if (PyObject_SetAttr(r, fire_names[FN_RESULT], Py_None) < 0)
        goto done;
    if ((info = PyObject_GetAttr(r, fire_names[FN_DEBUG_INFO])) == NULL)
        goto done;
    if (info != Py_None && PyObject_SetAttr(info, fire_names[FN_FAIL_RESULT], Py_None) < 0) {
        Py_DECREF(info);
        goto done;
    }
    Py_DECREF(info);
    if (PyObject_SetAttr(d, fire_names[FN_RESULT], taken) < 0)
        goto done;
    Py_SETREF(*current, Py_NewRef(taken));
    status = 0;
done:
    Py_DECREF(taken);
    return status;
}

/* Twisted's own _runCallbacks from here on (d.result is set; its callbacks list holds what is left). */
static int hand_over(PyObject *d) {
    PyObject *r = PyObject_CallMethodNoArgs(d, fire_names[FN_RUN_CALLBACKS]);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* d._runningCallbacks = value, keeping an exception being raised. */
static int set_running(PyObject *d, PyObject *value) {
    PyObject *type, *exc, *tb;
    int status;
    PyErr_Fetch(&type, &exc, &tb);
    status = PyObject_SetAttr(d, fire_names[FN_RUNNING], value);
    if (type != NULL) {
        if (status < 0) {
            Py_DECREF(type);
            Py_XDECREF(exc);
            Py_XDECREF(tb);
        } else {
            PyErr_Restore(type, exc, tb);
        }
    }
    return status;
}

/* Deferred._runCallbacks for a Deferred that was just given its result (not chained to another).
 * _runningCallbacks stays True from the first callback to the end of the loop (Twisted sets it around
 * each call: nothing but this loop runs in between, so no reentrant call can tell the difference). */
static int run_links(PyObject *d, PyObject *result) {
    PyObject *current = Py_NewRef(result), *cbs = NULL, *item, *link, *callback, *args, *kwargs, *r, *info;
    int failed, status = -1, waits, running = 0;
    for (;;) {
        Py_XSETREF(cbs, PyObject_GetAttr(d, fire_names[FN_CALLBACKS]));
        if (cbs == NULL)
            goto done;
        if (!PyList_CheckExact(cbs))
            goto hand_over;
        if (PyList_GET_SIZE(cbs) == 0)
            break;
        item = PyList_GET_ITEM(cbs, 0);
        if ((failed = is_failure(current)) < 0)
            goto done;
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2 ||
            !PyTuple_CheckExact(link = PyTuple_GET_ITEM(item, failed)) || PyTuple_GET_SIZE(link) != 3 ||
            (callback = PyTuple_GET_ITEM(link, 0)) == fd_continue || !PyTuple_Check(args = PyTuple_GET_ITEM(link, 1)))
            goto hand_over;  /* a chained Deferred waits, or an unusual link: Twisted's loop */
        kwargs = PyTuple_GET_ITEM(link, 2);
        if (kwargs == fd_none_kwargs)  /* addCallbacks' default, an empty mappingproxy */
            kwargs = fd_empty_kwargs;
        else if (!PyDict_Check(kwargs))
            goto hand_over;
        Py_INCREF(item);
        if (PyList_SetSlice(cbs, 0, 1, NULL) < 0 || (!running && set_running(d, Py_True) < 0)) {
            Py_DECREF(item);
            goto done;
        }
        running = 1;
        r = call_link(callback, current, args, kwargs);
        if (r == d) {
            PyObject *warned = PyObject_CallOneArg(fd_warn_self, callback);
            if (warned == NULL)
                Py_CLEAR(r);
            Py_XDECREF(warned);
        }
        Py_DECREF(item);
        if (r == NULL) {
            running = 0;  /* Failure() runs as in Twisted: after the callback's finally */
            if (set_running(d, Py_False) < 0 || (r = failure_of_raised(d)) == NULL)
                goto done;
        }
        Py_SETREF(current, r);
        if (PyObject_SetAttr(d, fire_names[FN_RESULT], current) < 0)
            goto done;
        if ((waits = is_deferred(current)) < 0)
            goto done;
        if (waits) {
            if (running && set_running(d, Py_False) < 0)
                goto done;
            running = 0;
            if ((waits = chain_to(d, current, &current)) < 0)
                goto done;
            if (waits)
                break;
        }
    }
    if (running && set_running(d, Py_False) < 0)
        goto done;
    running = 0;
    /* finished: a Failure left at the end is reported when d is collected (DebugInfo.__del__) */
    if ((failed = is_failure(current)) < 0 ||
        (info = PyObject_GetAttr(d, fire_names[FN_DEBUG_INFO])) == NULL)
        goto done;
    if (failed && info == Py_None) {
        Py_DECREF(info);
        if ((info = PyObject_CallNoArgs(fd_debug_info)) == NULL ||
            PyObject_SetAttr(d, fire_names[FN_DEBUG_INFO], info) < 0) {
            Py_XDECREF(info);
            goto done;
        }
    }
    status = info == Py_None ? 0 : PyObject_SetAttr(info, fire_names[FN_FAIL_RESULT], failed ? current : Py_None);
    Py_DECREF(info);
    goto done;
hand_over:
    if (running && set_running(d, Py_False) < 0)
        goto done;
    running = 0;
    status = hand_over(d);
done:
    if (running)
        set_running(d, Py_False);
    Py_XDECREF(cbs);
    Py_DECREF(current);
    return status;
}

/* d.callback(result): 0 or -1 with an exception (AlreadyCalledError, ...). */
static int fire_one(PyObject *d, PyObject *result) {
    int unusual;
    if ((unusual = attr_true(d, fire_names[FN_CALLED])) == 0 && (unusual = attr_true(d, fire_names[FN_PAUSED])) == 0 &&
        (unusual = attr_true(d, fire_names[FN_RUNNING])) == 0)
        unusual = attr_true(d, fire_names[FN_DEBUG]);
    if (unusual < 0)
        return -1;
    if (unusual) {  /* Twisted's errors and debugging information */
        PyObject *r = PyObject_CallMethodOneArg(d, fire_names[FN_START_RUN], result);
        Py_XDECREF(r);
        return r == NULL ? -1 : 0;
    }
    if (PyObject_SetAttr(d, fire_names[FN_CALLED], Py_True) < 0 ||
        PyObject_SetAttr(d, fire_names[FN_CANCELLER], Py_None) < 0 ||
        PyObject_SetAttr(d, fire_names[FN_RESULT], result) < 0)
        return -1;
    return run_links(d, result);
}

static int fire_check(void) {
    if (!fire_ready)
        PyErr_SetString(PyExc_RuntimeError, "rocketpy._speedups.fire_setup() was not called");
    return fire_ready ? 0 : -1;
}

/* fire(d, result): d.callback(result). */
static PyObject *fire(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "fire takes 2 arguments");
        return NULL;
    }
    if (fire_check() < 0 || fire_one(args[0], args[1]) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* A SendResult of its seven fields (borrowed). */
static PyObject *new_send_result(PyObject *const *fields) {
    PyObject *r;
    int i;
    if (!sr_slots)
        return PyObject_Vectorcall(fd_send_result, fields, SR_FIELDS, NULL);
    r = ((PyTypeObject *)fd_send_result)->tp_alloc((PyTypeObject *)fd_send_result, 0);
    if (r != NULL)
        for (i = 0; i < SR_FIELDS; i++)
            *(PyObject **)((char *)r + sr_offsets[i]) = Py_NewRef(fields[i]);
    return r;
}

/* deliver(members, status, ids, store_ids, queue, offset, transaction_id, region_id) -> bool: fires the
 * i-th member with SendResult(status, ids[i], store_ids[i], queue, offset + i, transaction_id, region_id),
 * as far as the shortest of members, ids and store_ids goes (autobatch._deliver, the reference); False,
 * having fired nothing, when it does not take these arguments (the Python loop then runs). */
static PyObject *deliver(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *members, *ids, *store_ids, *f[SR_FIELDS], *result;
    Py_ssize_t i, n;
    long long offset;
    int overflow;
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "deliver takes 8 arguments");
        return NULL;
    }
    if (fire_check() < 0)
        return NULL;
    members = args[0], ids = args[2], store_ids = args[3];
    if (!PyList_CheckExact(members) || !PyList_CheckExact(ids) || !PyList_CheckExact(store_ids) ||
        !PyLong_CheckExact(args[5]))
        Py_RETURN_FALSE;
    offset = PyLong_AsLongLongAndOverflow(args[5], &overflow);
    n = PyList_GET_SIZE(members);
    if (PyList_GET_SIZE(ids) < n)
        n = PyList_GET_SIZE(ids);
    if (PyList_GET_SIZE(store_ids) < n)
        n = PyList_GET_SIZE(store_ids);
    if (overflow || offset < 0 || offset > LLONG_MAX - n)
        Py_RETURN_FALSE;
    f[0] = args[1], f[3] = args[4], f[5] = args[6], f[6] = args[7];
    for (i = 0; i < n && i < PyList_GET_SIZE(members); i++) {  /* a callback may empty the list */
        PyObject *member = Py_NewRef(PyList_GET_ITEM(members, i));
        f[1] = PyList_GET_ITEM(ids, i);
        f[2] = PyList_GET_ITEM(store_ids, i);
        if ((f[4] = PyLong_FromLongLong(offset + i)) == NULL) {
            Py_DECREF(member);
            return NULL;
        }
        Py_INCREF(f[1]);
        Py_INCREF(f[2]);
        result = new_send_result(f);
        Py_DECREF(f[4]);
        Py_DECREF(f[1]);
        Py_DECREF(f[2]);
        if (result == NULL || fire_one(member, result) < 0) {
            Py_XDECREF(result);
            Py_DECREF(member);
            return NULL;
        }
        Py_DECREF(result);
        Py_DECREF(member);
    }
    Py_RETURN_TRUE;
}

/* ---- addCallback, addErrback, addBoth for the batcher's member Deferreds ------------------------ */

/* The link (function, args, kwargs) of a call f(self, function, *args, **kwargs). */
static PyObject *link_of(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, const char *name) {
    PyObject *rest, *kwargs, *link;
    Py_ssize_t i, nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs < 1) {
        PyErr_Format(PyExc_TypeError, "%s() missing its function argument", name);
        return NULL;
    }
    if ((rest = PyTuple_New(nargs - 1)) == NULL)
        return NULL;
    for (i = 1; i < nargs; i++)
        PyTuple_SET_ITEM(rest, i - 1, Py_NewRef(args[i]));
    if (nkw == 0)  /* no keywords: the shared empty dict (never changed: a link's kwargs are passed as **kwargs) */
        kwargs = Py_NewRef(fd_empty_kwargs);
    else if ((kwargs = PyDict_New()) == NULL) {
        Py_DECREF(rest);
        return NULL;
    }
    for (i = 0; i < nkw; i++)
        if (PyDict_SetItem(kwargs, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]) < 0) {
            Py_DECREF(rest);
            Py_DECREF(kwargs);
            return NULL;
        }
    link = PyTuple_Pack(3, args[0], rest, kwargs);
    Py_DECREF(rest);
    Py_DECREF(kwargs);
    return link;
}

/* self._callbacks.append(item) (a new reference, stolen); if self.called: self._runCallbacks(); self */
static PyObject *add_item(PyObject *self, PyObject *item) {
    PyObject *cbs, *r;
    int called;
    if (item == NULL)
        return NULL;
    cbs = PyObject_GetAttr(self, fire_names[FN_CALLBACKS]);
    if (cbs == NULL || PyList_Append(cbs, item) < 0) {
        Py_XDECREF(cbs);
        Py_DECREF(item);
        return NULL;
    }
    Py_DECREF(cbs);
    Py_DECREF(item);
    if ((called = attr_true(self, fire_names[FN_CALLED])) < 0)
        return NULL;
    if (called) {
        if ((r = PyObject_CallMethodNoArgs(self, fire_names[FN_RUN_CALLBACKS])) == NULL)
            return NULL;
        Py_DECREF(r);
    }
    return Py_NewRef(self);
}

/* The link of f(self, function, *args, **kwargs) as the callback (side 0), the errback (1) or both (2). */
static PyObject *add_link(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, int side) {
    static const char *const names[] = {"addCallback", "addErrback", "addBoth"};
    PyObject *link = link_of(args, nargs, kwnames, names[side]), *item;
    if (link == NULL)
        return NULL;
    item = PyTuple_Pack(2, side == 1 ? fd_callback_pass : link, side == 0 ? fd_errback_pass : link);
    Py_DECREF(link);
    return add_item(self, item);
}

static PyObject *add_callback(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    return add_link(self, args, nargs, kwnames, 0);
}

static PyObject *add_errback(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    return add_link(self, args, nargs, kwnames, 1);
}

static PyObject *add_both(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    return add_link(self, args, nargs, kwnames, 2);
}

static PyMethodDef add_methods[] = {
    {"addCallback", (PyCFunction)(void (*)(void))add_callback, METH_FASTCALL | METH_KEYWORDS,
     "Deferred.addCallback in C."},
    {"addErrback", (PyCFunction)(void (*)(void))add_errback, METH_FASTCALL | METH_KEYWORDS,
     "Deferred.addErrback in C."},
    {"addBoth", (PyCFunction)(void (*)(void))add_both, METH_FASTCALL | METH_KEYWORDS, "Deferred.addBoth in C."},
    {NULL, NULL, 0, NULL}};

/* fire_methods(cls): cls.addCallback, addErrback, addBoth become the C ones (cls: a Deferred subclass). */
static PyObject *fire_methods(PyObject *self, PyObject *cls) {
    PyMethodDef *def;
    if (fire_check() < 0)
        return NULL;
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "fire_methods takes a class");
        return NULL;
    }
    for (def = add_methods; def->ml_name != NULL; def++) {
        PyObject *descr = PyDescr_NewMethod((PyTypeObject *)cls, def);
        if (descr == NULL || PyObject_SetAttrString(cls, def->ml_name, descr) < 0) {
            Py_XDECREF(descr);
            return NULL;
        }
        Py_DECREF(descr);
    }
    Py_RETURN_NONE;
}

/* fire_setup(*, failure, continue_, no_result, subclasses, debug_info, warn_self, send_result,
 * failthru, passthru, none_kwargs): Twisted's pieces (rocketpy/client/firing.py checks them first) and SendResult. */
static PyObject *fire_setup(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kw[] = {"failure", "continue_", "no_result", "subclasses", "debug_info", "warn_self",
                         "send_result", "failthru", "passthru", "none_kwargs", NULL};
    PyObject *v[10], *empty_args;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "$OOOOOOOOOO", kw, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                                     &v[6], &v[7], &v[8], &v[9]))
        return NULL;
    if (!PyList_CheckExact(v[3])) {
        PyErr_SetString(PyExc_TypeError, "subclasses must be Twisted's list _DEFERRED_SUBCLASSES");
        return NULL;
    }
    if (intern_array(fire_names, FIRE_NAMES, FN_COUNT) < 0 || intern_array(sr_names, SR_NAMES, SR_FIELDS) < 0)
        return NULL;  /* SR_NAMES, sr_names: _speedups_table.h's */
    if (fd_empty_kwargs == NULL && (fd_empty_kwargs = PyDict_New()) == NULL)
        return NULL;
    empty_args = PyTuple_New(0);
    if (empty_args == NULL)
        return NULL;
    Py_XSETREF(fd_empty_args, Py_NewRef(empty_args));
    Py_XSETREF(fd_errback_pass, Py_BuildValue("(OOO)", v[7], empty_args, fd_empty_kwargs));
    Py_XSETREF(fd_callback_pass, Py_BuildValue("(OOO)", v[8], empty_args, fd_empty_kwargs));
    Py_DECREF(empty_args);
    if (fd_errback_pass == NULL || fd_callback_pass == NULL)
        return NULL;
    Py_XSETREF(fd_failure, Py_NewRef(v[0]));
    Py_XSETREF(fd_continue, Py_NewRef(v[1]));
    Py_XSETREF(fd_no_result, Py_NewRef(v[2]));
    Py_XSETREF(fd_subclasses, Py_NewRef(v[3]));
    Py_XSETREF(fd_debug_info, Py_NewRef(v[4]));
    Py_XSETREF(fd_warn_self, Py_NewRef(v[5]));
    Py_XSETREF(fd_send_result, Py_NewRef(v[6]));
    Py_XSETREF(fd_none_kwargs, Py_NewRef(v[9]));
    sr_slots = !PyObject_HasAttrString(v[6], "__post_init__") &&
               member_offsets(v[6], sr_names, SR_FIELDS, sr_offsets);  /* _speedups_remoting.h */
    fire_ready = 1;
    Py_RETURN_NONE;
}

/* ---- the producer's usual send joining a busy queue's next batch (Producer._send_plain) ----------- */

enum { PS_RUNNING, PS_SEND_HOOKS, PS_FORBID_HOOKS, PS_FAULT, PS_ENABLED, PS_RETRY_ANOTHER, PS_BATCHER, PS_PUBLISH,
       PS_MAX_SIZE, PS_COMPRESS_OVER, PS_MAX_BYTES, PS_QUEUES_BY_KEY, PS_CLOCK, PS_SECONDS, PS_INSTANCE,
       PS_BROKER_ADDRS, PS_UNIQ, PS_QUEUES, PS_INDEX, PS_VALUE, PS_TOPIC, PS_BROKER_NAME, PS_QUEUE_ID, PS_IN_FLIGHT,
       PS_WAITING, PS_LAST_MS, PS_COUNTER, PS_TIME_PREFIX, PS_NEXT_ID, PS_SEND_PLAIN, PS_PROPERTIES, PS_M_MSG,
       PS_M_SIZE, PS_M_DEADLINE, PS_M_RETRY, PS_JOIN_OR_REQUEST, PS_COUNT };
static const char *const PS_NAMES[PS_COUNT] = {
    "running", "send_message_hooks", "check_forbidden_hooks", "fault_strategy", "enabled",
    "retry_another_broker_when_not_store_ok", "_batcher", "_publish", "max_message_size", "compress_over",
    "max_bytes", "_queues", "_clock", "seconds", "instance", "broker_addrs", "_uniq", "queues", "index", "_value",
    "topic", "broker_name", "queue_id", "in_flight", "waiting", "_last_ms", "_counter", "_time_prefix", "next_id",
    "_send_plain", "properties", "msg", "size", "deadline", "retry", "_join_or_request"};
static PyObject *ps_names[PS_COUNT];
/* plain_setup's: Mode.SYNC, Mode.ONEWAY, valid_topics, the member class and its four slots' descriptors,
 * RoundRobinIndex, the UNIQ_KEY name, the master's broker id (0); whether the member class may be made
 * without calling it (its __init__ is Deferred's). */
static PyObject *ps_sync, *ps_oneway, *ps_valid_topics, *ps_member_cls, *ps_member_slots[4], *ps_index_cls, *ps_uniq,
    *ps_master_id;
static int ps_ready, ps_member_new;

/* The producer's _send_plain(msg, mode, timeout) in Python. */
static PyObject *plain_python(PyObject *const *args) {
    PyObject *method = PyObject_GetAttr(args[0], ps_names[PS_SEND_PLAIN]), *r;
    if (method == NULL)
        return NULL;
    r = PyObject_Vectorcall(method, args + 1, 3, NULL);
    Py_DECREF(method);
    return r;
}

/* obj.name, kept in *out (a new reference) unless NULL; 0, or -1 (an exception set). */
static inline int get(PyObject *obj, int name, PyObject **out) {
    return (*out = PyObject_GetAttr(obj, ps_names[name])) == NULL ? -1 : 0;
}

/* Attributes of slotted objects (UniqKeyGenerator, TopicPublishInfo, RoundRobinIndex) read and written at their
 * slots' offsets, found once per class (the last class seen: no __dict__, plain slots); a generic getattr or
 * setattr for any other class or an unset slot (~10 instructions against ~200 and ~400). */
#define PS_SLOT(obj, at) (*(PyObject **)((char *)(obj) + (at)))  /* borrowed; NULL when unset */

typedef struct {
    PyTypeObject *type;
    int ok;
    Py_ssize_t at[3];
} SlotCache;

static const char *const UNIQ_SLOTS[3] = {"_last_ms", "_counter", "_time_prefix"};
static const char *const INFO_SLOTS[2] = {"queues", "index"};
static const char *const INDEX_SLOTS[1] = {"_value"};
static const char *const BATCHER_SLOTS[2] = {"max_bytes", "_queues"};
static const char *const FAULT_SLOTS[1] = {"enabled"};
static SlotCache uniq_slots, info_slots, index_slots, batcher_slots, fault_slots;

static int slots_known(SlotCache *c, PyObject *obj, const char *const *names, int n) {
    if (c->type != Py_TYPE(obj)) {
        Py_XSETREF(c->type, (PyTypeObject *)Py_NewRef((PyObject *)Py_TYPE(obj)));
        c->ok = named_offsets((PyObject *)c->type, names, n, c->at);
    }
    return c->ok;
}

/* obj.names[i] (a new reference, NULL with an exception); name is its interned name. */
static PyObject *slot_get(SlotCache *c, const char *const *names, int n, PyObject *obj, int i, PyObject *name) {
    PyObject *v;
    if (slots_known(c, obj, names, n) && (v = PS_SLOT(obj, c->at[i])) != NULL)
        return Py_NewRef(v);
    return PyObject_GetAttr(obj, name);
}

/* obj.names[i] = value (an int or str: releasing the old one runs no Python code); 0, or -1. */
static int slot_set(SlotCache *c, const char *const *names, int n, PyObject *obj, int i, PyObject *name,
                    PyObject *value) {
    if (slots_known(c, obj, names, n)) {
        PyObject **at = (PyObject **)((char *)obj + c->at[i]);
        Py_XSETREF(*at, Py_NewRef(value));
        return 0;
    }
    return PyObject_SetAttr(obj, name, value);
}

#define UNIQ_GET(obj, i, name) slot_get(&uniq_slots, UNIQ_SLOTS, 3, obj, i, ps_names[name])
#define INFO_GET(obj, i, name) slot_get(&info_slots, INFO_SLOTS, 2, obj, i, ps_names[name])
#define INDEX_GET(obj) slot_get(&index_slots, INDEX_SLOTS, 1, obj, 0, ps_names[PS_VALUE])
#define BATCHER_GET(obj, i, name) slot_get(&batcher_slots, BATCHER_SLOTS, 2, obj, i, ps_names[name])

/* UniqKeyGenerator.next_id(now) for a time in the millisecond of the last id: the cached prefix and time
 * field and the next counter's four hex digits; the Python method for a new millisecond. */
static PyObject *next_uniq(PyObject *generator, PyObject *now) {
    PyObject *last = NULL, *counter = NULL, *prefix = NULL, *id = NULL, *next = NULL;
    double seconds = PyFloat_AsDouble(now);
    long long now_ms, last_ms;
    long value;
    static const char hex[] = "0123456789ABCDEF";
    if (seconds == -1.0 && PyErr_Occurred())
        return NULL;
    now_ms = (long long)(seconds * 1000.0);
    if ((last = UNIQ_GET(generator, 0, PS_LAST_MS)) == NULL)
        return NULL;
    last_ms = PyLong_AsLongLong(last);
    Py_DECREF(last);
    if (last_ms == -1 && PyErr_Occurred())
        return NULL;
    if (last_ms != now_ms || !(seconds * 1000.0 < 9e18 && seconds * 1000.0 > -9e18))
        return PyObject_CallMethodOneArg(generator, ps_names[PS_NEXT_ID], now);
    if ((counter = UNIQ_GET(generator, 1, PS_COUNTER)) == NULL)
        return NULL;
    value = PyLong_AsLong(counter);
    Py_DECREF(counter);
    if (value == -1 && PyErr_Occurred())
        return NULL;
    value = (value + 1) & 0xFFFF;
    if ((next = PyLong_FromLong(value)) == NULL ||
        slot_set(&uniq_slots, UNIQ_SLOTS, 3, generator, 1, ps_names[PS_COUNTER], next) < 0)
        goto done;
    if ((prefix = UNIQ_GET(generator, 2, PS_TIME_PREFIX)) == NULL)
        goto done;
    if (!PyUnicode_CheckExact(prefix) || !PyUnicode_IS_ASCII(prefix)) {
        PyErr_SetString(PyExc_TypeError, "UniqKeyGenerator._time_prefix is not an ASCII str");
        goto done;
    }
    if ((id = PyUnicode_New(PyUnicode_GET_LENGTH(prefix) + 4, 127)) != NULL) {
        char *at = (char *)PyUnicode_DATA(id);
        memcpy(at, PyUnicode_DATA(prefix), (size_t)PyUnicode_GET_LENGTH(prefix));
        at += PyUnicode_GET_LENGTH(prefix);
        at[0] = hex[(value >> 12) & 0xF];
        at[1] = hex[(value >> 8) & 0xF];
        at[2] = hex[(value >> 4) & 0xF];
        at[3] = hex[value & 0xF];
    }
done:
    Py_XDECREF(next);
    Py_XDECREF(prefix);
    return id;
}

/* A new member Deferred: what Deferred() makes (an empty callbacks list, no canceller). */
static PyObject *new_member(void) {
    PyTypeObject *cls = (PyTypeObject *)ps_member_cls;
    PyObject *member, *cbs;
    int debug;
    if (!ps_member_new || (debug = attr_true(ps_member_cls, fire_names[FN_DEBUG])) != 0)
        return PyErr_Occurred() ? NULL : PyObject_CallNoArgs(ps_member_cls);
    if ((member = cls->tp_new(cls, fd_empty_args, NULL)) == NULL)  /* object.__new__: the instance's values */
        return NULL;
    if ((cbs = PyList_New(0)) == NULL || PyObject_SetAttr(member, fire_names[FN_CALLBACKS], cbs) < 0 ||
        PyObject_SetAttr(member, fire_names[FN_CANCELLER], Py_None) < 0) {
        Py_XDECREF(cbs);
        Py_DECREF(member);
        return NULL;
    }
    Py_DECREF(cbs);
    return member;
}

static int set_member_slot(PyObject *obj, int i, PyObject *value) {
    PyObject *descr = ps_member_slots[i];
    return Py_TYPE(descr)->tp_descr_set(descr, obj, value);
}

/* Slots read at their offsets (member_offsets, _speedups_remoting.h): Message's topic, body, properties;
 * MessageQueue's topic, broker_name, queue_id; the batcher's _Queue's in_flight, waiting, linger_call. */
static PyObject *ps_message_cls, *ps_mq_cls, *ps_queue_cls;
static Py_ssize_t ps_message_at[3], ps_mq_at[3], ps_queue_at[3];

/* _speedups_clientsend.h: a usual send to an idle queue, alone in C */
static PyObject *client_lone_send(PyObject *producer, PyObject *batcher, PyObject *queue, PyObject *addr, PyObject *msg,
                           PyObject *mq, PyObject *mode, PyObject *timeout, PyObject *begin, PyObject *first,
                           PyObject *size_obj);

/* plain_send(producer, msg, mode, timeout): producer._send_plain(msg, mode, timeout). In C when the
 * usual send joins the waiting sends of a queue with a request in flight (the pipelined steady state):
 * every check of _send_plain and AutoBatcher.join is made before anything changes. A usual send to a
 * queue that is idle (or new) ends as _send_plain ends, in Producer._join_or_request. Anything else (no
 * route or broker address, an unusual message or producer, ...) calls the Python method, which gives
 * the same answer from the same state. */
static PyObject *plain_send(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *producer, *msg, *mode, *timeout, *o = NULL, *fault = NULL, *batcher = NULL, *info = NULL,
        *queues = NULL, *index = NULL, *value = NULL, *addrs = NULL, *key = NULL, *queue = NULL, *begin = NULL,
        *first = NULL, *member = NULL, *deadline = NULL, *size_obj = NULL, *next = NULL, *mq, *addr, *borrowed,
        *topic, *body, *props, *waiting = NULL, *limits[3];
    Py_ssize_t n, size, limit[3];
    long long at, in_flight;
    int truth, found, i, joins;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "plain_send takes 4 arguments");
        return NULL;
    }
    producer = args[0], msg = args[1], mode = args[2], timeout = args[3];
    if (!ps_ready || mode == ps_oneway || !PyFloat_Check(timeout) || !(PyFloat_AS_DOUBLE(timeout) > 0) ||
        !Py_IS_TYPE(msg, (PyTypeObject *)ps_message_cls))
        return plain_python(args);
    topic = PS_SLOT(msg, ps_message_at[0]), body = PS_SLOT(msg, ps_message_at[1]), props = PS_SLOT(msg, ps_message_at[2]);
    if (topic == NULL || body == NULL || props == NULL)
        return plain_python(args);
#define CHECK(cond) do { if (!(cond)) goto python; } while (0)
#define GET(obj, name, out) do { if (get(obj, name, out) < 0) goto python; } while (0)
#define FALSE_ATTR(obj, name) do { GET(obj, name, &o); truth = PyObject_IsTrue(o); Py_CLEAR(o); CHECK(truth == 0); } while (0)
    Py_INCREF(topic);
    Py_INCREF(body);
    Py_INCREF(props);
    GET(producer, PS_BATCHER, &batcher);
    CHECK(batcher != Py_None);
    GET(producer, PS_RUNNING, &o);
    truth = PyObject_IsTrue(o);
    Py_CLEAR(o);
    CHECK(truth == 1);
    FALSE_ATTR(producer, PS_SEND_HOOKS);
    FALSE_ATTR(producer, PS_FORBID_HOOKS);
    GET(producer, PS_FAULT, &fault);
    CHECK((o = slot_get(&fault_slots, FAULT_SLOTS, 1, fault, 0, ps_names[PS_ENABLED])) != NULL);
    truth = PyObject_IsTrue(o);
    Py_CLEAR(o);
    CHECK(truth == 0);
    if (mode == ps_sync)
        FALSE_ATTR(producer, PS_RETRY_ANOTHER);
    GET(producer, PS_PUBLISH, &o);
    CHECK(PyDict_CheckExact(o));
    info = PyDict_GetItemWithError(o, topic);  /* borrowed */
    Py_CLEAR(o);
    CHECK(info != NULL);
    Py_INCREF(info);
    CHECK((queues = INFO_GET(info, 0, PS_QUEUES)) != NULL);
    CHECK(PyList_CheckExact(queues) && (n = PyList_GET_SIZE(queues)) > 0);
    /* plain_entry_size(msg, valid_topics, max_message_size, compress_over, batcher.max_bytes) */
    limits[0] = limits[1] = limits[2] = NULL;
    if (get(producer, PS_MAX_SIZE, &limits[0]) == 0 && get(producer, PS_COMPRESS_OVER, &limits[1]) == 0)
        limits[2] = BATCHER_GET(batcher, 0, PS_MAX_BYTES);
    for (i = 0; i < 3; i++) {
        limit[i] = limits[i] == NULL ? -1 : PyLong_AsSsize_t(limits[i]);
        Py_XDECREF(limits[i]);
    }
    CHECK(!PyErr_Occurred() && limit[0] >= 0 && limit[1] >= 0 && limit[2] >= 0);
    size = plain_size(topic, body, props, ps_valid_topics, limit[0], limit[1], limit[2]);  /* _speedups_client.h */
    CHECK(size >= 0);
    /* the queue select_one gives (RoundRobinIndex.next), without moving the index yet */
    CHECK((index = INFO_GET(info, 1, PS_INDEX)) != NULL);
    CHECK(Py_IS_TYPE(index, (PyTypeObject *)ps_index_cls));
    CHECK((value = INDEX_GET(index)) != NULL);
    CHECK(PyLong_CheckExact(value));
    at = PyLong_AsLongLong(value);
    CHECK(!(at == -1 && PyErr_Occurred()));
    at = (at + 1) & 0x7FFFFFFF;
    mq = PyList_GET_ITEM(queues, (Py_ssize_t)(at % n));  /* borrowed from queues */
    CHECK(Py_IS_TYPE(mq, (PyTypeObject *)ps_mq_cls) && PS_SLOT(mq, ps_mq_at[0]) != NULL &&
          PS_SLOT(mq, ps_mq_at[1]) != NULL && PS_SLOT(mq, ps_mq_at[2]) != NULL);
    /* its master's address (ClientInstance.master_address) */
    GET(producer, PS_INSTANCE, &o);
    GET(o, PS_BROKER_ADDRS, &addrs);
    Py_CLEAR(o);
    CHECK(PyDict_CheckExact(addrs));
    borrowed = PyDict_GetItemWithError(addrs, PS_SLOT(mq, ps_mq_at[1]));  /* the broker's addresses */
    CHECK(borrowed != NULL && PyDict_CheckExact(borrowed));
    addr = PyDict_GetItemWithError(borrowed, ps_master_id);
    CHECK(addr != NULL && PyUnicode_CheckExact(addr));
    Py_INCREF(addr);
    Py_SETREF(addrs, addr);  /* keeps the address */
    /* its automatic-batch queue (AutoBatcher.join's key), with a request in flight */
    key = PyTuple_Pack(5, addr, PS_SLOT(mq, ps_mq_at[0]), PS_SLOT(mq, ps_mq_at[1]), PS_SLOT(mq, ps_mq_at[2]), mode);
    CHECK(key != NULL);
    CHECK((o = BATCHER_GET(batcher, 1, PS_QUEUES_BY_KEY)) != NULL);
    CHECK(PyDict_CheckExact(o));
    queue = PyDict_GetItemWithError(o, key);
    Py_XINCREF(queue);
    Py_CLEAR(o);
    /* join appends to the waiting sends, and schedules nothing, when a request is in flight or sends wait
     * for a flush already scheduled; anything else (a new queue, a send that goes alone or lingers) is
     * join's own, called from Producer._join_or_request as _send_plain calls it */
    joins = queue != NULL && Py_IS_TYPE(queue, (PyTypeObject *)ps_queue_cls);
    if (joins) {
        o = PS_SLOT(queue, ps_queue_at[0]);
        waiting = PS_SLOT(queue, ps_queue_at[1]);
        CHECK(o != NULL && PyLong_CheckExact(o) && waiting != NULL && PyList_CheckExact(waiting));
        in_flight = PyLong_AsLongLong(o);
        o = NULL;
        joins = in_flight > 0 || (in_flight == 0 && PyList_GET_SIZE(waiting) > 0 &&
                                  PS_SLOT(queue, ps_queue_at[2]) != NULL && PS_SLOT(queue, ps_queue_at[2]) != Py_None);
    }
    CHECK(!PyErr_Occurred());
    GET(producer, PS_CLOCK, &o);
    begin = PyObject_CallMethodNoArgs(o, ps_names[PS_SECONDS]);
    Py_CLEAR(o);
    CHECK(begin != NULL && PyFloat_Check(begin));
    if ((found = PyDict_Contains(props, ps_uniq)) < 0)
        goto python;
    /* from here on, what _send_plain and join change */
    if ((next = PyLong_FromLongLong(at)) == NULL ||
        slot_set(&index_slots, INDEX_SLOTS, 1, index, 0, ps_names[PS_VALUE], next) < 0)
        goto error;
    if (!found) {
        PyObject *generator = PyObject_GetAttr(producer, ps_names[PS_UNIQ]), *id;
        if (generator == NULL)
            goto error;
        id = next_uniq(generator, begin);
        Py_DECREF(generator);
        if (id == NULL || PyDict_SetItem(props, ps_uniq, id) < 0) {
            Py_XDECREF(id);
            goto error;
        }
        Py_DECREF(id);
    }
    if ((first = PyTuple_Pack(6, msg, mq, mode, timeout, Py_None, begin)) == NULL ||
        (size_obj = PyLong_FromSsize_t(size)) == NULL)
        goto error;
    if (!joins) {  /* alone in C (client_lone_send, _speedups_clientsend.h), else as _send_plain ends */
        PyObject *call[10] = {producer, batcher, addr, msg, mq, mode, timeout, first, size_obj, begin};
        member = client_lone_send(producer, batcher, queue, addr, msg, mq, mode, timeout, begin, first, size_obj);
        if (member == NULL && !PyErr_Occurred())
            member = PyObject_VectorcallMethod(ps_names[PS_JOIN_OR_REQUEST], call,
                                               10 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        goto done;
    }
    if ((deadline = PyNumber_Add(begin, timeout)) == NULL || (member = new_member()) == NULL || set_member_slot(member, 0, msg) < 0 ||
        set_member_slot(member, 1, size_obj) < 0 || set_member_slot(member, 2, deadline) < 0 ||
        set_member_slot(member, 3, first) < 0 || PyList_Append(waiting, member) < 0)
        goto error;
    goto done;
python:
    if (PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            goto error;
        PyErr_Clear();
    }
    Py_CLEAR(member);
    member = plain_python(args);
    goto done;
error:
    Py_CLEAR(member);
done:
#undef CHECK
#undef GET
#undef FALSE_ATTR
    Py_XDECREF(topic);
    Py_XDECREF(body);
    Py_XDECREF(props);
    Py_XDECREF(o);
    Py_XDECREF(fault);
    Py_XDECREF(batcher);
    Py_XDECREF(info);
    Py_XDECREF(queues);
    Py_XDECREF(index);
    Py_XDECREF(value);
    Py_XDECREF(addrs);
    Py_XDECREF(key);
    Py_XDECREF(queue);
    Py_XDECREF(begin);
    Py_XDECREF(first);
    Py_XDECREF(deadline);
    Py_XDECREF(size_obj);
    Py_XDECREF(next);
    return member;
}

/* ---- a queue's waiting sends into batch requests (AutoBatcher._flush, _send_chunk) ------------------- */

static Py_ssize_t ws_at[3] = {-1, -1, -1};  /* the member's msg, size, deadline slots (set by plain_setup) */

/* The offset of a plain object slot's descriptor, else -1. */
static Py_ssize_t descr_offset(PyObject *descr) {
    PyMemberDef *m = Py_IS_TYPE(descr, &PyMemberDescr_Type) ? ((PyMemberDescrObject *)descr)->d_member : NULL;
    return m != NULL && m->type == T_OBJECT_EX && !(m->flags & READONLY) ? m->offset : -1;
}

/* member.<slot i> as a double (borrowed reads of a member of the member class); 0 when unusual. */
static int member_number(PyObject *member, int i, double *out) {
    PyObject *v = PS_SLOT(member, ws_at[i]);
    if (v == NULL || !(PyFloat_CheckExact(v) || PyLong_CheckExact(v)))
        return 0;
    *out = PyFloat_CheckExact(v) ? PyFloat_AS_DOUBLE(v) : PyLong_AsDouble(v);
    return !(*out == -1.0 && PyErr_Occurred());
}

/* split_waiting(waiting, now, max_bytes, max_count) -> list | None: autobatch.split_waiting's parts (lists of
 * members within the limits, and members whose deadline passed), None for anything unusual (Python then). */
static PyObject *split_waiting(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *waiting, *parts = NULL, *chunk = NULL, *member;
    double now, deadline, size, total = 0, max_bytes;
    Py_ssize_t i, n, max_count;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "split_waiting takes 4 arguments");
        return NULL;
    }
    waiting = args[0];
    if (!ps_ready || ws_at[0] < 0 || !PyList_CheckExact(waiting) || !PyFloat_CheckExact(args[1]) ||
        !PyLong_CheckExact(args[2]) || !PyLong_CheckExact(args[3]))
        Py_RETURN_NONE;
    now = PyFloat_AS_DOUBLE(args[1]);
    max_bytes = PyLong_AsDouble(args[2]);
    max_count = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    n = PyList_GET_SIZE(waiting);
    for (i = 0; i < n; i++) {  /* all usual first: then nothing below can run Python code */
        member = PyList_GET_ITEM(waiting, i);
        if (!Py_IS_TYPE(member, (PyTypeObject *)ps_member_cls) || !member_number(member, 1, &size) ||
            !member_number(member, 2, &deadline)) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
    }
    if ((parts = PyList_New(0)) == NULL)
        return NULL;
    for (i = 0; i < n; i++) {
        member = PyList_GET_ITEM(waiting, i);
        member_number(member, 1, &size);
        member_number(member, 2, &deadline);
        if (deadline <= now) {
            if (PyList_Append(parts, member) < 0)
                goto error;
            continue;
        }
        if (chunk != NULL && (total + size > max_bytes || PyList_GET_SIZE(chunk) >= max_count)) {
            if (PyList_Append(parts, chunk) < 0)
                goto error;
            Py_CLEAR(chunk);
        }
        if (chunk == NULL) {
            if ((chunk = PyList_New(0)) == NULL)
                goto error;
            total = 0;
        }
        if (PyList_Append(chunk, member) < 0)
            goto error;
        total += size;
    }
    if (chunk != NULL && PyList_Append(parts, chunk) < 0)
        goto error;
    Py_XDECREF(chunk);
    return parts;
error:
    Py_XDECREF(chunk);
    Py_DECREF(parts);
    return NULL;
}

/* batch_of(chunk) -> (msgs, ids, earliest deadline) | None: autobatch.batch_of, None for anything unusual. */
static PyObject *batch_of(PyObject *self, PyObject *chunk) {
    PyObject *msgs = NULL, *ids = NULL, *sep = NULL, *earliest = NULL, *member, *msg, *props, *id, *r = NULL;
    Py_ssize_t i, n;
    if (!ps_ready || ws_at[0] < 0 || !PyList_CheckExact(chunk) || (n = PyList_GET_SIZE(chunk)) == 0)
        Py_RETURN_NONE;
    if ((msgs = PyList_New(n)) == NULL || (ids = PyList_New(n)) == NULL)
        goto done;
    for (i = 0; i < n; i++) {
        PyObject *deadline;
        member = PyList_GET_ITEM(chunk, i);
        if (!Py_IS_TYPE(member, (PyTypeObject *)ps_member_cls) || (msg = PS_SLOT(member, ws_at[0])) == NULL ||
            (deadline = PS_SLOT(member, ws_at[2])) == NULL || !PyFloat_CheckExact(deadline) ||
            !Py_IS_TYPE(msg, (PyTypeObject *)ps_message_cls) || (props = PS_SLOT(msg, ps_message_at[2])) == NULL ||
            !PyDict_CheckExact(props) || (id = PyDict_GetItemWithError(props, ps_uniq)) == NULL ||
            !PyUnicode_CheckExact(id)) {
            if (!PyErr_Occurred())
                r = Py_NewRef(Py_None);
            goto done;
        }
        PyList_SET_ITEM(msgs, i, Py_NewRef(msg));
        PyList_SET_ITEM(ids, i, Py_NewRef(id));
        if (earliest == NULL || PyFloat_AS_DOUBLE(deadline) < PyFloat_AS_DOUBLE(earliest))
            Py_XSETREF(earliest, Py_NewRef(deadline));
    }
    if ((sep = PyUnicode_FromString(",")) != NULL) {
        PyObject *joined = PyUnicode_Join(sep, ids);
        if (joined != NULL) {
            r = PyTuple_Pack(3, msgs, joined, earliest);
            Py_DECREF(joined);
        }
    }
done:
    Py_XDECREF(msgs);
    Py_XDECREF(ids);
    Py_XDECREF(sep);
    Py_XDECREF(earliest);
    return r;
}

/* ---- a send_batch's body (rocketpy.client.message.batch_body) --------------------------------------- */

/* One more UNIQ_KEY for a batch made at one time: the first by next_uniq (the Python method for a new
 * millisecond), the next ones from the generator's prefix and counter as read after it (no Python code runs
 * in between: the same millisecond), the counter stored back by uniq_run_end. */
typedef struct {
    PyObject *generator, *now, *prefix;
    long counter;
} UniqRun;

static PyObject *uniq_run_next(UniqRun *run) {
    static const char hex[] = "0123456789ABCDEF";
    PyObject *id, *o;
    char *at;
    if (run->prefix == NULL) {
        if ((id = next_uniq(run->generator, run->now)) == NULL)
            return NULL;
        if ((o = UNIQ_GET(run->generator, 1, PS_COUNTER)) == NULL) {
            Py_DECREF(id);
            return NULL;
        }
        run->counter = PyLong_AsLong(o);
        Py_DECREF(o);
        if ((run->counter == -1 && PyErr_Occurred()) ||
            (run->prefix = UNIQ_GET(run->generator, 2, PS_TIME_PREFIX)) == NULL) {
            Py_DECREF(id);
            return NULL;
        }
        if (!PyUnicode_CheckExact(run->prefix) || !PyUnicode_IS_ASCII(run->prefix)) {
            PyErr_SetString(PyExc_TypeError, "UniqKeyGenerator._time_prefix is not an ASCII str");
            Py_DECREF(id);
            return NULL;
        }
        return id;
    }
    run->counter = (run->counter + 1) & 0xFFFF;
    if ((id = PyUnicode_New(PyUnicode_GET_LENGTH(run->prefix) + 4, 127)) == NULL)
        return NULL;
    at = (char *)PyUnicode_DATA(id);
    memcpy(at, PyUnicode_DATA(run->prefix), (size_t)PyUnicode_GET_LENGTH(run->prefix));
    at += PyUnicode_GET_LENGTH(run->prefix);
    at[0] = hex[(run->counter >> 12) & 0xF];
    at[1] = hex[(run->counter >> 8) & 0xF];
    at[2] = hex[(run->counter >> 4) & 0xF];
    at[3] = hex[run->counter & 0xF];
    return id;
}

/* The run's counter stored in the generator (when ids came from it); 0, or -1 (an exception set). */
static int uniq_run_end(UniqRun *run) {
    PyObject *counter;
    int r = 0;
    if (run->prefix == NULL)
        return 0;
    Py_CLEAR(run->prefix);
    if ((counter = PyLong_FromLong(run->counter)) == NULL)
        return -1;
    r = slot_set(&uniq_slots, UNIQ_SLOTS, 3, run->generator, 1, ps_names[PS_COUNTER], counter);
    Py_DECREF(counter);
    return r;
}

/* batch_body(msgs, max_size, generator, now) -> (body, ids) | None: rocketpy.client.message.batch_body for a
 * usual batch: a list of Message whose topic check_topic accepted already (valid_topics), no retry topic,
 * bodies of 1..max_size bytes, properties dicts with no DELAY and a str UNIQ_KEY or none. Every message is
 * checked before anything changes: None (nothing changed) for anything else, and the Python function gives
 * the answer or the error. */
static PyObject *batch_body(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *msgs, *topic = NULL, *ids = NULL, *body = NULL, *joined = NULL, *sep = NULL, *r = NULL;
    UniqRun run = {NULL, NULL, NULL, 0};
    Py_ssize_t i, n, max_size;
    int found;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "batch_body takes 4 arguments");
        return NULL;
    }
    msgs = args[0];
    if (!ps_ready || !PyList_CheckExact(msgs) || (n = PyList_GET_SIZE(msgs)) == 0 || !PyLong_CheckExact(args[1]) ||
        !PyFloat_CheckExact(args[3]) || plain_names_ready() < 0)
        goto unusual;
    if ((max_size = PyLong_AsSsize_t(args[1])) < 0)
        goto unusual;
    for (i = 0; i < n; i++) {  /* all checks first; none runs Python code (exact str keys, dicts, a set) */
        PyObject *msg = PyList_GET_ITEM(msgs, i), *t, *b, *props, *id;
        if (!Py_IS_TYPE(msg, (PyTypeObject *)ps_message_cls))
            goto unusual;
        t = PS_SLOT(msg, ps_message_at[0]), b = PS_SLOT(msg, ps_message_at[1]), props = PS_SLOT(msg, ps_message_at[2]);
        if (t == NULL || b == NULL || props == NULL || !PyUnicode_CheckExact(t) || !PyBytes_CheckExact(b) ||
            PyBytes_GET_SIZE(b) == 0 || PyBytes_GET_SIZE(b) > max_size || !PyDict_CheckExact(props))
            goto unusual;
        if (topic == NULL) {
            if (!PySet_CheckExact(ps_valid_topics) || (found = PySet_Contains(ps_valid_topics, t)) != 1 ||
                (found = (int)PyUnicode_Tailmatch(t, plain_names[PN_RETRY], 0, PY_SSIZE_T_MAX, -1)) != 0)
                goto unusual;
            topic = t;
        } else if (t != topic && PyUnicode_Compare(t, topic) != 0) {
            goto unusual;
        }
        if ((found = PyDict_Contains(props, plain_names[PN_DELAY])) != 0)
            goto unusual;
        id = PyDict_GetItemWithError(props, ps_uniq);
        if (id == NULL ? PyErr_Occurred() != NULL : !PyUnicode_CheckExact(id))
            goto unusual;
    }
    if ((ids = PyList_New(n)) == NULL)
        return NULL;
    run.generator = args[2], run.now = args[3];
    for (i = 0; i < n; i++) {  /* the missing ids, in order (a message listed twice gets one) */
        PyObject *props = PS_SLOT(PyList_GET_ITEM(msgs, i), ps_message_at[2]);
        PyObject *id = PyDict_GetItemWithError(props, ps_uniq);
        if (id != NULL) {
            PyList_SET_ITEM(ids, i, Py_NewRef(id));
            continue;
        }
        if (PyErr_Occurred() || (id = uniq_run_next(&run)) == NULL)
            goto error;
        PyList_SET_ITEM(ids, i, id);
        if (PyDict_SetItem(props, ps_uniq, id) < 0)
            goto error;
    }
    if (uniq_run_end(&run) < 0 || (body = encode_batch(NULL, msgs)) == NULL ||
        (sep = PyUnicode_FromStringAndSize(",", 1)) == NULL || (joined = PyUnicode_Join(sep, ids)) == NULL)
        goto error;
    r = PyTuple_Pack(2, body, joined);
    goto error;  /* the common end */
unusual:
    if (PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            return NULL;
        PyErr_Clear();
    }
    Py_RETURN_NONE;
error:
    if (run.prefix != NULL) {  /* ids were made: the counter is stored whatever failed after */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        if (uniq_run_end(&run) < 0)
            PyErr_Clear();
        PyErr_Restore(type, value, tb);
    }
    Py_XDECREF(ids);
    Py_XDECREF(body);
    Py_XDECREF(sep);
    Py_XDECREF(joined);
    return r;
}

/* plain_setup(sync, oneway, valid_topics, member_cls, index_cls, uniq_key, master_id, message_cls, mq_cls,
 * queue_cls): after fire_setup; plain_send calls the Python method for every send when a class is not as
 * expected. */
static PyObject *plain_setup(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static const char *const message_names[] = {"topic", "body", "properties"};
    static const char *const mq_names[] = {"topic", "broker_name", "queue_id"};
    static const char *const queue_names[] = {"in_flight", "waiting", "linger_call"};
    int i;
    PyObject *init, *base_init;
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "plain_setup takes 10 arguments");
        return NULL;
    }
    if (fire_check() < 0 || plain_names_ready() < 0)
        return NULL;
    for (i = 0; i < PS_COUNT; i++)
        if (ps_names[i] == NULL && (ps_names[i] = PyUnicode_InternFromString(PS_NAMES[i])) == NULL)
            return NULL;
    for (i = 3; i < 10; i++)
        if (i != 5 && i != 6 && !PyType_Check(args[i])) {
            PyErr_SetString(PyExc_TypeError, "plain_setup: expected a class");
            return NULL;
        }
    ps_ready = 0;
    for (i = 0; i < 4; i++) {
        PyObject *descr = PyDict_GetItemWithError(((PyTypeObject *)args[3])->tp_dict, ps_names[PS_M_MSG + i]);
        if (descr == NULL || Py_TYPE(descr)->tp_descr_set == NULL) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "the member class has no slot %U", ps_names[PS_M_MSG + i]);
            return NULL;
        }
        Py_XSETREF(ps_member_slots[i], Py_NewRef(descr));
        if (i < 3)
            ws_at[i] = descr_offset(descr);
    }
    Py_XSETREF(ps_sync, Py_NewRef(args[0]));
    Py_XSETREF(ps_oneway, Py_NewRef(args[1]));
    Py_XSETREF(ps_valid_topics, Py_NewRef(args[2]));
    Py_XSETREF(ps_member_cls, Py_NewRef(args[3]));
    Py_XSETREF(ps_index_cls, Py_NewRef(args[4]));
    Py_XSETREF(ps_uniq, Py_NewRef(args[5]));
    Py_XSETREF(ps_master_id, Py_NewRef(args[6]));
    Py_XSETREF(ps_message_cls, Py_NewRef(args[7]));
    Py_XSETREF(ps_mq_cls, Py_NewRef(args[8]));
    Py_XSETREF(ps_queue_cls, Py_NewRef(args[9]));
    /* made without a call only when its __init__ is Deferred's (checked by firing.twisted_fits) */
    init = PyObject_GetAttrString(args[3], "__init__");
    base_init = PyObject_GetAttrString((PyObject *)((PyTypeObject *)args[3])->tp_base, "__init__");
    ps_member_new = init != NULL && init == base_init && PySequence_Contains(fd_subclasses, args[3]) == 1 &&
                    ((PyTypeObject *)args[3])->tp_new == PyBaseObject_Type.tp_new;
    Py_XDECREF(init);
    Py_XDECREF(base_init);
    PyErr_Clear();
    ps_ready = named_offsets(args[7], message_names, 3, ps_message_at) &&
               named_offsets(args[8], mq_names, 3, ps_mq_at) && named_offsets(args[9], queue_names, 3, ps_queue_at);
    return PyBool_FromLong(ps_ready);
}

#define PRODUCER_METHODS                                                                              \
    {"fire", (PyCFunction)(void (*)(void))fire, METH_FASTCALL, "C Deferred.callback (rocketpy.client.firing)."}, \
    {"deliver", (PyCFunction)(void (*)(void))deliver, METH_FASTCALL,                                  \
     "C rocketpy.client.autobatch._deliver's loop: each member fired with its SendResult."},         \
    {"fire_setup", (PyCFunction)(void (*)(void))fire_setup, METH_VARARGS | METH_KEYWORDS,             \
     "Register Twisted's Deferred pieces and SendResult for fire and deliver."},                     \
    {"fire_methods", fire_methods, METH_O, "Give a Deferred subclass C addCallback, addErrback, addBoth."}, \
    {"plain_send", (PyCFunction)(void (*)(void))plain_send, METH_FASTCALL,                            \
     "Producer._send_plain, in C when the send joins a busy queue's next automatic batch."},          \
    {"plain_setup", (PyCFunction)(void (*)(void))plain_setup, METH_FASTCALL,                          \
     "Register Mode.SYNC, Mode.ONEWAY, valid_topics, the member and index classes for plain_send."}, \
    {"split_waiting", (PyCFunction)(void (*)(void))split_waiting, METH_FASTCALL,                    \
     "C rocketpy.client.autobatch.split_waiting, or None for the Python one."},                       \
    {"batch_of", batch_of, METH_O, "C rocketpy.client.autobatch.batch_of, or None for the Python one."}, \
    {"batch_body", (PyCFunction)(void (*)(void))batch_body, METH_FASTCALL,                            \
     "C rocketpy.client.message.batch_body, or None (nothing changed) for the Python one."},
