/* rocketpy._speedups, a lone send request from its decoded command to its answer's frame
 * (doc/benchmarks.md, "Twenty-third pass: the broker's lone request above the store"): included once, after
 * _speedups_remoting.h, whose helpers (sh_field, message_of, stored_response, json_frame) it uses.
 *
 * lone_send  SendMessageProcessor.process_request (rocketpy/broker/send.py) for the usual single
 *            send: header parsed without a SendHeader, topic checks read from the topic table,
 *            the message built, stored through the store's put_message, and the stored answer
 *            encoded; for anything else it returns None before any side effect, and the full
 *            Python path (RemotingNode.request_received) handles the request.
 * send_now   rocketpy.remoting.writenow.write_now for a plain TCP transport with nothing queued
 *            (a read's answers, RemotingProtocol._write_collected); None for anything else.
 */

/* The state tuple lone_send reads (SendMessageProcessor builds it once). */
enum { LS_TABLE, LS_PROBLEMS, LS_PEERS, LS_BUSY, LS_PUT, LS_LATER, LS_REFERENCE, LS_RESULT_TYPE, LS_STORE_HOST,
       LS_CLUSTER, LS_LIMIT, LS_MAX_BODY, LS_CODES, LS_TRACE, LS_ANSWERED, LS_ITEMS };
static PyObject *str_called, *str_paused, *str_result, *str_add_callback;

/* Intern names[i] into *out[i], those not done yet; -1 with an exception on failure. */
static int intern_names(const char *const *names, PyObject **const *out, int n) {
    int i;
    for (i = 0; i < n; i++)
        if (*out[i] == NULL && (*out[i] = PyUnicode_InternFromString(names[i])) == NULL)
            return -1;
    return 0;
}

static int request_names(void) {
    static const char *const names[] = {"called", "paused", "result", "addCallback"};
    static PyObject **const out[] = {&str_called, &str_paused, &str_result, &str_add_callback};
    return intern_names(names, out, 4);
}

/* The message of a usual lone send, as _prepare builds it, with its queue id; NULL without an
 * exception when the full path must decide (anything unusual, an error answer, the store busy),
 * NULL with one on failure. Reads only: nothing is stored here. */
static PyObject *lone_message(PyObject *const *state, PyObject *channel, PyObject *request, PyObject **queue_obj) {
    PyObject *h[SH_FIELDS], *ext = rc_get(request, RC_EXT), *body = rc_get(request, RC_BODY);
    PyObject *config = NULL, *born_host = NULL, *busy = NULL, *msg = NULL, *a[SM_ATTRS];
    int64_t queue_id;
    Py_ssize_t limit, max_body;
    int i, filled = 0, slow = 0;
    if (ext == NULL || body == NULL || !PyDict_CheckExact(ext) || SendHeader == NULL)
        return NULL;
    for (; filled < SH_FIELDS; filled++)  /* send_header's parse, without the SendHeader */
        if ((h[filled] = sh_field(ext, filled, &slow)) == NULL)
            goto python;
    if (h[LH_BATCH] != Py_False || !I32_OK(h[LH_QUEUE_ID], &queue_id) || queue_id < 0)
        goto python;
    config = sendable_config(state[LS_TABLE], state[LS_PROBLEMS], h[LH_TOPIC], queue_id);  /* checked before */
    if (config == NULL)
        goto python;
    born_host = cached_born_host(channel, state[LS_PEERS]);  /* parsed by _peer_host before */
    if (born_host == NULL)
        goto python;
    limit = PyLong_AsSsize_t(state[LS_LIMIT]);
    max_body = PyLong_AsSsize_t(state[LS_MAX_BODY]);
    if ((limit == -1 || max_body == -1) && PyErr_Occurred())
        goto python;
    message_attrs(h, a);
    *queue_obj = Py_NewRef(h[LH_QUEUE_ID]);
    if (state[LS_BUSY] != Py_None) {  /* else put_lone_now asks (None: busy) */
        busy = PyObject_CallNoArgs(state[LS_BUSY]);  /* reject_request: the full path answers SYSTEM_BUSY */
        if (busy == NULL || (i = PyObject_IsTrue(busy)) != 0)
            goto python;
    }
    msg = message_of(a, body, *queue_obj, born_host, state[LS_STORE_HOST], state[LS_CLUSTER], limit, max_body);
    if (msg == Py_None)
        Py_CLEAR(msg);
python:
    if (msg == NULL) {
        PyErr_Clear();  /* the full path decides again, and raises or answers what it must */
        Py_CLEAR(*queue_obj);
    }
    for (i = 0; i < filled; i++)
        Py_DECREF(h[i]);
    Py_XDECREF(config);
    Py_XDECREF(born_host);
    Py_XDECREF(busy);
    return msg;
}

