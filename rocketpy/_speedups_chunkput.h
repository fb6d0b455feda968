/* The rest of CommitLog.put_many in one call once encode_puts encoded every put, included once by
 * rocketpy/_speedups.c after _speedups_storeput.h (doc/benchmarks.md, "Thirty-fifth pass: the broker's
 * batch request with fewer Python calls").
 *
 * put_encoded(commit_log, encoded, count) does what CommitLog.put_many does after its encode_puts (the
 * reference: its Python code) when every one of the count puts was encoded (encoded is encode_puts'
 * list) and they all fit the current commit-log file on the mmap write path, below its faulted-in end
 * (one _write_chunk: no file to fill with a blank or to create, no page to fault in), and the lock is
 * free: begin_time_in_lock set while it holds the lock, place_chunk, the copy into the mapped file, the
 * file's positions and store time, the dispatch (dispatch_chunk, or CommitLog._dispatch_chunk for other
 * dispatchers), each put's PutMessageResult, the reput offset, the lock released, each put's stats. It
 * returns the results, or None having changed nothing (the Python code then runs), or raises what
 * place_chunk raises, as the Python code would.
 *
 * Uses from _speedups_store.h and _speedups_storeput.h: store_names, last_of, data_view, int_attr,
 * set_int_attr, place_chunk, dispatch_chunk, SLOT, lone_names, lone_ready, lone_int, lone_now,
 * lone_stats, lone_blank, lone_cqs_type, lone_index_type, slotted, pr_offsets, ar_offsets. */

static PyObject *str_dispatch_chunk, *str_begin_in_lock;

/* A chunk's dispatch, as CommitLog._dispatch_chunk: dispatch_chunk for the consume queues (and the
 * index), its exception to _dispatch_raised; that method itself for other dispatchers. -1 with an
 * exception. */
static int chunk_dispatch(PyObject *cl, PyObject *chunk) {
    PyObject *dispatchers = PyObject_GetAttr(cl, lone_names[L_DISPATCHERS]), *slow = NULL, *done = NULL;
    Py_ssize_t n;
    if (dispatchers == NULL)
        return -1;
    n = PyList_CheckExact(dispatchers) ? PyList_GET_SIZE(dispatchers) : -1;
    if (n >= 1 && n <= 2 && Py_IS_TYPE(PyList_GET_ITEM(dispatchers, 0), (PyTypeObject *)lone_cqs_type) &&
        (n == 1 || Py_IS_TYPE(PyList_GET_ITEM(dispatchers, 1), (PyTypeObject *)lone_index_type))) {
        PyObject *call[4] = {chunk, PyList_GET_ITEM(dispatchers, 0), n == 2 ? PyList_GET_ITEM(dispatchers, 1) : Py_None,
                             NULL};
        if ((slow = PyObject_GetAttr(cl, lone_names[L_DISPATCH])) != NULL) {
            call[3] = slow;
            done = dispatch_chunk(NULL, call, 4);
            if (done == NULL && dispatch_raised(cl) == 0)
                done = Py_NewRef(Py_None);
        }
    } else if (str_dispatch_chunk != NULL ||
               (str_dispatch_chunk = PyUnicode_InternFromString("_dispatch_chunk")) != NULL) {
        done = PyObject_CallMethodOneArg(cl, str_dispatch_chunk, chunk);
    }
    Py_DECREF(dispatchers);
    Py_XDECREF(slow);
    Py_XDECREF(done);
    return done == NULL ? -1 : 0;
}

