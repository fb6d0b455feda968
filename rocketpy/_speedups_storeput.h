/* The store's lone put in one call, included once by rocketpy/_speedups.c after _speedups_store.h
 * (doc/store.md, "Compiled accelerator"; doc/benchmarks.md, "Twenty-second pass: the lone put in one call").
 *
 * lone_put(commit_log, msg) does for one usual message what the store service's inline append
 * does below the service: MessageStore.can_append_inline's checks, then CommitLog.put_many for a
 * put of one message (encode_puts, the lock, place_chunk, the copy into the mapped file,
 * dispatch_chunk, the result, the stats), on either write path. It returns (result, the
 * consume queue's new max offset or None, populate due) where result is the PutMessageResult
 * put_many would give; or None, having changed nothing but the message's store host (which the
 * Python path sets again), whenever anything is unusual: the message (a delay level, a timer, a
 * transaction PREPARED or ROLLBACK flag, a body over the inline bound, not a slotted
 * MessageExt), the commit log (no file, the record would not fit the current file or its
 * faulted-in pages (mmap) or the zeros written ahead (pwrite), the lock taken, a failed pwrite), the consume queue (missing, no file, no room
 * for its entry) or the index (no file, no room for the keys). The caller then takes the Python
 * path, which meets the same case and answers it.
 *
 * Uses from _speedups.c and _speedups_store.h: MessageExt, use_slots, slot_offsets, SLOT,
 * encode_record, as_int64 (I32_OK, I64_OK), put_i64, str_delay and str_timer_*, str_keys,
 * member_offsets, store_names, int_attr, last_of, data_view, offset_id, DispatchCache,
 * cached_queue, load_index, dispatch_record, flush_cache. */

#include <errno.h>
#include <time.h>
#include <unistd.h>

enum { L_QUEUE, L_USE_PWRITE, L_POPULATED, L_ZEROED, L_FD, L_STORE_TS, L_REPUT, L_QUEUE_TABLE, L_HOST_HEX, L_CONFIG, L_STORE_HOST,
       L_MAX_SIZE, L_DISPATCHERS, L_LOCK, L_NOW_MS, L_DISPATCH, L_ACQUIRE, L_RELEASE, L_RECORD_PUT,
       L_DISPATCH_RAISED, L_STATS, L_PUTS, L_RECORDS, L_BYTES, L_PUT_MS_TOTAL, L_TOPIC_BYTES, L_LATENCY, L_MAX_PUT_MS,
       N_LONE_NAMES };
static const char *const LONE_NAMES[N_LONE_NAMES] = {
    "queue", "use_pwrite", "_populated", "_zeroed", "_fd", "store_timestamp", "reput_offset", "topic_queue_table", "_host_hex",
    "config", "store_host", "max_message_size", "dispatchers", "_lock", "now_ms", "dispatch", "acquire",
    "release", "_record_put", "_dispatch_raised", "stats", "puts", "records", "bytes", "put_ms_total", "topic_bytes",
    "latency_buckets", "max_put_ms"};
static PyObject *lone_names[N_LONE_NAMES];

/* Called with the written file right after an append (positions set, not dispatched yet), when set:
 * sync_lone_put (rocketpy/_speedups_syncanswer.h) submits the group commit's fdatasync there. */
static void (*lone_appended)(PyObject *mapped_file);

/* What set_lone_put registered; lone_ready once it all checked out. */
static PyObject *lone_cqs_type, *lone_index_type, *lone_put_type, *lone_append_type, *lone_put_ok, *lone_append_ok,
    *lone_wall_clock, *lone_latency_bounds;
static int64_t lone_max_body, lone_blank, lone_slack, lone_window, lone_warn_ms, lone_zero_window, lone_zeros_due;
static int lone_ready;
enum { PR_STATUS, PR_APPEND, PR_REMARK, N_PR };
enum { AR_STATUS, AR_OFFSET, AR_BYTES, AR_IDS, AR_QUEUE_OFFSET, AR_NUM, AR_STORE_TS, N_AR };
static const char *const PR_NAMES[N_PR] = {"status", "append", "remark"};
static const char *const AR_NAMES[N_AR] = {"status", "wrote_offset", "wrote_bytes", "msg_ids", "queue_offset",
                                           "msg_num", "store_timestamp"};
static Py_ssize_t pr_offsets[N_PR], ar_offsets[N_AR];