/* rocketpy/_speedups_lonestore.h: put(msg), StoreService.put_lone_now's usual case in C */
static PyObject *store_put_now(PyObject *put, PyObject *msg);

/* rocketpy/_speedups_syncanswer.h: a put waiting for the native sync answered as the sync ends */
static PyObject *sync_answer_later(PyObject *put, PyObject *channel, PyObject *request, PyObject *queue_id,
                                   PyObject *d, PyObject *codes, PyObject *trace, PyObject *later);

/* The answer of a put that completed inline (process_request's check), else NULL (no exception). */
static PyObject *done_result(PyObject *d, PyObject *result_type) {
    PyObject *called = PyObject_GetAttr(d, str_called), *paused = NULL, *result = NULL;
    if (called == Py_True && (paused = PyObject_GetAttr(d, str_paused)) != NULL && PyLong_CheckExact(paused) &&
        PyObject_IsTrue(paused) == 0 && (result = PyObject_GetAttr(d, str_result)) != NULL &&
        (PyObject *)Py_TYPE(result) != result_type)
        Py_CLEAR(result);
    Py_XDECREF(called);
    Py_XDECREF(paused);
    PyErr_Clear();
    return result;
}

/* lone_send(state, channel, request) -> frame | response | Deferred | None
 * state: (topic table, topic problems, peer hosts, store.is_busy (None with put_lone_now, which
 *         asks it), store.put_lone_now (or put_message), _lone_put_response, _put_response,
 *         PutMessageResult, store host, cluster, properties limit, max body, stored codes, trace
 *         fields, store.lone_answered or None).
 * For a JSON request that wants an answer, whose send header send_header parses, not a batch, to
 * a given valid queue of a topic in the table that is writable and was checked before, from a
 * channel whose peer was parsed before, with a message single_message builds, and the store not
 * busy: the message is stored (store.put_lone_now) and, when the put completed at once (its
 * result itself), the answer written (answer_first: True) before the store's lone_answered;
 * else (store.put_message's Deferred) the answer is the response's frame when the put completed
 * inline and stored, else what process_request returns (the response, or the Deferred of it).
 * None, having done nothing, for anything else. */
static PyObject *lone_send(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *const *state, *request, *msg, *queue_obj = NULL, *d, *result, *response, *frame;
    if (nargs != 3 || !PyTuple_CheckExact(args[0]) || PyTuple_GET_SIZE(args[0]) != LS_ITEMS) {
        PyErr_SetString(PyExc_TypeError, "lone_send(state, channel, request)");
        return NULL;
    }
    if (str_write_nums == NULL || request_names() < 0 || single_message_names() < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "rocketpy._speedups.set_remoting() was not called");
        return NULL;
    }
    state = &PyTuple_GET_ITEM(args[0], 0), request = args[2];
    if (!wants_json_answer(request))
        Py_RETURN_NONE;
    Py_INCREF(request);  /* the store is Python code */
    msg = lone_message(state, args[1], request, &queue_obj);
    if (msg == NULL) {
        Py_DECREF(request);
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    d = store_put_now(state[LS_PUT], msg);  /* from here on the request is answered here (but None) */
    Py_DECREF(msg);
    response = NULL;
    if (d == Py_None) {  /* put_lone_now: the store is busy, nothing done: the full path refuses */
        response = d;
        d = NULL;
    } else if (d != NULL && state[LS_ANSWERED] != Py_None && (PyObject *)Py_TYPE(d) == state[LS_RESULT_TYPE]) {
        response = answer_first(args[1], request, queue_obj, d, state[LS_CODES], state[LS_TRACE],
                                state[LS_REFERENCE], state[LS_ANSWERED]);
        Py_DECREF(d);
    } else if (d != NULL) {
        result = done_result(d, state[LS_RESULT_TYPE]);
        if (result == NULL) {  /* stored later: d.addCallback(self._lone_put_response, request, queue_id) */
            PyObject *call[4] = {d, state[LS_LATER], request, queue_obj};
            response = sync_answer_later(state[LS_PUT], args[1], request, queue_obj, d, state[LS_CODES],
                                         state[LS_TRACE], state[LS_LATER]);  /* or its answer written at the sync's end */
            if (response == NULL)
                response = PyObject_VectorcallMethod(str_add_callback, call, 4, NULL);
        } else {
            response = stored_response(result, request, queue_obj, state[LS_CODES], state[LS_TRACE]);
            if (response == NULL) {  /* a refusal, or not the plain case: _put_response */
                PyObject *call[3] = {result, request, queue_obj};
                response = PyObject_Vectorcall(state[LS_REFERENCE], call, 3, NULL);
            } else {
                frame = json_frame(NULL, response);
                if (frame != Py_None)
                    Py_SETREF(response, frame);  /* the frame, or NULL on failure */
                else
                    Py_DECREF(frame);
            }
            Py_DECREF(result);
        }
        Py_DECREF(d);
    }
    Py_DECREF(queue_obj);
    Py_DECREF(request);
    return response;
}

