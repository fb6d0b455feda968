/* rocketpy._speedups, the store service's part of a lone send without a Python frame (doc/benchmarks.md,
 * "Thirty-fourth pass: the lone send's read without Python"): included once, after _speedups_storeput.h and
 * _speedups_loneread.h (lr_true, lr_call), whose helpers it uses; _speedups_request.h (lone_send) and
 * _speedups_answerfirst.h (answer_first) call through it.
 *
 * set_lone_store(put_lone_now, lone_answered, put_lone, put_ok)
 *     rocketpy/store/service.py at import: the functions StoreService.put_lone_now, StoreService.lone_answered
 *     and MessageStore.put_lone (the references), and PutMessageStatus.PUT_OK.
 * store_put_now(put, msg)
 *     put(msg) where put is a store's put_lone_now: when it is StoreService.put_lone_now bound to a service and
 *     the put completes at once (the writer idle, no hook, ASYNC_FLUSH, ...: its first test), that method's
 *     work here, its store's put_lone too when that is MessageStore.put_lone; anything else the method does.
 * store_answered(answered)
 *     answered() where answered is a store's lone_answered: StoreService.lone_answered's work here when it is
 *     that method bound to a service (its arrival notices through ArrivalListeners.of's tuples), else the call.
 */

static PyObject *ls_put_now, *ls_answered, *ls_put_lone, *ls_put_ok, *ls_slave;
static PyObject *str_ls_put_lone, *str_ls_sync_flush, *str_ls_completion, *str_ls_hooks, *str_ls_inline,
    *str_ls_hop_started, *str_ls_queue, *str_ls_delivering, *str_ls_ready, *str_ls_accepting, *str_ls_in_pool,
    *str_ls_running, *str_ls_queued_messages, *str_ls_max_queued, *str_ls_reactor, *str_ls_seconds, *str_ls_populating,
    *str_ls_populate, *str_ls_answering, *str_ls_status, *str_ls_lone_raised, *str_ls_enqueue_single, *str_ls_lone_put,
    *str_ls_commit_log, *str_ls_speedups, *str_ls_config, *str_ls_broker_role, *str_ls_dispatch_failed,
    *str_ls_retention, *str_ls_disk_full, *str_ls_topic, *str_ls_queue_id, *str_ls_arrivals, *str_ls_by_topic,
    *str_ls_every, *str_ls_store, *str_ls_max_offset, *str_ls_notify_arrival, *str_ls_drained, *str_ls_hop_finished;

static int lone_store_names(void) {
    static const char *const names[] = {
        "_put_lone", "_sync_flush", "_completion", "hooks", "_inline", "_hop_started", "_queue", "_delivering",
        "_ready", "_accepting", "_in_pool", "running", "_queued_messages", "_max_queued", "_reactor", "seconds",
        "_populating", "_populate", "_answering", "status", "_lone_raised", "_enqueue_single", "_lone_put",
        "commit_log", "speedups", "config", "broker_role", "dispatch_failed", "retention", "disk_full", "topic",
        "queue_id", "_arrivals", "by_topic", "every", "_store", "get_max_offset_in_queue", "_notify_arrival",
        "_drained", "_hop_finished", "SLAVE"};
    static PyObject **const out[] = {
        &str_ls_put_lone, &str_ls_sync_flush, &str_ls_completion, &str_ls_hooks, &str_ls_inline, &str_ls_hop_started,
        &str_ls_queue, &str_ls_delivering, &str_ls_ready, &str_ls_accepting, &str_ls_in_pool, &str_ls_running,
        &str_ls_queued_messages, &str_ls_max_queued, &str_ls_reactor, &str_ls_seconds, &str_ls_populating,
        &str_ls_populate, &str_ls_answering, &str_ls_status, &str_ls_lone_raised, &str_ls_enqueue_single,
        &str_ls_lone_put, &str_ls_commit_log, &str_ls_speedups, &str_ls_config, &str_ls_broker_role,
        &str_ls_dispatch_failed, &str_ls_retention, &str_ls_disk_full, &str_ls_topic, &str_ls_queue_id,
        &str_ls_arrivals, &str_ls_by_topic, &str_ls_every, &str_ls_store, &str_ls_max_offset, &str_ls_notify_arrival,
        &str_ls_drained, &str_ls_hop_finished, &ls_slave};
    return intern_names(names, out, (int)(sizeof(names) / sizeof(names[0])));
}

