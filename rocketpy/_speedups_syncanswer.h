/* rocketpy._speedups, a lone SYNC_FLUSH send answered as soon as its fdatasync ends (doc/store.md, "Group
 * commit on the reactor"): included once from _speedups.c after _speedups_aio.h (syncer_t, results_list) and
 * _speedups_request.h (send_now, truth_attr, str_add_callback; its lone_send calls sync_answer_later, declared
 * there), whose helpers from _speedups_remoting.h (stored_response, json_frame) it uses too.
 *
 * sync_answer_later  lone_send's case of a put appended inline that waits only for the native sync
 *                    (StoreService.lone_waiting): the PUT_OK answer's frame is built now and queued
 *                    on the sync (AioFdSync.answers, entries [next_offset, transport, frame]); the put's
 *                    Deferred gets sync_answered as its callback.
 * sync_answered      that callback: None when the frame was written already (the node then only counts
 *                    the request answered), else the frame is taken back and the answer is what the
 *                    usual callback (_lone_put_response) gives: FLUSH_DISK_TIMEOUT after a timeout, or
 *                    PUT_OK when another flush (the flush thread, a failed sync's successor) covered it.
 * sync_lone_put      the store's lone put (lone_put) and, right after the append, the group commit's
 *                    fdatasync submitted to the native syncer (MessageStore.put_lone's sync argument):
 *                    the sync starts while the put's Python bookkeeping runs, not after it.
 * sync_answer_reap   AioFdSync.doRead for the native sync: the eventfd read, the finished syncs'
 *                    results, and for each that succeeded the answers it covers written (send_now)
 *                    before any Python runs; what send_now cannot write at once is left to the callback.
 *
 * The writes happen on the reactor thread, as every other write to the connection does, but where
 * _speedups_syncwrite.h lets the sync thread write an answer itself while a lean reactor sleeps (an entry it
 * wrote has its frame None before any Python runs).
 */

#ifdef __linux__
enum { SA_OFFSET, SA_TRANSPORT, SA_FRAME, SA_ITEMS };  /* an answer entry (a list) */
enum { LW_DEFERRED, LW_RESULT, LW_ANSWERS, LW_OFFSET, LW_DIRECT, LW_ITEMS };  /* StoreService.lone_waiting */
static PyObject *str_lone_waiting, *str_transport, *str_write_now_flag, *sa_plain, *sa_answered;
/* _speedups_syncwrite.h: the sync thread writing an answer itself */
static void sw_arm(PyObject *direct, PyObject *channel, PyObject *transport, PyObject *entry);
static void sw_forget(PyObject *entry);

static int sync_answer_names(void) {
    static const char *const names[] = {"lone_waiting", "transport", "_write_now"};
    static PyObject **const out[] = {&str_lone_waiting, &str_transport, &str_write_now_flag};
    if (intern_names(names, out, 3) < 0)  /* _speedups_request.h */
        return -1;
    if (sa_plain == NULL) {  /* write_now's plain TCP transport types (rocketpy/remoting/writenow.py) */
        PyObject *module = PyImport_ImportModule("rocketpy.remoting.writenow");
        if (module == NULL)
            return -1;
        sa_plain = PyObject_GetAttrString(module, "PLAIN_SEND");
        Py_DECREF(module);
        if (sa_plain == NULL)
            return -1;
    }
    return 0;
}

/* sync_answered(result, entry, later, request, queue_id) -> None | what later(result, request, queue_id) gives */
static PyObject *sync_answered(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *entry;
    if (nargs != 5 || !PyList_CheckExact(args[1]) || PyList_GET_SIZE(args[1]) != SA_ITEMS) {
        PyErr_SetString(PyExc_TypeError, "sync_answered(result, entry, later, request, queue_id)");
        return NULL;
    }
    entry = args[1];
    if (PyList_GET_ITEM(entry, SA_FRAME) == Py_None)
        Py_RETURN_NONE;  /* written when the sync ended */
    sw_forget(entry);
    PyList_SetItem(entry, SA_FRAME, Py_NewRef(Py_None));  /* taken back: never written now */
    {
        PyObject *call[3] = {args[0], args[3], args[4]};
        return PyObject_Vectorcall(args[2], call, 3, NULL);
    }
}

static PyMethodDef sync_answered_def = {
    "sync_answered", (PyCFunction)(void (*)(void))sync_answered, METH_FASTCALL,
    "The put Deferred's callback of a lone SYNC_FLUSH send whose answer was queued on its sync."};

/* The put's Deferred d with sync_answered added (a new reference), its answer's frame queued on the sync
 * it waits for; NULL without an exception when the put does not wait for a native sync alone, the
 * channel's transport is not written at once (TLS, a test transport), or anything is unusual: then
 * lone_send adds its usual callback. put is the store's bound put_message; later _lone_put_response. */