/* ---- the answer written (rocketpy.remoting.writenow.write_now) ------------------------- */

static PyObject *str_temp_buffer, *str_offset, *str_data_buffer, *str_connected, *str_disconnecting,
    *str_write_disconnected, *str_tls, *str_send_limit, *str_socket, *str_send, *str_write;

static int send_names(void) {
    static const char *const names[] = {"_tempDataBuffer", "offset", "dataBuffer", "connected", "disconnecting",
                                        "_writeDisconnected", "TLS", "SEND_LIMIT", "socket", "send", "write"};
    static PyObject **const out[] = {&str_temp_buffer, &str_offset, &str_data_buffer, &str_connected,
                                     &str_disconnecting, &str_write_disconnected, &str_tls, &str_send_limit,
                                     &str_socket, &str_send, &str_write};
    return intern_names(names, out, 11);
}

/* Reading a transport's attributes (_speedups_attrs.h): a slot per type (tcp.Server, tcp.Client), copied per use */
static PyObject *const *const send_attr_names[] = {&str_temp_buffer, &str_offset, &str_data_buffer, &str_connected,
                                                   &str_disconnecting, &str_write_disconnected, &str_tls,
                                                   &str_send_limit};
static turn_attrs send_attrs[2] = {
    {NULL, 0, send_attr_names, sizeof(send_attr_names) / sizeof(PyObject **), NULL, 0},
    {NULL, 0, send_attr_names, sizeof(send_attr_names) / sizeof(PyObject **), NULL, 0}};

/* The truth of an attribute: 1, 0, or -1 (absent or an error: cleared). */
static int truth_attr(PyObject *obj, PyObject *name) {
    int r = attr_true(obj, name);  /* _speedups_producer.h */
    if (r < 0)
        PyErr_Clear();
    return r;
}

/* truth_attr of one of attrs' names */
static int send_truth(turn_attrs *attrs, PyObject *obj, PyObject *name) {
    int r = attrs_true(attrs, obj, name);
    if (r < 0)
        PyErr_Clear();
    return r;
}

/* 1 when transport's type is in plain (tcp.Server / tcp.Client with Connection's writeSomeData), nothing is
 * queued on it, it is connected and not closing, not TLS, and size bytes are within its SEND_LIMIT: what
 * write_now checks before its socket.send; 0 otherwise (any error cleared). */