static PyObject *set_lone_store(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "set_lone_store(put_lone_now, lone_answered, put_lone, put_ok)");
        return NULL;
    }
    if (lone_read_names() < 0 || lone_store_names() < 0)
        return NULL;
    Py_XSETREF(ls_put_now, Py_NewRef(args[0]));
    Py_XSETREF(ls_answered, Py_NewRef(args[1]));
    Py_XSETREF(ls_put_lone, Py_NewRef(args[2]));
    Py_XSETREF(ls_put_ok, Py_NewRef(args[3]));
    Py_RETURN_NONE;
}

/* Reading a service's and its message store's attributes (_speedups_attrs.h); the types' slots, copied for each use */
static PyObject *const *const ls_service_names[] = {
    &str_ls_put_lone, &str_ls_sync_flush, &str_ls_completion, &str_ls_inline, &str_ls_hop_started, &str_ls_queue,
    &str_ls_delivering, &str_ls_ready, &str_ls_accepting, &str_ls_in_pool, &str_ls_queued_messages, &str_ls_max_queued,
    &str_ls_reactor, &str_ls_populating, &str_ls_answering, &str_ls_arrivals, &str_ls_store, &str_ls_drained};
static turn_attrs ls_service_attrs = {NULL, 0, ls_service_names, sizeof(ls_service_names) / sizeof(PyObject **),
                                      NULL, 0};
static PyObject *const *const ls_store_names[] = {&str_ls_lone_put, &str_ls_commit_log, &str_ls_running,
                                                  &str_ls_config, &str_ls_retention};
static turn_attrs ls_store_attrs = {NULL, 0, ls_store_names, sizeof(ls_store_names) / sizeof(PyObject **), NULL, 0};

/* The object bound method m is bound to (borrowed) when m is function bound; NULL otherwise. */
static PyObject *ls_bound(PyObject *m, PyObject *function) {
    return function != NULL && PyMethod_Check(m) && PyMethod_GET_FUNCTION(m) == function ? PyMethod_GET_SELF(m) : NULL;
}

/* obj.name is None (one of attrs' names; attrs NULL: any): 1, 0, or -1 with an exception */
static int ls_is_none(turn_attrs *attrs, PyObject *obj, PyObject *name) {
    PyObject *v = attrs != NULL ? attrs_get(attrs, obj, name) : PyObject_GetAttr(obj, name);
    int r = v == NULL ? -1 : v == Py_None;
    Py_XDECREF(v);
    return r;
}

/* obj.name.inner's truth (name one of attrs' names): 1, 0, or -1 with an exception */
static int ls_inner_true(turn_attrs *attrs, PyObject *obj, PyObject *name, PyObject *inner) {
    PyObject *v = attrs_get(attrs, obj, name);
    int r = v == NULL ? -1 : lr_true(v, inner);
    Py_XDECREF(v);
    return r;
}

/* put_lone_now's first test (the reference), true: 1 (the put may complete at once), 0, or -1 with an exception */
static int ls_open(turn_attrs *a, PyObject *s) {
    /* not (lone is None or not self._completes_at_once() or self._queued_messages >= self._max_queued), with
     * _completes_at_once: not (self._sync_flush or self._completion.hooks or not self._inline or
     * self._hop_started is not None or self._queue or self._delivering or not self._ready or not self._accepting
     * or self._in_pool.running) */
    PyObject *queued, *most;
    int r;
    if ((r = ls_is_none(a, s, str_ls_put_lone)) != 0 || (r = attrs_true(a, s, str_ls_sync_flush)) != 0 ||
        (r = ls_inner_true(a, s, str_ls_completion, str_ls_hooks)) != 0 || (r = attrs_true(a, s, str_ls_inline)) != 1 ||
        (r = ls_is_none(a, s, str_ls_hop_started)) != 1 || (r = attrs_true(a, s, str_ls_queue)) != 0 ||
        (r = attrs_true(a, s, str_ls_delivering)) != 0 || (r = attrs_true(a, s, str_ls_ready)) != 1 ||
        (r = attrs_true(a, s, str_ls_accepting)) != 1 || (r = ls_inner_true(a, s, str_ls_in_pool, str_ls_running)) != 0)
        return r < 0 ? -1 : 0;
    if ((queued = attrs_get(a, s, str_ls_queued_messages)) == NULL)
        return -1;
    if ((most = attrs_get(a, s, str_ls_max_queued)) == NULL) {
        Py_DECREF(queued);
        return -1;
    }
    r = PyObject_RichCompareBool(queued, most, Py_GE);
    Py_DECREF(queued);
    Py_DECREF(most);
    return r < 0 ? -1 : !r;
}