static PyObject *sync_answer_later(PyObject *put, PyObject *channel, PyObject *request, PyObject *queue_id,
                                   PyObject *d, PyObject *codes, PyObject *trace, PyObject *later) {
    PyObject *store, *waiting, *answers, *transport = NULL, *response = NULL, *frame = NULL, *entry = NULL;
    PyObject *out = NULL;
    if (!PyMethod_Check(put) || sync_answer_names() < 0)
        goto done_clear;
    store = PyMethod_GET_SELF(put);
    waiting = PyObject_GetAttr(store, str_lone_waiting);
    if (waiting == NULL)
        goto done_clear;
    if (!PyTuple_CheckExact(waiting) || PyTuple_GET_SIZE(waiting) != LW_ITEMS ||
        PyTuple_GET_ITEM(waiting, LW_DEFERRED) != d || !PyList_CheckExact(PyTuple_GET_ITEM(waiting, LW_ANSWERS)) ||
        PyObject_SetAttr(store, str_lone_waiting, Py_None) < 0)
        goto done;
    answers = PyTuple_GET_ITEM(waiting, LW_ANSWERS);
    if (truth_attr(channel, str_write_now_flag) != 1 || (transport = PyObject_GetAttr(channel, str_transport)) == NULL)
        goto done;
    response = stored_response(PyTuple_GET_ITEM(waiting, LW_RESULT), request, queue_id, codes, trace);
    if (response == NULL || (frame = json_frame(NULL, response)) == NULL || !PyBytes_CheckExact(frame))
        goto done;
    if ((entry = PyList_New(SA_ITEMS)) == NULL)
        goto done;
    PyList_SET_ITEM(entry, SA_OFFSET, Py_NewRef(PyTuple_GET_ITEM(waiting, LW_OFFSET)));
    PyList_SET_ITEM(entry, SA_TRANSPORT, Py_NewRef(transport));
    PyList_SET_ITEM(entry, SA_FRAME, Py_NewRef(frame));
    if (sa_answered == NULL && (sa_answered = PyCFunction_New(&sync_answered_def, NULL)) == NULL)
        goto done;
    if (PyList_Append(answers, entry) < 0)
        goto done;
    {  /* d.addCallback(sync_answered, entry, later, request, queue_id) */
        PyObject *call[6] = {d, sa_answered, entry, later, request, queue_id};
        out = PyObject_VectorcallMethod(str_add_callback, call, 6, NULL);
    }
    if (out == NULL)  /* no callback will take it back: never write it */
        PyList_SetItem(entry, SA_FRAME, Py_NewRef(Py_None));
    else if (PyTuple_GET_ITEM(waiting, LW_DIRECT) != Py_None)  /* or the sync thread itself, as it ends */
        sw_arm(PyTuple_GET_ITEM(waiting, LW_DIRECT), channel, transport, entry);
done:
    Py_DECREF(waiting);
done_clear:
    PyErr_Clear();  /* lone_send's usual callback instead */
    Py_XDECREF(transport);
    Py_XDECREF(response);
    Py_XDECREF(frame);
    Py_XDECREF(entry);
    return out;
}

/* Write (send_now) and drop the answers of entries at the front of answers up to offset covers. */
static void write_answers(PyObject *answers, int64_t covers) {
    while (PyList_GET_SIZE(answers)) {
        PyObject *entry = PyList_GET_ITEM(answers, 0), *frame, *r;
        int64_t offset;
        if (!PyList_CheckExact(entry) || PyList_GET_SIZE(entry) != SA_ITEMS ||
            !I64_OK(PyList_GET_ITEM(entry, SA_OFFSET), &offset)) {
            PyErr_Clear();
            offset = covers;  /* not ours: dropped */
        } else if (offset > covers)
            return;
        Py_INCREF(entry);
        if (PyList_SetSlice(answers, 0, 1, NULL) < 0) {
            Py_DECREF(entry);
            PyErr_WriteUnraisable(answers);
            return;
        }
        if (PyList_CheckExact(entry) && PyList_GET_SIZE(entry) == SA_ITEMS &&
            (frame = PyList_GET_ITEM(entry, SA_FRAME)) != Py_None) {
            PyObject *call[3] = {sa_plain, PyList_GET_ITEM(entry, SA_TRANSPORT), frame};
            sw_forget(entry);
            r = send_now(NULL, call, 3);
            if (r == NULL)  /* transport.write raised after a partial send: its callback must not write again */
                PyErr_WriteUnraisable(entry);
            if (r != Py_None)
                PyList_SetItem(entry, SA_FRAME, Py_NewRef(Py_None));
            Py_XDECREF(r);
        }
        Py_DECREF(entry);
    }
}

/* sync_answer_reap(syncer, eventfd, covers, answers) -> [result, ...]: syncer_reap after reading the
 * eventfd ([] when it was not readable), the answers each successful sync covers (covers[i], the log
 * offset the i-th sync in flight covers) written first. */