static int send_ready(PyObject *plain, PyObject *transport, Py_ssize_t size) {
    PyObject *v;
    Py_ssize_t queued;
    int64_t offset, limit;
    turn_attrs *slot = send_attrs[0].type == Py_TYPE(transport) || send_attrs[0].type == NULL ? &send_attrs[0]
                                                                                               : &send_attrs[1];
    turn_attrs a = *slot;
    a.dict = NULL;
    if (send_names() < 0 || !PyAnySet_Check(plain) || PySet_Contains(plain, (PyObject *)Py_TYPE(transport)) != 1 ||
        attrs_begin(&a, transport) < 0)
        goto no;
    slot->type = a.type, slot->tag = a.tag, slot->settable = a.settable;
    v = attrs_get(&a, transport, str_temp_buffer);
    queued = v != NULL && PyList_CheckExact(v) ? PyList_GET_SIZE(v) : -1;
    Py_XDECREF(v);
    if (queued != 0)
        goto no;
    v = attrs_get(&a, transport, str_offset);
    if (v == NULL || !PyLong_CheckExact(v) || !I64_OK(v, &offset)) {
        Py_XDECREF(v);
        goto no;
    }
    Py_DECREF(v);
    v = attrs_get(&a, transport, str_data_buffer);
    queued = v != NULL && PyBytes_CheckExact(v) ? PyBytes_GET_SIZE(v) : -1;
    Py_XDECREF(v);
    if (queued < 0 || offset != queued || send_truth(&a, transport, str_connected) != 1 ||
        send_truth(&a, transport, str_disconnecting) != 0 || send_truth(&a, transport, str_write_disconnected) != 0 ||
        send_truth(&a, transport, str_tls) != 0)
        goto no;
    v = attrs_get(&a, transport, str_send_limit);
    if (v == NULL || !PyLong_CheckExact(v) || !I64_OK(v, &limit) || size > limit) {
        Py_XDECREF(v);
        goto no;
    }
    Py_DECREF(v);
    attrs_end(&a);
    return 1;
no:
    attrs_end(&a);
    PyErr_Clear();
    return 0;
}

/* transport.write(data[sent:]) when bytes data was not all sent: 0, or -1 with an exception */
static int write_rest(PyObject *transport, PyObject *data, Py_ssize_t sent) {
    Py_ssize_t size = PyBytes_GET_SIZE(data);
    PyObject *rest, *r;
    if (sent >= size)
        return 0;
    if (send_names() < 0)
        return -1;
    rest = sent == 0 ? Py_NewRef(data) : PyBytes_FromStringAndSize(PyBytes_AS_STRING(data) + sent, size - sent);
    if (rest == NULL)
        return -1;
    r = PyObject_CallMethodOneArg(transport, str_write, rest);
    Py_DECREF(rest);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* send_now(plain, transport, data) -> True, or None having done nothing
 * write_now for a transport send_ready accepts: socket.send(data) now, what it did not take (all of it after
 * an OSError, as write_now) through transport.write. None for anything else: then write_now decides. */
static PyObject *send_now(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *transport, *data, *sock, *sent_obj;
    Py_ssize_t size, sent = 0;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "send_now(plain, transport, data)");
        return NULL;
    }
    transport = args[1], data = args[2];
    if (!PyBytes_CheckExact(data))
        goto python;
    size = PyBytes_GET_SIZE(data);
    if (!send_ready(args[0], transport, size))
        goto python;
    sock = PyObject_GetAttr(transport, str_socket);
    if (sock == NULL)
        goto python;
    sent_obj = PyObject_CallMethodOneArg(sock, str_send, data);  /* retries EINTR itself (PEP 475) */
    Py_DECREF(sock);
    if (sent_obj == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_OSError))
            return NULL;
        PyErr_Clear();  /* would block, or the connection is failing: write queues it all */
    } else {
        sent = PyLong_AsSsize_t(sent_obj);
        Py_DECREF(sent_obj);
        if (sent < 0 || sent > size) {
            if (PyErr_Occurred())
                return NULL;
            sent = 0;
        }
    }
    if (write_rest(transport, data, sent) < 0)
        return NULL;
    Py_RETURN_TRUE;
python:
    PyErr_Clear();
    Py_RETURN_NONE;
}

#define REQUEST_METHODS \
    {"send_now", (PyCFunction)(void (*)(void))send_now, METH_FASTCALL, \
     "write_now's direct send for a plain TCP transport: True, or None having done nothing (remoting/writenow.py)."}, \
    {"lone_send", (PyCFunction)(void (*)(void))lone_send, METH_FASTCALL, \
     "A lone usual send request stored and answered: True (written), frame, response, Deferred, or None " \
     "(rocketpy.broker.send)."},