/* 1 when MessageStore.put_lone (the reference) of store may append (its first test), 0 when it returns None,
 * -1 with an exception; *lone and *log its _lone_put and commit_log (new references) when 1 */
static int ls_may_put(PyObject *store, PyObject **lone, PyObject **log) {
    /* if lone is None or log.speedups is None or not self.running or self.config.broker_role == "SLAVE" or
     * log.dispatch_failed or self.retention.disk_full: return None */
    PyObject *config, *role;
    turn_attrs a;
    int r;
    *lone = *log = NULL;
    if (lr_begin(&a, &ls_store_attrs, store) < 0 || (*lone = attrs_get(&a, store, str_ls_lone_put)) == NULL ||
        (*log = attrs_get(&a, store, str_ls_commit_log)) == NULL)
        goto refused;
    if (*lone == Py_None || (r = ls_is_none(NULL, *log, str_ls_speedups)) != 0 ||
        (r = attrs_true(&a, store, str_ls_running)) != 1)
        goto refused;
    if ((config = attrs_get(&a, store, str_ls_config)) == NULL)
        goto refused;
    role = PyObject_GetAttr(config, str_ls_broker_role);
    Py_DECREF(config);
    if (role == NULL)
        goto refused;
    r = PyObject_RichCompareBool(role, ls_slave, Py_EQ);
    Py_DECREF(role);
    if (r != 0 || (r = lr_true(*log, str_ls_dispatch_failed)) != 0 ||
        (r = ls_inner_true(&a, store, str_ls_retention, str_ls_disk_full)) != 0)
        goto refused;
    attrs_end(&a);
    return 1;
refused:
    attrs_end(&a);
    Py_CLEAR(*lone);
    Py_CLEAR(*log);
    return PyErr_Occurred() ? -1 : 0;
}

/* MessageStore.put_lone(msg) of store, sync None: lone_put(log, msg), or None */
static PyObject *ls_put_lone_of(PyObject *store, PyObject *msg) {
    PyObject *lone, *log, *stored;
    int r = ls_may_put(store, &lone, &log);
    if (r <= 0)
        return r < 0 ? NULL : Py_NewRef(Py_None);
    {
        PyObject *args[2] = {log, msg};
        stored = PyObject_Vectorcall(lone, args, 2, NULL);
    }
    Py_DECREF(lone);
    Py_DECREF(log);
    return stored;
}