/* The PutMessageResult of a stored put (i, msgs, bufs, total) with its ids, as _write_chunk builds it. */
static PyObject *chunk_result(PyObject *put, PyObject *ids, PyObject *now_obj) {
    PyObject *msgs = PyTuple_GET_ITEM(put, 1), *first = PySequence_Fast_GET_ITEM(msgs, 0), *a[N_AR], *r[N_PR];
    a[AR_STATUS] = Py_NewRef(lone_append_ok);
    a[AR_OFFSET] = Py_XNewRef(SLOT(first, F_COMMIT_LOG_OFFSET));  /* set by place_chunk */
    a[AR_BYTES] = Py_NewRef(PyTuple_GET_ITEM(put, 3));
    a[AR_IDS] = Py_NewRef(ids);
    a[AR_QUEUE_OFFSET] = Py_XNewRef(SLOT(first, F_QUEUE_OFFSET));
    a[AR_NUM] = PyLong_FromSsize_t(PySequence_Fast_GET_SIZE(msgs));
    a[AR_STORE_TS] = Py_NewRef(now_obj);
    r[PR_APPEND] = slotted(lone_append_type, ar_offsets, a, N_AR);
    if (r[PR_APPEND] == NULL)
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    r[PR_STATUS] = Py_NewRef(lone_put_ok), r[PR_REMARK] = Py_NewRef(Py_None);
    return slotted(lone_put_type, pr_offsets, r, N_PR);
}