/* The offsets of cls's slots names[0..n) (member_offsets with C strings); 0 on any surprise. */
static int named_offsets(PyObject *cls, const char *const *names, int n, Py_ssize_t *out) {
    PyObject *interned[N_AR];
    int i, ok;
    for (i = 0; i < n; i++)
        if ((interned[i] = PyUnicode_InternFromString(names[i])) == NULL) {
            while (--i >= 0)
                Py_DECREF(interned[i]);
            PyErr_Clear();
            return 0;
        }
    ok = member_offsets(cls, interned, n, out);
    for (i = 0; i < n; i++)
        Py_DECREF(interned[i]);
    return ok;
}

/* set_lone_put(ConsumeQueueStore, IndexService, PutMessageResult, AppendMessageResult,
 *              PutMessageStatus.PUT_OK, AppendMessageStatus.PUT_OK, wall_clock_ms, LATENCY_BOUNDS_MS,
 *              max inline body, BLANK_SIZE, RECORD_SLACK, POPULATE_WINDOW, LOCK_WARN_MS, ZERO_AHEAD_WINDOW,
 *              ZEROS_DUE) -> bool (lone_put usable) */
static PyObject *set_lone_put(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject **targets[8] = {&lone_cqs_type, &lone_index_type, &lone_put_type, &lone_append_type, &lone_put_ok,
                             &lone_append_ok, &lone_wall_clock, &lone_latency_bounds};
    int64_t *numbers[7] = {&lone_max_body, &lone_blank, &lone_slack, &lone_window, &lone_warn_ms, &lone_zero_window,
                           &lone_zeros_due};
    int64_t bound;
    int i;
    if (nargs != 15)
        return PyErr_Format(PyExc_TypeError, "set_lone_put() takes 15 arguments");
    lone_ready = 0;
    for (i = 0; i < 7; i++)
        if (!I64_OK(args[8 + i], numbers[i]) || *numbers[i] < 0)
            return PyErr_Format(PyExc_ValueError, "set_lone_put(): argument %d is not a non-negative int", 9 + i);
    if (!PyTuple_CheckExact(args[7]))
        return PyErr_Format(PyExc_TypeError, "set_lone_put(): the latency bounds must be a tuple");
    for (i = 0; i < PyTuple_GET_SIZE(args[7]); i++)
        if (!I64_OK(PyTuple_GET_ITEM(args[7], i), &bound))
            return PyErr_Format(PyExc_TypeError, "set_lone_put(): the latency bounds must be ints");
    for (i = 0; i < 8; i++)
        Py_XSETREF(*targets[i], Py_NewRef(args[i]));
    for (i = 0; i < N_LONE_NAMES; i++)
        if (lone_names[i] == NULL && (lone_names[i] = PyUnicode_InternFromString(LONE_NAMES[i])) == NULL)
            return NULL;
    if (!store_names_ready())
        return NULL;
    lone_ready = PyType_Check(lone_put_type) && PyType_Check(lone_append_type) &&
                 named_offsets(lone_put_type, PR_NAMES, N_PR, pr_offsets) &&
                 named_offsets(lone_append_type, AR_NAMES, N_AR, ar_offsets);
    return PyBool_FromLong(lone_ready);
}

/* A new instance of the slotted class t with its slots[0..n) set to values (new references,
 * stolen; NULL after a failed allocation: then NULL, every value released). */
static PyObject *slotted(PyObject *t, const Py_ssize_t *offsets, PyObject **values, int n) {
    PyObject *o = NULL;
    int i, ok = 1;
    for (i = 0; i < n; i++)
        ok = ok && values[i] != NULL;
    if (ok)
        o = ((PyTypeObject *)t)->tp_alloc((PyTypeObject *)t, 0);
    for (i = 0; i < n; i++) {
        if (o != NULL)
            *(PyObject **)((char *)o + offsets[i]) = values[i];
        else
            Py_XDECREF(values[i]);
    }
    return o;
}

/* The commit log's attributes lone_put reads at every put, kept (borrowed) while its instance dict holds them
 * unchanged: the same dict with the same version tag (PEP 509: any change to the dict gives it a new one), the
 * type's version the same (no data descriptor of the names, generic getattr and setattr). lone_put's own
 * write of reput_offset (an int replaced by an int: no code runs) keeps them. Python 3.11 only (later
 * versions deprecate the tag): elsewhere every read is plain_get's. */