static PyObject *sync_answer_reap(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    syncer_t *s;
    long long got[SYNCER_DEPTH];
    long n, i;
    long efd;
    uint64_t value;
    if (nargs != 4 || !PyList_CheckExact(args[2]) || !PyList_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError, "sync_answer_reap(syncer, eventfd, covers: list, answers: list)");
        return NULL;
    }
    s = syncer_of(args[0]);
    efd = PyLong_AsLong(args[1]);
    if (s == NULL || (efd == -1 && PyErr_Occurred()) || sync_answer_names() < 0)
        return NULL;
    if (read((int)efd, &value, sizeof value) < 0) {
        if (errno == EAGAIN || errno == EINTR)
            return PyList_New(0);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    n = syncer_take(s, got);
    for (i = 0; i < n && i < PyList_GET_SIZE(args[2]); i++) {
        int64_t covers;
        if (got[i] != 0 || !I64_OK(PyList_GET_ITEM(args[2], i), &covers)) {
            PyErr_Clear();
            continue;  /* failed: its puts wait for the next flush or their timeout */
        }
        write_answers(args[3], covers);
    }
    return results_list(got, n);
}

/* A non-negative int attribute of o within 64 bits into *out; 0 (cleared) when absent or not one. */
static int sa_int(PyObject *o, const char *name, int64_t *out) {
    PyObject *v = PyObject_GetAttrString(o, name);
    int ok = v != NULL && PyLong_CheckExact(v) && I64_OK(v, out) && *out >= 0;
    Py_XDECREF(v);
    if (!ok)
        PyErr_Clear();
    return ok;
}

/* sync_lone_put's call in progress: the syncer, started, the commit log's queue (lone_put runs on the
 * reactor thread only, and with the GIL held from here to its lone_appended call). */
static struct {
    syncer_t *s;
    PyObject *started, *queue;
} sa_put;

/* lone_appended: submit an fdatasync of mf, the file just written, when the next flush is flush_begin's
 * case (every unflushed byte in that file), appending its descriptor to started; else nothing. */
static void sync_appended(PyObject *mf) {
    syncer_t *s = sa_put.s;
    PyObject *fd_obj;
    int64_t where, from, wrote, flushed, fd;
    lone_appended = NULL;  /* once per sync_lone_put */
    if (s == NULL || !sa_int(sa_put.queue, "flushed_where", &where) || !sa_int(mf, "file_from_offset", &from) ||
        !sa_int(mf, "wrote_position", &wrote) || !sa_int(mf, "flushed_position", &flushed) ||
        !sa_int(mf, "_fd", &fd) || where < from || wrote <= flushed || fd > INT_MAX)
        return;
    if (syncer_queue(s, (int)fd) < 0)
        return;
    if ((fd_obj = PyLong_FromLongLong(fd)) == NULL || PyList_Append(sa_put.started, fd_obj) < 0)
        PyErr_WriteUnraisable(sa_put.started);  /* AioFdSync would wait for a sync it does not know of: rare enough */
    Py_XDECREF(fd_obj);
}

/* sync_lone_put(lone_put, commit_log, msg, syncer, started) -> what lone_put(commit_log, msg) gives; the
 * fdatasync the group commit will want is submitted to the native syncer right after the record is
 * written (before its dispatch, before any Python runs) and its descriptor appended to started
 * (AioFdSync.started: fdsync then claims it instead of submitting). Nothing submitted when the unflushed
 * bytes span files (a flush thread's job), or one submitted so is still unclaimed. */
static PyObject *sync_lone_put(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *r;
    syncer_t *s;
    if (nargs != 5 || !PyList_CheckExact(args[4])) {
        PyErr_SetString(PyExc_TypeError, "sync_lone_put(lone_put, commit_log, msg, syncer, started: list)");
        return NULL;
    }
    if ((s = syncer_of(args[3])) == NULL)
        return NULL;
    if (PyList_GET_SIZE(args[4]) != 0 || (sa_put.queue = PyObject_GetAttrString(args[1], "queue")) == NULL) {
        PyErr_Clear();
        return PyObject_Vectorcall(args[0], args + 1, 2, NULL);
    }
    sa_put.s = s, sa_put.started = args[4];
    lone_appended = sync_appended;
    r = PyObject_Vectorcall(args[0], args + 1, 2, NULL);
    lone_appended = NULL;
    sa_put.s = NULL, sa_put.started = NULL;
    Py_CLEAR(sa_put.queue);
    return r;
}

#define SYNC_ANSWER_METHODS \
    {"sync_lone_put", (PyCFunction)(void (*)(void))sync_lone_put, METH_FASTCALL, \
     "lone_put, then the group commit's fdatasync submitted to the native syncer at once."}, \
    {"sync_answer_reap", (PyCFunction)(void (*)(void))sync_answer_reap, METH_FASTCALL, \
     "AioFdSync.doRead for the native sync: the results, the answers they cover written first."},
#else
static PyObject *sync_answer_later(PyObject *put, PyObject *channel, PyObject *request, PyObject *queue_id,
                                   PyObject *d, PyObject *codes, PyObject *trace, PyObject *later) {
    return NULL;
}
#define SYNC_ANSWER_METHODS
#endif