/* put_encoded(commit_log, encoded, count) -> [PutMessageResult] or None: see the top. */
static PyObject *put_encoded(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *cl, *encoded, *lock = NULL, *now_ms = NULL, *queue = NULL, *mf = NULL, *flag = NULL, *table = NULL;
    PyObject *host_hex = NULL, *now_obj = NULL, *base_obj = NULL, *placed = NULL, *results = NULL, *out = NULL;
    PyObject *records, *ids, *call[5];
    Py_buffer view;
    int locked = 0, viewing = 0, marked = 0;
    int64_t count, wrote, file_size, from, populated, total = 0, now, ended, phys, at;
    Py_ssize_t i;
    if (nargs != 3)
        return PyErr_Format(PyExc_TypeError, "put_encoded() takes 3 arguments");
    cl = args[0], encoded = args[1];
    if (!lone_ready || !use_slots || !PyList_CheckExact(encoded) || !I64_OK(args[2], &count) || count < 1 ||
        PyList_GET_SIZE(encoded) != count)
        Py_RETURN_NONE;
    for (i = 0; i < count; i++) {  /* every put encoded, in order */
        PyObject *put = PyList_GET_ITEM(encoded, i), *msgs;
        int64_t index, size;
        if (!PyTuple_CheckExact(put) || PyTuple_GET_SIZE(put) != 4 || !I64_OK(PyTuple_GET_ITEM(put, 0), &index) ||
            index != i || !PyLong_CheckExact(PyTuple_GET_ITEM(put, 3)) || !I64_OK(PyTuple_GET_ITEM(put, 3), &size) ||
            size <= 0)
            Py_RETURN_NONE;
        msgs = PyTuple_GET_ITEM(put, 1);
        if (!(PyList_CheckExact(msgs) || PyTuple_CheckExact(msgs)) || PySequence_Fast_GET_SIZE(msgs) == 0)
            Py_RETURN_NONE;
        total += size;
    }
    /* the lock free (no writer), the current file on the mmap path with room below its faulted-in end */
    if ((locked = lock_now(cl, &lock)) < 0)
        goto fail;
    if (!locked)
        goto python;
    if ((queue = PyObject_GetAttr(cl, lone_names[L_QUEUE])) == NULL)
        goto fail;
    if ((mf = last_of(queue, S_MAPPED_FILES)) == NULL ||
        (flag = PyObject_GetAttr(mf, lone_names[L_USE_PWRITE])) == NULL || flag != Py_False ||
        !int_attr(mf, S_WROTE, 0, INT64_MAX / 4, &wrote) ||
        !int_attr(mf, S_FILE_SIZE, 0, INT64_MAX / 4, &file_size) || !int_attr(mf, S_FROM, 0, INT64_MAX / 4, &from) ||
        !lone_int(mf, L_POPULATED, &populated))
        goto python;
    /* else _file_with_room's blank and new file, or MappedFile._populate */
    if (total + lone_blank > file_size - wrote || wrote + total > populated)
        goto python;
    if ((table = PyObject_GetAttr(cl, lone_names[L_QUEUE_TABLE])) == NULL ||
        (host_hex = PyObject_GetAttr(cl, lone_names[L_HOST_HEX])) == NULL ||
        (now_ms = PyObject_GetAttr(cl, lone_names[L_NOW_MS])) == NULL || (now = lone_now(now_ms)) == -1 ||
        (now_obj = PyLong_FromLongLong(now)) == NULL || (base_obj = PyLong_FromLongLong(from + wrote)) == NULL)
        goto fail;
    if ((str_begin_in_lock == NULL &&
         (str_begin_in_lock = PyUnicode_InternFromString("begin_time_in_lock")) == NULL) ||
        PyObject_SetAttr(cl, str_begin_in_lock, now_obj) < 0)  /* what _refusal reads while the lock is held */
        goto fail;
    marked = 1;
    /* the file's buffer, held while no Python code runs; then the records placed (nothing changed before) */
    if (!data_view(mf, &view, file_size))
        goto python;
    viewing = 1;
    call[0] = encoded, call[1] = table, call[2] = base_obj, call[3] = now_obj, call[4] = host_hex;
    if ((placed = place_chunk(NULL, call, 5)) == NULL)
        goto fail;
    if (placed == Py_None)
        goto python;
    records = PyTuple_GET_ITEM(placed, 2), ids = PyTuple_GET_ITEM(placed, 3);
    for (i = 0, at = 0; i < PyList_GET_SIZE(records); i++)
        at += PyByteArray_CheckExact(PyList_GET_ITEM(records, i)) ? PyByteArray_GET_SIZE(PyList_GET_ITEM(records, i))
                                                                  : total + 1;
    if (!I64_OK(PyTuple_GET_ITEM(placed, 0), &phys) || phys != from + wrote + total || at != total) {
        PyErr_SetString(PyExc_SystemError, "put_encoded: the placed records are not the encoded ones");
        goto fail;
    }
    /* the copy (MappedFile.append_many below the faulted-in end), the file's positions */
    for (i = 0, at = wrote; i < PyList_GET_SIZE(records); i++) {
        PyObject *buf = PyList_GET_ITEM(records, i);
        memcpy((char *)view.buf + at, PyByteArray_AS_STRING(buf), PyByteArray_GET_SIZE(buf));
        at += PyByteArray_GET_SIZE(buf);
    }
    PyBuffer_Release(&view);
    viewing = 0;
    if (set_int_attr(mf, S_WROTE, wrote + total) < 0 || set_int_attr(mf, S_COMMITTED, wrote + total) < 0 ||
        PyObject_SetAttr(mf, lone_names[L_STORE_TS], now_obj) < 0)
        goto fail;
    if (chunk_dispatch(cl, encoded) < 0)
        goto fail;
    if ((results = PyList_New(count)) == NULL)
        goto fail;
    for (i = 0; i < count; i++) {
        PyObject *result = chunk_result(PyList_GET_ITEM(encoded, i), PyList_GET_ITEM(ids, i), now_obj);
        if (result == NULL)
            goto fail;
        PyList_SET_ITEM(results, i, result);
    }
    if (lone_set_int(cl, L_REPUT, phys) < 0 || set_int_named(cl, str_begin_in_lock, 0) < 0)
        goto fail;
    marked = 0;
    locked = 0;
    if ((ended = unlock_then_now(lock, now_ms)) == -1)
        goto fail;
    for (i = 0; i < count; i++) {
        PyObject *put = PyList_GET_ITEM(encoded, i), *msgs = PyTuple_GET_ITEM(put, 1);
        int64_t size;
        I64_OK(PyTuple_GET_ITEM(put, 3), &size);
        if (lone_stats(cl, SLOT(PySequence_Fast_GET_ITEM(msgs, 0), F_TOPIC), PySequence_Fast_GET_SIZE(msgs), size,
                       ended - now) < 0)
            goto fail;
    }
    out = Py_NewRef(results);
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
    if (marked) {  /* begin_time_in_lock back to 0, keeping any exception */
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        if (set_int_named(cl, str_begin_in_lock, 0) < 0)
            PyErr_Clear();
        PyErr_Restore(type, value, traceback);
    }
    if (locked)
        unlock_keeping(lock);
    Py_XDECREF(lock);
    Py_XDECREF(now_ms);
    Py_XDECREF(queue);
    Py_XDECREF(mf);
    Py_XDECREF(flag);
    Py_XDECREF(table);
    Py_XDECREF(host_hex);
    Py_XDECREF(now_obj);
    Py_XDECREF(base_obj);
    Py_XDECREF(placed);
    Py_XDECREF(results);
    return out;
}