enum { LC_LOCK, LC_NOW_MS, LC_QUEUE, LC_CONFIG, LC_DISPATCHERS, LC_QUEUE_TABLE, LC_HOST_HEX, LC_STATS, N_LC };
static const int LC_NAMES[N_LC] = {L_LOCK, L_NOW_MS, L_QUEUE, L_CONFIG, L_DISPATCHERS, L_QUEUE_TABLE, L_HOST_HEX,
                                   L_STATS};
static struct {
    PyTypeObject *type;  /* compared only */
    unsigned int tag;  /* the type's version tag; 0: nothing kept */
    PyObject *dict;  /* compared only: the values are alive while it holds them at this version */
    uint64_t version;
    PyObject *values[N_LC];  /* borrowed from dict */
} log_kept;

/* cl's instance dict (borrowed) when its type reads and writes plain attributes generically, else NULL */
static PyObject *log_dict(PyObject *cl) {
    if (Py_TYPE(cl)->tp_getattro != PyObject_GenericGetAttr || Py_TYPE(cl)->tp_setattro != PyObject_GenericSetAttr)
        return NULL;
    return plain_dict(cl);
}

/* 1 when log_kept's values are cl's now */
static int log_kept_holds(PyObject *cl) {
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
    PyTypeObject *type = Py_TYPE(cl);
    PyObject *dict;
    if (log_kept.tag == 0 || type != log_kept.type || !(type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) ||
        type->tp_version_tag != log_kept.tag || (dict = log_dict(cl)) != log_kept.dict)
        return 0;
    return ((PyDictObject *)dict)->ma_version_tag == log_kept.version;
#else
    return 0;
#endif
}

/* Keep cl's values when every one is in its dict and no data descriptor of its type */
static void log_keep(PyObject *cl) {
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
    PyTypeObject *type = Py_TYPE(cl);
    PyObject *dict = log_dict(cl);
    int i;
    log_kept.tag = 0;
    if (dict == NULL)
        return;
    for (i = 0; i < N_LC; i++)
        if (!plain_name(type, lone_names[LC_NAMES[i]]) ||
            (log_kept.values[i] = PyDict_GetItemWithError(dict, lone_names[LC_NAMES[i]])) == NULL) {
            PyErr_Clear();
            return;
        }
    if (!plain_name(type, lone_names[L_REPUT]) || !(type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG))
        return;
    log_kept.type = type, log_kept.tag = type->tp_version_tag, log_kept.dict = dict;
    log_kept.version = ((PyDictObject *)dict)->ma_version_tag;
#endif
}

/* cl's attribute LC_... (a new reference), NULL with an exception */
static PyObject *log_attr(PyObject *cl, int which) {
    if (log_kept_holds(cl) || (log_keep(cl), log_kept.tag != 0))  /* log_keep keeps cl's values, or none */
        return Py_NewRef(log_kept.values[which]);
    return plain_get(cl, lone_names[LC_NAMES[which]]);
}

/* cl.reput_offset = v (an int), keeping log_kept's values when they held and the old value is an int */
static int log_set_reput(PyObject *cl, int64_t v) {
    int held = log_kept_holds(cl), r;
    PyObject *old;
    if (held) {
        old = PyDict_GetItemWithError(log_kept.dict, lone_names[L_REPUT]);  /* borrowed */
        held = old != NULL && PyLong_CheckExact(old);
        PyErr_Clear();
    }
    r = set_int_named(cl, lone_names[L_REPUT], v);
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
    if (held && r == 0)
        log_kept.version = ((PyDictObject *)log_kept.dict)->ma_version_tag;
    else
#endif
        log_kept.tag = 0;
    return r;
}

/* int_attr and set_int_attr for lone_names. */
static int lone_int(PyObject *o, int name, int64_t *out) {
    return int_named(o, lone_names[name], 0, INT64_MAX / 4, out);
}

static int lone_set_int(PyObject *o, int name, int64_t v) {
    return set_int_named(o, lone_names[name], v);
}

/* CommitLog.now_ms(): wall_clock_ms without a call when it is that; -1 with an exception. */
static int64_t lone_now(PyObject *now_ms) {
    int64_t now;
    if (now_ms == lone_wall_clock) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);  /* time.time_ns()'s clock */
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    } else {
        PyObject *v = PyObject_CallNoArgs(now_ms);
        int ok = v != NULL && I64_OK(v, &now);
        Py_XDECREF(v);
        if (!ok) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "now_ms() must return an int");
            return -1;
        }
        return now;
    }
}