/* What put_lone_now does once its first test passed (the reference, from self._hop_started = ... on) */
static PyObject *ls_put_now_open(turn_attrs *a, PyObject *service, PyObject *msg) {
    PyObject *lone, *reactor, *now, *stored, *store, *answering, *status;
    PyObject *result, *max_offset, *due;
    int r;
    if ((lone = attrs_get(a, service, str_ls_put_lone)) == NULL)
        return NULL;
    if ((reactor = attrs_get(a, service, str_ls_reactor)) == NULL) {
        Py_DECREF(lone);
        return NULL;
    }
    now = PyObject_CallMethodNoArgs(reactor, str_ls_seconds);  /* the writer's state is ours until lone_answered */
    Py_DECREF(reactor);
    r = now == NULL ? -1 : attrs_set(a, service, str_ls_hop_started, now);
    Py_XDECREF(now);
    if (r < 0) {
        Py_DECREF(lone);
        return NULL;
    }
    store = ls_bound(lone, ls_put_lone);
    stored = store != NULL ? ls_put_lone_of(store, msg) : PyObject_CallOneArg(lone, msg);
    Py_DECREF(lone);
    if (stored == NULL) {  /* except Exception as e: return self._lone_raised(msg, e) */
        PyObject *type, *value, *tb;
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            return NULL;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        if (tb != NULL)
            PyException_SetTraceback(value, tb);
        {
            PyObject *call[3] = {service, msg, value};
            result = PyObject_VectorcallMethod(str_ls_lone_raised, call, 3, NULL);
        }
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        return result;
    }
    if (stored == Py_None) {  /* self._hop_started = None; return self._enqueue_single(msg) */
        PyObject *call[2] = {service, msg};
        Py_DECREF(stored);
        if (attrs_set(a, service, str_ls_hop_started, Py_None) < 0)
            return NULL;
        return PyObject_VectorcallMethod(str_ls_enqueue_single, call, 2, NULL);
    }
    if (!PyTuple_CheckExact(stored) || PyTuple_GET_SIZE(stored) != 3) {
        PyErr_SetString(PyExc_ValueError, "put_lone: not (result, max offset, populate due)");
        Py_DECREF(stored);
        return NULL;
    }
    result = PyTuple_GET_ITEM(stored, 0), max_offset = PyTuple_GET_ITEM(stored, 1), due = PyTuple_GET_ITEM(stored, 2);
    /* if populate_due and not self._populating: self._populate() */
    if ((r = PyObject_IsTrue(due)) > 0 && (r = attrs_true(a, service, str_ls_populating)) == 0)
        r = lr_call(service, str_ls_populate, NULL, 0);
    if (r < 0 || (status = PyObject_GetAttr(result, str_ls_status)) == NULL) {
        Py_DECREF(stored);
        return NULL;
    }
    answering = PyTuple_Pack(3, msg, status, max_offset);  /* self._answering = (msg, result.status, max_offset) */
    Py_DECREF(status);
    r = answering == NULL ? -1 : attrs_set(a, service, str_ls_answering, answering);
    Py_XDECREF(answering);
    result = r < 0 ? NULL : Py_NewRef(result);
    Py_DECREF(stored);
    return result;
}

static PyObject *store_put_now(PyObject *put, PyObject *msg) {
    PyObject *service = ls_bound(put, ls_put_now);
    turn_attrs a;
    int open;
    if (service == NULL)
        return PyObject_CallOneArg(put, msg);
    Py_INCREF(service);
    open = lr_begin(&a, &ls_service_attrs, service) < 0 ? -1 : ls_open(&a, service);
    put = open < 0 ? NULL : open ? ls_put_now_open(&a, service, msg) : PyObject_CallOneArg(put, msg);
    attrs_end(&a);
    Py_DECREF(service);
    return put;
}

/* ArrivalListeners.of(topic) (the reference) of service._arrivals, a new reference */
static PyObject *ls_listeners(turn_attrs *a, PyObject *service, PyObject *topic) {
    PyObject *arrivals = attrs_get(a, service, str_ls_arrivals), *by_topic, *found;
    if (arrivals == NULL)
        return NULL;
    by_topic = PyObject_GetAttr(arrivals, str_ls_by_topic);
    if (by_topic != NULL && PyDict_CheckExact(by_topic) &&
        (found = Py_XNewRef(PyDict_GetItemWithError(by_topic, topic))) != NULL) {
        Py_DECREF(by_topic);
        Py_DECREF(arrivals);
        return found;
    }
    if (by_topic == NULL || PyErr_Occurred()) {
        Py_XDECREF(by_topic);
        Py_DECREF(arrivals);
        return NULL;
    }
    found = PyDict_CheckExact(by_topic) ? PyObject_GetAttr(arrivals, str_ls_every)
                                        : PyObject_CallMethod(arrivals, "of", "O", topic);
    Py_DECREF(by_topic);
    Py_DECREF(arrivals);
    return found;
}

/* lone_answered's arrival notice of a put stored PUT_OK: StoreService._notify_put (the reference); 0, or -1
 * with an exception */