/* ---- MessageStore.can_append_inline ----------------------------------------------------- */

static PyObject *str_running, *str_commit_log, *str_consume_queues, *str_index, *str_index_enable, *str_zeroed_attr;

static int inline_room_names(void) {
    static const char *const names[] = {"running", "commit_log", "consume_queues", "index", "message_index_enable",
                                        "_zeroed"};
    static PyObject **const out[] = {&str_running, &str_commit_log, &str_consume_queues, &str_index, &str_index_enable,
                                     &str_zeroed_attr};
    int i;
    for (i = 0; i < 6; i++)
        if (*out[i] == NULL && (*out[i] = PyUnicode_InternFromString(names[i])) == NULL)
            return -1;
    return 0;
}

/* The room checks of MessageStore.can_append_inline after inline_bound: 1, 0, or -1 when Python must
 * decide (anything unusual; no exception). */
static int room_for(PyObject *store, int64_t size, int64_t keys, PyObject *entries) {
    PyObject *cl = NULL, *queue = NULL, *mf = NULL, *flag = NULL, *cqs = NULL, *table = NULL, *config = NULL;
    PyObject *enabled = NULL, *index = NULL, *files = NULL, *last = NULL, *key, *count_obj;
    int64_t wrote, file_size, filled, count, bound;
    Py_ssize_t pos = 0;
    int r = -1;
    /* the commit log's current file: size + BLANK_SIZE <= remaining, within its faulted-in pages (is_populated) */
    if ((cl = PyObject_GetAttr(store, str_commit_log)) == NULL ||
        (queue = PyObject_GetAttr(cl, lone_names[L_QUEUE])) == NULL)
        goto done;
    if ((mf = last_of(queue, S_MAPPED_FILES)) == NULL) {
        r = PyErr_Occurred() ? -1 : 0;
        goto done;
    }
    if ((flag = PyObject_GetAttr(mf, lone_names[L_USE_PWRITE])) == NULL || (flag != Py_False && flag != Py_True) ||
        !int_attr(mf, S_WROTE, 0, INT64_MAX / 4, &wrote) || !int_attr(mf, S_FILE_SIZE, 0, INT64_MAX / 4, &file_size))
        goto done;
    if (flag == Py_True) {  /* below the zeros, and far enough that _zero_ahead has nothing to do */
        if (!int_named(mf, str_zeroed_attr, 0, INT64_MAX / 4, &filled))
            goto done;
        if (size + lone_blank > file_size - wrote || wrote + size > filled ||
            (wrote + size + lone_zero_window / 2 > filled && filled < file_size)) {
            r = 0;
            goto done;
        }
    } else {
        if (!lone_int(mf, L_POPULATED, &filled))
            goto done;
        if (size + lone_blank > file_size - wrote || wrote + size > filled) {
            r = 0;
            goto done;
        }
    }
    /* each queue exists, and its newest file has room for its entries */
    if ((cqs = PyObject_GetAttr(store, str_consume_queues)) == NULL ||
        !Py_IS_TYPE(cqs, (PyTypeObject *)lone_cqs_type) ||
        (table = PyObject_GetAttr(cqs, store_names[S_TABLE])) == NULL || !PyDict_CheckExact(table) ||
        !PyDict_CheckExact(entries))
        goto done;
    while (PyDict_Next(entries, &pos, &key, &count_obj)) {
        PyObject *queues, *cq;
        int64_t cq_wrote, cq_size;
        if (!PyTuple_CheckExact(key) || PyTuple_GET_SIZE(key) != 2 || !PyUnicode_CheckExact(PyTuple_GET_ITEM(key, 0)) ||
            !PyLong_CheckExact(PyTuple_GET_ITEM(key, 1)) || !I64_OK(count_obj, &count))
            goto done;
        queues = PyDict_GetItemWithError(table, PyTuple_GET_ITEM(key, 0));
        cq = queues != NULL && PyDict_CheckExact(queues) ? PyDict_GetItemWithError(queues, PyTuple_GET_ITEM(key, 1))
                                                          : NULL;
        if (PyErr_Occurred() || (queues != NULL && !PyDict_CheckExact(queues)))
            goto done;
        if (cq == NULL) {  /* no such queue yet: its file is made by the writer */
            r = 0;
            goto done;
        }
        if ((files = PyObject_GetAttr(cq, store_names[S_FILES])) == NULL)
            goto done;
        Py_XSETREF(last, last_of(files, S_MAPPED_FILES));
        Py_CLEAR(files);
        if (last == NULL) {
            r = PyErr_Occurred() ? -1 : 0;
            goto done;
        }
        if (!int_attr(last, S_WROTE, 0, INT64_MAX / 4, &cq_wrote) ||
            !int_attr(last, S_FILE_SIZE, 0, INT64_MAX / 4, &cq_size))
            goto done;
        if (cq_size - cq_wrote < count * CQ_UNIT) {
            r = 0;
            goto done;
        }
    }
    /* the index, when enabled: its newest file has room for the keys */
    if ((config = PyObject_GetAttr(store, lone_names[L_CONFIG])) == NULL ||
        (enabled = PyObject_GetAttr(config, str_index_enable)) == NULL || (enabled != Py_True && enabled != Py_False))
        goto done;
    if (enabled == Py_False) {
        r = 1;
        goto done;
    }
    if ((index = PyObject_GetAttr(store, str_index)) == NULL || !Py_IS_TYPE(index, (PyTypeObject *)lone_index_type))
        goto done;
    if ((files = PyObject_GetAttr(index, store_names[S_FILES])) == NULL || !PyList_CheckExact(files))
        goto done;
    if (PyList_GET_SIZE(files) == 0) {
        r = 0;
        goto done;
    }
    Py_XSETREF(last, Py_NewRef(PyList_GET_ITEM(files, PyList_GET_SIZE(files) - 1)));
    if (!int_attr(last, S_INDEX_COUNT, 0, INT64_MAX / 4, &filled) ||
        !int_attr(last, S_MAX_ENTRIES, 0, INT64_MAX / 4, &bound))
        goto done;
    r = filled + keys < bound;
done:
    PyErr_Clear();
    Py_XDECREF(cl);
    Py_XDECREF(queue);
    Py_XDECREF(mf);
    Py_XDECREF(flag);
    Py_XDECREF(cqs);
    Py_XDECREF(table);
    Py_XDECREF(config);
    Py_XDECREF(enabled);
    Py_XDECREF(index);
    Py_XDECREF(files);
    Py_XDECREF(last);
    return r;
}