/* Release what dispatch_chunk's cache holds without writing anything back (nothing was written). */
static void drop_cache(DispatchCache *c) {
    int i;
    for (i = 0; i < c->nqueues; i++) {
        PyBuffer_Release(&c->queues[i].view);
        Py_DECREF(c->queues[i].cq);
        Py_DECREF(c->queues[i].mf);
    }
    c->nqueues = 0;
    Py_CLEAR(c->logics_ts);
    if (c->file != NULL) {
        PyBuffer_Release(&c->iview);
        Py_CLEAR(c->file);
    }
}

/* The message's index keys bound, as inline_bound counts them: UNIQ_KEY, and KEYS' spaces + 1. */
static Py_ssize_t lone_keys(PyObject *props) {
    PyObject *keys = PyDict_GetItemWithError(props, str_keys);
    Py_ssize_t n = 2, i;
    if (keys != NULL && PyUnicode_CheckExact(keys)) {
        int kind = PyUnicode_KIND(keys);
        const void *data = PyUnicode_DATA(keys);
        for (i = 0; i < PyUnicode_GET_LENGTH(keys); i++)
            n += PyUnicode_READ(kind, data, i) == ' ';
    } else if (keys != NULL && PyObject_IsTrue(keys)) {
        return -1;  /* not text: the Python path */
    }
    return PyErr_Occurred() ? -1 : n;
}

/* o.name += by (an int attribute); -1 with an exception. */
static int lone_add(PyObject *o, int name, int64_t by) {
    PyObject *v = plain_get(o, lone_names[name]), *step, *sum;
    int64_t n;
    if (v == NULL)
        return -1;
    if (PyLong_CheckExact(v) && as_int64(v, INT64_MIN / 2, INT64_MAX / 2, &n) && by >= INT64_MIN / 2 && by <= INT64_MAX / 2) {
        Py_DECREF(v);  /* an int: the same sum without PyNumber_Add */
        return plain_set(o, lone_names[name], PyLong_FromLongLong(n + by));
    }
    step = PyLong_FromLongLong(by);
    sum = step != NULL ? PyNumber_Add(v, step) : NULL;
    Py_DECREF(v);
    Py_XDECREF(step);
    return plain_set(o, lone_names[name], sum);
}

/* StoreStats.record_put(topic, records, total, elapsed) (the reference) for 0 <= elapsed <= LOCK_WARN_MS;
 * CommitLog._record_put, which also warns, otherwise. -1 with an exception. */
static int lone_stats(PyObject *cl, PyObject *topic, int64_t records, int64_t total, int64_t elapsed) {
    PyObject *stats, *sizes = NULL, *buckets = NULL, *old, *v = NULL, *most = NULL;
    Py_ssize_t b, n = PyTuple_GET_SIZE(lone_latency_bounds);
    int64_t bound = 0, count, max_ms;
    int r = -1;
    if (elapsed < 0 || elapsed > lone_warn_ms) {
        v = PyObject_CallMethod(cl, LONE_NAMES[L_RECORD_PUT], "OLLL", topic, (long long)records, (long long)total,
                                (long long)elapsed);
        Py_XDECREF(v);
        return v == NULL ? -1 : 0;
    }
    if ((stats = log_attr(cl, LC_STATS)) == NULL)
        return -1;
    for (b = 0; b < n; b++) {  /* bisect_left(LATENCY_BOUNDS_MS, elapsed) */
        I64_OK(PyTuple_GET_ITEM(lone_latency_bounds, b), &bound);
        if (bound >= elapsed)
            break;
    }
    if (lone_add(stats, L_PUTS, 1) < 0 || lone_add(stats, L_RECORDS, records) < 0 ||
        lone_add(stats, L_BYTES, total) < 0 ||
        lone_add(stats, L_PUT_MS_TOTAL, elapsed) < 0 || (sizes = plain_get(stats, lone_names[L_TOPIC_BYTES])) == NULL ||
        (buckets = plain_get(stats, lone_names[L_LATENCY])) == NULL)
        goto done;
    if (!PyDict_CheckExact(sizes) || !PyList_CheckExact(buckets) || PyList_GET_SIZE(buckets) <= b) {
        PyErr_SetString(PyExc_TypeError, "StoreStats: topic_bytes must be a dict and latency_buckets a long enough list");
        goto done;
    }
    old = PyDict_GetItemWithError(sizes, topic);  /* sizes[topic] = sizes.get(topic, 0) + total */
    if ((old == NULL && PyErr_Occurred()) || (old != NULL && !I64_OK(old, &count)))
        goto done;
    if ((v = PyLong_FromLongLong((old != NULL ? count : 0) + total)) == NULL || PyDict_SetItem(sizes, topic, v) < 0)
        goto done;
    Py_CLEAR(v);
    if (!I64_OK(PyList_GET_ITEM(buckets, b), &count) || (v = PyLong_FromLongLong(count + 1)) == NULL)
        goto done;
    PyList_SetItem(buckets, b, v);  /* steals v */
    v = NULL;
    if ((most = plain_get(stats, lone_names[L_MAX_PUT_MS])) == NULL || !I64_OK(most, &max_ms))
        goto done;
    r = elapsed > max_ms ? lone_set_int(stats, L_MAX_PUT_MS, elapsed) : 0;
done:
    if (r < 0 && !PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError, "StoreStats holds a non-integer count");
    Py_DECREF(stats);
    Py_XDECREF(sizes);
    Py_XDECREF(buckets);
    Py_XDECREF(v);
    Py_XDECREF(most);
    return r;
}