static int ls_notice(turn_attrs *a, PyObject *service, PyObject *msg, PyObject *max_offset) {
    PyObject *topic = PyObject_GetAttr(msg, str_ls_topic), *listeners = NULL, *queue_id = NULL, *found = NULL;
    int r = -1;
    if (topic == NULL || (listeners = ls_listeners(a, service, topic)) == NULL)
        goto done;
    if ((r = PyObject_IsTrue(listeners)) <= 0)  /* else nobody listens to it now */
        goto done;
    r = -1;
    if ((queue_id = PyObject_GetAttr(msg, str_ls_queue_id)) == NULL)
        goto done;
    if (max_offset == Py_None) {  /* self._store.get_max_offset_in_queue(topic, queue_id) */
        PyObject *store = attrs_get(a, service, str_ls_store), *call[3] = {store, topic, queue_id};
        if (store == NULL)
            goto done;
        found = PyObject_VectorcallMethod(str_ls_max_offset, call, 3, NULL);
        Py_DECREF(store);
        if (found == NULL)
            goto done;
        max_offset = found;
    }
    {
        PyObject *args[4] = {listeners, topic, queue_id, max_offset};
        r = lr_call(service, str_ls_notify_arrival, args, 4);
    }
done:
    Py_XDECREF(topic);
    Py_XDECREF(listeners);
    Py_XDECREF(queue_id);
    Py_XDECREF(found);
    return r;
}

static PyObject *store_answered(PyObject *answered) {
    PyObject *service = ls_bound(answered, ls_answered), *answering = NULL;
    turn_attrs a;
    int r, busy = 0;
    if (service == NULL)
        return PyObject_CallNoArgs(answered);
    Py_INCREF(service);
    /* answering, self._answering = self._answering, None */
    if (lr_begin(&a, &ls_service_attrs, service) < 0 || (answering = attrs_get(&a, service, str_ls_answering)) == NULL ||
        attrs_set(&a, service, str_ls_answering, Py_None) < 0) {
        r = -1;
    } else if (answering == Py_None) {
        r = 0;
    } else if (!PyTuple_CheckExact(answering) || PyTuple_GET_SIZE(answering) != 3) {
        PyErr_SetString(PyExc_ValueError, "lone_answered: not (msg, status, max offset)");
        r = -1;
    } else {
        r = PyTuple_GET_ITEM(answering, 1) == ls_put_ok
                ? ls_notice(&a, service, PyTuple_GET_ITEM(answering, 0), PyTuple_GET_ITEM(answering, 2)) : 0;
        /* if self._queue or self._drained: self._hop_finished() else: self._hop_started = None */
        if (r == 0 && (busy = attrs_true(&a, service, str_ls_queue)) == 0)
            busy = attrs_true(&a, service, str_ls_drained);
        if (r < 0 || busy < 0)
            r = -1;
        else
            r = busy ? lr_call(service, str_ls_hop_finished, NULL, 0)
                     : attrs_set(&a, service, str_ls_hop_started, Py_None);
    }
    attrs_end(&a);
    Py_XDECREF(answering);
    Py_DECREF(service);
    if (r < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *store_put_now_py(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "store_put_now(put, msg)");
        return NULL;
    }
    return store_put_now(args[0], args[1]);
}

static PyObject *store_answered_py(PyObject *self, PyObject *answered) {
    return store_answered(answered);
}

#define LONE_STORE_METHODS \
    {"store_put_now", (PyCFunction)(void (*)(void))store_put_now_py, METH_FASTCALL, \
     "store_put_now(store.put_lone_now, msg): what lone_send calls, StoreService.put_lone_now's usual case in C."}, \
    {"store_answered", (PyCFunction)store_answered_py, METH_O, \
     "store_answered(store.lone_answered): what answer_first calls, StoreService.lone_answered in C."}, \
    {"set_lone_store", (PyCFunction)(void (*)(void))set_lone_store, METH_FASTCALL, \
     "set_lone_store(StoreService.put_lone_now, StoreService.lone_answered, MessageStore.put_lone, PUT_OK): " \
     "the store's part of a lone send in C (rocketpy/store/service.py)."},