/* inline_room(store, puts, max_body, fixed) -> True, False, or None
 * MessageStore.can_append_inline (the reference) for a running MessageStore with the usual files: its
 * running flag, inline_bound (max_body, fixed), then the room checks of the commit log's current file,
 * each consume queue's newest file and the index's newest file, in one call. None when Python must decide
 * (an unusual attribute or type): the method's Python code then answers. */
static PyObject *inline_room(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *running, *bound, *call[3];
    int64_t size, keys;
    int r;
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "inline_room() takes 4 arguments");
    if (!lone_ready || inline_room_names() < 0)
        Py_RETURN_NONE;
    running = PyObject_GetAttr(args[0], str_running);
    if (running != Py_True) {
        r = running == Py_False;
        Py_XDECREF(running);
        PyErr_Clear();
        if (r)
            Py_RETURN_FALSE;
        Py_RETURN_NONE;
    }
    Py_DECREF(running);
    call[0] = args[1], call[1] = args[2], call[2] = args[3];
    if ((bound = inline_bound(NULL, call, 3)) == NULL)
        return NULL;  /* what the Python code's inline_bound raises */
    if (bound == Py_None) {
        Py_DECREF(bound);
        Py_RETURN_FALSE;
    }
    r = -1;
    if (PyTuple_CheckExact(bound) && PyTuple_GET_SIZE(bound) == 3 && I64_OK(PyTuple_GET_ITEM(bound, 0), &size) &&
        I64_OK(PyTuple_GET_ITEM(bound, 1), &keys))
        r = room_for(args[0], size, keys, PyTuple_GET_ITEM(bound, 2));
    Py_DECREF(bound);
    if (r < 0)
        Py_RETURN_NONE;
    return PyBool_FromLong(r);
}