/* CommitLog._dispatch_raised(the current exception), as CommitLog._dispatch_chunk does for the compiled
 * dispatch's: 0, or -1 with that call's exception. */
static int dispatch_raised(PyObject *cl) {
    PyObject *type, *value, *traceback, *done;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    done = PyObject_CallMethodOneArg(cl, lone_names[L_DISPATCH_RAISED], value != NULL ? value : Py_None);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    Py_XDECREF(done);
    return done == NULL ? -1 : 0;
}

/* The commit log's lock taken if free (*lock: it): 1, 0 when taken, -1 with an exception. */
static int lock_now(PyObject *cl, PyObject **lock) {
    PyObject *v;
    int r;
    if ((*lock = log_attr(cl, LC_LOCK)) == NULL ||
        (v = PyObject_CallMethodOneArg(*lock, lone_names[L_ACQUIRE], Py_False)) == NULL)
        return -1;
    r = v == Py_True;
    Py_DECREF(v);
    return r;
}

/* lock.release(), keeping the exception being raised, if any (and dropping release's own). */
/* The commit log's lock released (the put's records placed), then the clock read for its stats: the time
 * (ms), or -1 with an exception */
static int64_t unlock_then_now(PyObject *lock, PyObject *now_ms) {
    PyObject *v = PyObject_CallMethodNoArgs(lock, lone_names[L_RELEASE]);
    if (v == NULL)
        return -1;
    Py_DECREF(v);
    return lone_now(now_ms);
}

static void unlock_keeping(PyObject *lock) {
    PyObject *type, *value, *traceback, *v;
    PyErr_Fetch(&type, &value, &traceback);
    v = PyObject_CallMethodNoArgs(lock, lone_names[L_RELEASE]);
    Py_XDECREF(v);
    PyErr_Clear();
    PyErr_Restore(type, value, traceback);
}

/* lone_put(commit_log, msg) -> (PutMessageResult, max offset or None, populate due) or None: see the top. */
static PyObject *lone_put(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *cl, *msg, *topic, *body, *props, *queue_id;
    PyObject *lock = NULL, *now_ms = NULL, *queue = NULL, *mf = NULL, *flag = NULL, *config = NULL, *host = NULL;
    PyObject *dispatchers = NULL, *table = NULL, *key = NULL, *host_hex = NULL, *id = NULL, *buf = NULL;
    PyObject *now_obj = NULL, *result = NULL, *max_offset = NULL, *out = NULL, *next_obj = NULL;
    PyObject *queues, *cq, *next, *v;
    DispatchCache c;
    CachedQueue *q;
    Py_buffer view;
    int locked = 0, viewing = 0, caching = 0, dispatched = 0, pwrite_path, due;
    int64_t queue_max = -1, qid, sys_flag, now, wrote, file_size, from, populated, max_size, queue_offset = 0, total, phys, after, ended, fd = -1;
    Py_ssize_t keys;
    unsigned char *p;
    if (nargs != 2)
        return PyErr_Format(PyExc_TypeError, "lone_put() takes 2 arguments");
    cl = args[0], msg = args[1];
    if (!lone_ready || !use_slots || MessageExt == NULL || !Py_IS_TYPE(msg, (PyTypeObject *)MessageExt))
        Py_RETURN_NONE;
    /* the message: what inline_bound and encode_puts take, no delay, timer or half/rollback record */
    topic = SLOT(msg, F_TOPIC), body = SLOT(msg, F_BODY), props = SLOT(msg, F_PROPERTIES);
    queue_id = SLOT(msg, F_QUEUE_ID);
    if (topic == NULL || body == NULL || props == NULL || queue_id == NULL || SLOT(msg, F_SYS_FLAG) == NULL ||
        !PyUnicode_CheckExact(topic) || PyUnicode_GET_LENGTH(topic) > TOPIC_MAX_LENGTH || !PyBytes_CheckExact(body) ||
        PyBytes_GET_SIZE(body) > lone_max_body || !PyDict_CheckExact(props) || !PyLong_CheckExact(queue_id) ||
        !I32_OK(queue_id, &qid) || !I32_OK(SLOT(msg, F_SYS_FLAG), &sys_flag) || (sys_flag & 0x4))
        Py_RETURN_NONE;
    if (PyDict_GetItemWithError(props, str_delay) != NULL || PyDict_GetItemWithError(props, str_timer_at) != NULL ||
        PyDict_GetItemWithError(props, str_timer_sec) != NULL || PyDict_GetItemWithError(props, str_timer_ms) != NULL ||
        PyErr_Occurred() || (keys = lone_keys(props)) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    memset(&c, 0, sizeof c);
    /* the commit log: its lock free (no writer), its current file on the mmap path */
    if ((locked = lock_now(cl, &lock)) < 0)
        goto fail;
    if (!locked)
        goto python;
    if ((now_ms = log_attr(cl, LC_NOW_MS)) == NULL || (now = lone_now(now_ms)) == -1)
        goto fail;
    if ((queue = log_attr(cl, LC_QUEUE)) == NULL)
        goto fail;
    if ((mf = last_of(queue, S_MAPPED_FILES)) == NULL || (flag = plain_get(mf, lone_names[L_USE_PWRITE])) == NULL ||
        (flag != Py_False && flag != Py_True) || !int_attr(mf, S_WROTE, 0, INT64_MAX / 4, &wrote) ||
        !int_attr(mf, S_FILE_SIZE, 0, INT64_MAX / 4, &file_size) || !int_attr(mf, S_FROM, 0, INT64_MAX / 4, &from))
        goto python;
    pwrite_path = flag == Py_True;  /* MappedFile.use_pwrite: below the zeros written ahead, else faulted-in pages */
    if (!lone_int(mf, pwrite_path ? L_ZEROED : L_POPULATED, &populated) || (pwrite_path && !lone_int(mf, L_FD, &fd)))
        goto python;
    /* the record: encoded first (encode_puts; its fallback is Python code), fits the file's faulted-in pages */
    if ((config = log_attr(cl, LC_CONFIG)) == NULL ||
        (host = plain_get(config, lone_names[L_STORE_HOST])) == NULL ||
        (v = plain_get(config, lone_names[L_MAX_SIZE])) == NULL)
        goto fail;
    if (!I64_OK(v, &max_size) || PyBytes_GET_SIZE(body) > max_size) {  /* MESSAGE_ILLEGAL: Python says it */
        Py_DECREF(v);
        goto python;
    }
    Py_DECREF(v);
    Py_XSETREF(SLOT(msg, F_STORE_HOST), Py_NewRef(host));
    if ((buf = encode_record(NULL, msg)) == NULL) {
        PyErr_Clear();  /* the Python path meets the same error and answers it */
        goto python;
    }
    total = PyByteArray_CheckExact(buf) ? PyByteArray_GET_SIZE(buf) : -1;
    after = wrote + total;
    if (total < FIXED_V4 || total > max_size + lone_slack || total + lone_blank > file_size - wrote || after > populated)
        goto python;
    if (pwrite_path && after + lone_zero_window / 2 > populated && populated < file_size)  /* MappedFile.is_populated */
        goto python;
    /* the consume queue and the index: their files have room (no file to create); their buffers held */
    if ((dispatchers = log_attr(cl, LC_DISPATCHERS)) == NULL)
        goto fail;
    if (!PyList_CheckExact(dispatchers) || PyList_GET_SIZE(dispatchers) < 1 || PyList_GET_SIZE(dispatchers) > 2 ||
        !Py_IS_TYPE(PyList_GET_ITEM(dispatchers, 0), (PyTypeObject *)lone_cqs_type) ||
        (PyList_GET_SIZE(dispatchers) == 2 &&
         !Py_IS_TYPE(PyList_GET_ITEM(dispatchers, 1), (PyTypeObject *)lone_index_type)))
        goto python;
    c.cqs = PyList_GET_ITEM(dispatchers, 0);
    c.index = PyList_GET_SIZE(dispatchers) == 2 ? PyList_GET_ITEM(dispatchers, 1) : Py_None;
    if ((c.table = plain_get(c.cqs, store_names[S_TABLE])) == NULL)
        goto fail;
    caching = 1;
    queues = PyDict_CheckExact(c.table) ? PyDict_GetItemWithError(c.table, topic) : NULL;
    cq = queues != NULL && PyDict_CheckExact(queues) ? PyDict_GetItemWithError(queues, queue_id) : NULL;
    if (PyErr_Occurred())
        goto fail;
    if (cq == NULL || (q = cached_queue(&c, cq)) == NULL || q->wrote + CQ_UNIT > q->file_size)
        goto python;
    if (c.index != Py_None && (!load_index(&c) || c.s.count + keys >= c.s.max_entries))
        goto python;
    /* the commit-log file's buffer, held while no Python code runs (doc/store.md, "Compiled accelerator") */
    if (!pwrite_path && !data_view(mf, &view, file_size))
        goto python;
    viewing = !pwrite_path;
    /* its place (CommitLog._place): the queue offset, the id */
    if ((table = log_attr(cl, LC_QUEUE_TABLE)) == NULL ||
        (host_hex = log_attr(cl, LC_HOST_HEX)) == NULL)
        goto fail;
    if (!PyDict_CheckExact(table) || !PyUnicode_CheckExact(host_hex) || !PyUnicode_IS_ASCII(host_hex))
        goto python;
    if ((key = queue_key(topic, qid)) == NULL)
        goto fail;
    next = PyDict_GetItemWithError(table, key);  /* borrowed */
    if (next == NULL && PyErr_Occurred())
        goto fail;
    if (next != NULL && (!I64_OK(next, &queue_offset) || queue_offset < 0 || queue_offset == INT64_MAX))
        goto python;
    phys = from + wrote;
    if ((id = offset_id(host_hex, phys)) == NULL ||
        (next_obj = PyLong_FromLongLong(queue_offset + 1)) == NULL || (now_obj = PyLong_FromLongLong(now)) == NULL)
        goto fail;
    /* the record patched and written past the file's end: nothing else changed yet */
    p = (unsigned char *)PyByteArray_AS_STRING(buf);
    put_i64(p + 20, queue_offset);
    put_i64(p + 28, phys);
    put_i64(p + 56, now);
    if (pwrite_path) {  /* a page-cache copy into blocks written before (MappedFile.write_at) */
        int64_t done = 0;
        while (done < total) {
            ssize_t n = pwrite((int)fd, p + done, (size_t)(total - done), (off_t)(wrote + done));
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)  /* the Python path writes again and answers the error */
                goto python;
            done += n;
        }
    } else {
        memcpy((char *)view.buf + wrote, p, (size_t)total);
        PyBuffer_Release(&view);
        viewing = 0;
    }
    /* from here on the put happens: the queue offset taken, the message's store fields, the positions */
    if (PyDict_SetItem(table, key, next_obj) < 0 ||
        set_slot(msg, F_QUEUE_OFFSET, PyLong_FromLongLong(queue_offset)) < 0 ||
        set_slot(msg, F_COMMIT_LOG_OFFSET, PyLong_FromLongLong(phys)) < 0 ||
        set_slot(msg, F_STORE_TIMESTAMP, Py_NewRef(now_obj)) < 0 || set_slot(msg, F_STORE_SIZE, PyLong_FromLongLong(total)) < 0)
        goto fail;
    if (set_int_attr(mf, S_WROTE, after) < 0 || set_int_attr(mf, S_COMMITTED, after) < 0 ||
        plain_set(mf, lone_names[L_STORE_TS], Py_NewRef(now_obj)) < 0)
        goto fail;
    if (lone_appended != NULL)  /* sync_lone_put's fdatasync, before the dispatch (_speedups_syncanswer.h) */
        lone_appended(mf);
    /* dispatched (dispatch_chunk); the queue's max offset while its cache still says it */
    dispatched = 1;
    switch (dispatch_record(&c, msg, cl, lone_names[L_DISPATCH])) {  /* cl.dispatch(msg) when not common */
    case 1:
        queue_max = (q->from + q->wrote) / CQ_UNIT;  /* q: cached_queue's slot, still held */
        break;
    case -1: {  /* what CommitLog._dispatch_chunk does with an exception from the compiled dispatch */
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        if (flush_cache(&c) < 0)
            PyErr_Clear();
        PyErr_Restore(type, value, traceback);
        if (dispatch_raised(cl) < 0)
            goto fail;
        break;
    }
    default:
        break;
    }
    caching = 0;
    if (flush_cache(&c) < 0 || log_set_reput(cl, phys + total) < 0)
        goto fail;
    if ((max_offset = queue_max < 0 ? Py_NewRef(Py_None) : PyLong_FromLongLong(queue_max)) == NULL)
        goto fail;
    /* the result put_many gives, its stats */
    {
        PyObject *ids = PyList_New(1), *append, *a[N_AR], *r[N_PR];
        if (ids == NULL)
            goto fail;
        PyList_SET_ITEM(ids, 0, Py_NewRef(id));
        a[AR_STATUS] = Py_NewRef(lone_append_ok), a[AR_OFFSET] = PyLong_FromLongLong(phys);
        a[AR_BYTES] = PyLong_FromLongLong(total), a[AR_IDS] = ids, a[AR_QUEUE_OFFSET] = PyLong_FromLongLong(queue_offset);
        a[AR_NUM] = PyLong_FromLong(1), a[AR_STORE_TS] = Py_NewRef(now_obj);
        if ((append = slotted(lone_append_type, ar_offsets, a, N_AR)) == NULL)
            goto fail;
        r[PR_STATUS] = Py_NewRef(lone_put_ok), r[PR_APPEND] = append, r[PR_REMARK] = Py_NewRef(Py_None);
        if ((result = slotted(lone_put_type, pr_offsets, r, N_PR)) == NULL)
            goto fail;
    }
    locked = 0;
    if ((ended = unlock_then_now(lock, now_ms)) == -1)
        goto fail;
    if (lone_stats(cl, topic, 1, total, ended - now) < 0)
        goto fail;
    due = pwrite_path ? populated < file_size && after > populated - lone_zeros_due  /* MappedFile.populate_due */
                      : populated < file_size && after > populated - (3 * lone_window) / 4;
    out = PyTuple_Pack(3, result, max_offset, due ? Py_True : Py_False);
    goto done;
python:
    PyErr_Clear();
    out = Py_NewRef(Py_None);
    goto done;
fail:
    out = NULL;
done:
    if (viewing)
        PyBuffer_Release(&view);
    if (caching && dispatched) {  /* write back what was dispatched, keeping the exception */
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        if (flush_cache(&c) < 0)
            PyErr_Clear();
        PyErr_Restore(type, value, traceback);
    } else if (caching) {
        drop_cache(&c);
    }
    Py_XDECREF(c.table);
    if (locked)
        unlock_keeping(lock);
    Py_XDECREF(lock);
    Py_XDECREF(now_ms);
    Py_XDECREF(queue);
    Py_XDECREF(mf);
    Py_XDECREF(flag);
    Py_XDECREF(config);
    Py_XDECREF(host);
    Py_XDECREF(dispatchers);
    Py_XDECREF(table);
    Py_XDECREF(key);
    Py_XDECREF(host_hex);
    Py_XDECREF(id);
    Py_XDECREF(buf);
    Py_XDECREF(now_obj);
    Py_XDECREF(next_obj);
    Py_XDECREF(result);
    Py_XDECREF(max_offset);
    return out;
}

#define LONE_METHODS                                                                                           \
    {"lone_put", (PyCFunction)(void (*)(void))lone_put, METH_FASTCALL,                                        \
     "One message appended as the store service's inline append does, or None for the Python path."},        \
    {"set_lone_put", (PyCFunction)(void (*)(void))set_lone_put, METH_FASTCALL,                                \
     "Register the classes, statuses, clock and sizes lone_put needs; True when it can run."},