/* ---- MessageReader.get_max_offset_in_queue ---------------------------------------------- */

/* queue_max_offset(consume_queues, queue_type, files_type, topic, queue_id) -> int or None
 * MessageReader.get_max_offset_in_queue (the reference) through a ConsumeQueueStore's table: 0 for an
 * unknown queue, else its newest file's end over the entry size (ConsumeQueue.max_offset, for a
 * queue_type queue whose files are a files_type MappedFileQueue). None when Python must decide. */
static PyObject *queue_max_offset(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *table, *queues, *cq, *files = NULL, *last = NULL, *out = NULL;
    int64_t from, wrote;
    if (nargs != 5)
        return PyErr_Format(PyExc_TypeError, "queue_max_offset() takes 5 arguments");
    if (!store_names_ready())
        return NULL;
    if (lone_cqs_type == NULL || !Py_IS_TYPE(args[0], (PyTypeObject *)lone_cqs_type) ||
        !PyUnicode_CheckExact(args[3]) || !PyLong_CheckExact(args[4]))
        Py_RETURN_NONE;
    if ((table = PyObject_GetAttr(args[0], store_names[S_TABLE])) == NULL)
        goto python;
    queues = PyDict_CheckExact(table) ? PyDict_GetItemWithError(table, args[3]) : NULL;
    cq = queues != NULL && PyDict_CheckExact(queues) ? PyDict_GetItemWithError(queues, args[4]) : NULL;
    if (!PyDict_CheckExact(table) || PyErr_Occurred() || (queues != NULL && !PyDict_CheckExact(queues))) {
        Py_DECREF(table);
        goto python;
    }
    if (cq == NULL) {  /* not in the table: no such queue */
        Py_DECREF(table);
        return PyLong_FromLong(0);
    }
    Py_INCREF(cq);
    Py_DECREF(table);
    if (Py_IS_TYPE(cq, (PyTypeObject *)args[1]) && (files = PyObject_GetAttr(cq, store_names[S_FILES])) != NULL &&
        Py_IS_TYPE(files, (PyTypeObject *)args[2])) {
        last = last_of(files, S_MAPPED_FILES);
        if (last == NULL && !PyErr_Occurred())
            out = PyLong_FromLong(0);
        else if (last != NULL && int_attr(last, S_FROM, 0, INT64_MAX / 4, &from) &&
                 int_attr(last, S_WROTE, 0, INT64_MAX / 4, &wrote))
            out = PyLong_FromLongLong((from + wrote) / CQ_UNIT);
    }
    Py_DECREF(cq);
    Py_XDECREF(files);
    Py_XDECREF(last);
    if (out != NULL)
        return out;
python:
    PyErr_Clear();
    Py_RETURN_NONE;
}

#define CHUNK_PUT_METHODS                                                                                     \
    {"put_encoded", (PyCFunction)(void (*)(void))put_encoded, METH_FASTCALL,                                      \
     "The rest of CommitLog.put_many once encode_puts encoded every put, or None for its Python code."},     \
    {"inline_room", (PyCFunction)(void (*)(void))inline_room, METH_FASTCALL,                                  \
     "MessageStore.can_append_inline in one call: True, False, or None for its Python code."},                \
    {"queue_max_offset", (PyCFunction)(void (*)(void))queue_max_offset, METH_FASTCALL,                        \
     "MessageReader.get_max_offset_in_queue in one call, or None for its Python code."},
