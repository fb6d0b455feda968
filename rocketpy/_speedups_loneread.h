/* rocketpy._speedups, a read of one whole frame handled from the reactor's turn without a Python frame
 * (doc/benchmarks.md, "Thirty-fourth pass: the lone send's read without Python"): included once, after
 * _speedups_request.h (send_now; _speedups_answerfirst.h, before it, writes through channel_answer_now) and
 * before _speedups_reactor.h (whose turn_read calls lone_read_turn).
 *
 * set_lone_read(protocol_type, data_received, requests_received, failure, plain, write_now)
 *     remoting/node.py at import: RemotingProtocol, its dataReceived, RemotingNode.requests_received,
 *     twisted's Failure, writenow's PLAIN_SEND and write_now.
 * lone_read(protocol, data) -> True | None
 *     RemotingProtocol.dataReceived (rocketpy/remoting/protocol.py, the reference) for a read that is one
 *     whole plain frame, on a protocol of exactly that type whose dataReceived is that one, not broken, not
 *     paused, nothing unprocessed, owned by a node whose requests_received is RemotingNode's: the idle clock
 *     noted, the frame decoded (read_frames' plain_frame) and, a request, handed to the owner as
 *     RemotingNode.requests_received does with a read of one request (the processor's lone_request, then
 *     RemotingNode.lone_result for what is not answered yet; else request_received); a response resolves its
 *     request (else _late). Then the read's end: _write_collected, or _reading cleared; _close_when_answered
 *     when broken. None, having done nothing, for anything else: then dataReceived reads it.
 * channel_answer_now(channel, frame) (answer_now in the module, for tests)
 *     RemotingProtocol.answer_now (the reference) for a channel of exactly that type whose answer_now is that
 *     one; the method otherwise.
 */

static PyTypeObject *lr_protocol;  /* RemotingProtocol (a new reference), NULL until set_lone_read */
static PyObject *lr_data_received, *lr_requests_received, *lr_failure, *lr_plain, *lr_write_now, *lr_answer_now;
static PyObject *str_lr_broken, *str_lr_unprocessed, *str_lr_paused, *str_lr_max_length, *str_lr_owner,
    *str_lr_seconds, *str_lr_last_activity, *str_lr_reading, *str_lr_unanswered, *str_lr_out, *str_lr_rpc_hooks,
    *str_lr_processors, *str_lr_default, *str_lr_lone, *str_lr_code, *str_lr_lone_result, *str_lr_request_received,
    *str_lr_reply_failure, *str_lr_table, *str_lr_resolve, *str_lr_late, *str_lr_write_collected,
    *str_lr_close_when_answered, *str_lr_write_now, *str_lr_lost, *str_lr_transport, *str_lr_reply_frame,
    *str_lr_requests_received_name, *str_lr_data_received_name, *str_lr_answer_now;

static int lone_read_names(void) {
    static const char *const names[] = {
        "_broken", "_unprocessed", "paused", "MAX_LENGTH", "_owner", "_seconds", "_last_activity", "_reading",
        "_unanswered", "_out", "rpc_hooks", "_processors", "_default", "lone", "code", "lone_result",
        "request_received", "_reply_failure", "_table", "resolve", "_late", "_write_collected",
        "_close_when_answered", "_write_now", "_lost", "transport", "reply_frame", "requests_received",
        "dataReceived", "answer_now"};
    static PyObject **const out[] = {
        &str_lr_broken, &str_lr_unprocessed, &str_lr_paused, &str_lr_max_length, &str_lr_owner, &str_lr_seconds,
        &str_lr_last_activity, &str_lr_reading, &str_lr_unanswered, &str_lr_out, &str_lr_rpc_hooks,
        &str_lr_processors, &str_lr_default, &str_lr_lone, &str_lr_code, &str_lr_lone_result,
        &str_lr_request_received, &str_lr_reply_failure, &str_lr_table, &str_lr_resolve, &str_lr_late,
        &str_lr_write_collected, &str_lr_close_when_answered, &str_lr_write_now, &str_lr_lost, &str_lr_transport,
        &str_lr_reply_frame, &str_lr_requests_received_name, &str_lr_data_received_name, &str_lr_answer_now};
    return intern_names(names, out, (int)(sizeof(names) / sizeof(names[0])));
}

static PyObject *set_lone_read(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6 || !PyType_Check(args[0]) || !PyAnySet_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError,
                        "set_lone_read(protocol_type, data_received, requests_received, failure, plain, write_now)");
        return NULL;
    }
    if (lone_read_names() < 0)
        return NULL;
    Py_XSETREF(lr_protocol, (PyTypeObject *)Py_NewRef(args[0]));
    Py_XSETREF(lr_data_received, Py_NewRef(args[1]));
    Py_XSETREF(lr_requests_received, Py_NewRef(args[2]));
    Py_XSETREF(lr_failure, Py_NewRef(args[3]));
    Py_XSETREF(lr_plain, Py_NewRef(args[4]));
    Py_XSETREF(lr_write_now, Py_NewRef(args[5]));
    Py_XSETREF(lr_answer_now, Py_XNewRef(_PyType_Lookup((PyTypeObject *)args[0], str_lr_answer_now)));
    Py_RETURN_NONE;
}

/* Reading a protocol's and its owner's attributes (_speedups_attrs.h); the types' slots, copied for each use */
static PyObject *const *const lr_protocol_names[] = {
    &str_lr_broken, &str_lr_unprocessed, &str_lr_paused, &str_lr_max_length, &str_lr_owner, &str_lr_seconds,
    &str_lr_last_activity, &str_lr_reading, &str_lr_unanswered, &str_lr_out, &str_lr_table, &str_lr_write_now,
    &str_lr_lost, &str_lr_transport};
static turn_attrs lr_protocol_attrs = {NULL, 0, lr_protocol_names, sizeof(lr_protocol_names) / sizeof(PyObject **),
                                       NULL, 0};
static PyObject *const *const lr_owner_names[] = {&str_lr_processors, &str_lr_default, &str_lr_rpc_hooks};
static turn_attrs lr_owner_attrs = {NULL, 0, lr_owner_names, sizeof(lr_owner_names) / sizeof(PyObject **), NULL, 0};

/* Start reading obj's attributes with *local, a copy of *slot (whose check it keeps): 0, or -1 with an exception */
static int lr_begin(turn_attrs *local, turn_attrs *slot, PyObject *obj) {
    *local = *slot;
    if (attrs_begin(local, obj) < 0)
        return -1;
    slot->type = local->type, slot->tag = local->tag, slot->settable = local->settable;
    return 0;
}

/* 1 when obj (whose attributes attrs reads) would call function for obj.name(): its type's, not one of its own
 * (an instance attribute); 0 otherwise, or -1 with an exception */
static int lr_own_method(turn_attrs *attrs, PyObject *obj, PyObject *name, PyObject *function) {
    if (function == NULL || _PyType_Lookup(Py_TYPE(obj), name) != function || attrs->dict == NULL)
        return 0;
    switch (PyDict_Contains(attrs->dict, name)) {
    case 0:
        return 1;
    case 1:
        return 0;
    default:
        return -1;
    }
}

/* The truth of obj.name (any name, through PyObject_GetAttr): 1, 0, or -1 with an exception */
static int lr_true(PyObject *obj, PyObject *name) {
    turn_attrs generic = {NULL};
    return attrs_true(&generic, obj, name);
}

/* obj.name(args...) with at most 4 args: 0, or -1 with an exception */
static int lr_call(PyObject *obj, PyObject *name, PyObject *const *args, size_t n) {
    PyObject *call[5] = {obj}, *r;
    size_t i;
    for (i = 0; i < n && i < 4; i++)
        call[i + 1] = args[i];
    r = PyObject_VectorcallMethod(name, call, i + 1, NULL);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* obj.name += delta for an int attribute (one of attrs' names): 0, or -1 with an exception */
static int lr_add(turn_attrs *attrs, PyObject *obj, PyObject *name, long delta) {
    PyObject *v = attrs_get(attrs, obj, name), *d, *sum;
    int r;
    if (v == NULL)
        return -1;
    d = PyLong_FromLong(delta);
    sum = d == NULL ? NULL : PyNumber_Add(v, d);
    Py_DECREF(v);
    Py_XDECREF(d);
    if (sum == NULL)
        return -1;
    r = attrs_set(attrs, obj, name, sum);
    Py_DECREF(sum);
    return r;
}

/* The owner's part of one request alone in a read: RemotingNode.requests_received with len(requests) == 1
 * (the reference). 0, or -1 with an exception. */
static int lr_request(turn_attrs *oa, PyObject *protocol, PyObject *owner, PyObject *request) {
    PyObject *processors, *code, *registration, *lone = NULL, *result, *args[3];
    int r = 0;
    if ((processors = attrs_get(oa, owner, str_lr_processors)) == NULL)
        return -1;
    code = rc_slots && Py_IS_TYPE(request, (PyTypeObject *)RemotingCommand) ? Py_XNewRef(rc_get(request, RC_CODE))
                                                                            : PyObject_GetAttr(request, str_lr_code);
    if (code == NULL) {
        Py_DECREF(processors);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_AttributeError, "code");
        return -1;
    }
    /* self._processors.get(request.code, self._default) */
    registration = PyDict_CheckExact(processors) ? Py_XNewRef(PyDict_GetItemWithError(processors, code)) : NULL;
    if (registration == NULL && !PyErr_Occurred()) {
        PyObject *fallback = attrs_get(oa, owner, str_lr_default);
        if (fallback != NULL && !PyDict_CheckExact(processors))
            Py_SETREF(fallback, PyObject_CallMethod(processors, "get", "OO", code, fallback));
        registration = fallback;
    }
    Py_DECREF(code);
    Py_DECREF(processors);
    if (registration == NULL)
        return -1;
    if (registration != Py_None && (lone = PyObject_GetAttr(registration, str_lr_lone)) == NULL) {
        Py_DECREF(registration);
        return -1;
    }
    Py_DECREF(registration);
    args[0] = protocol, args[1] = request;
    if (lone == NULL || lone == Py_None || attrs_true(oa, owner, str_lr_rpc_hooks) != 0) {
        Py_XDECREF(lone);
        if (PyErr_Occurred())
            return -1;
        return lr_call(owner, str_lr_request_received, args, 2);  /* self.request_received(channel, request) */
    }
    result = PyObject_Vectorcall(lone, args, 2, NULL);
    Py_DECREF(lone);
    if (result == NULL) {
        PyObject *type, *value, *tb, *failure;
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            return -1;
        PyErr_Fetch(&type, &value, &tb);  /* self._reply_failure(Failure(), channel, request) */
        PyErr_NormalizeException(&type, &value, &tb);
        if (tb != NULL)
            PyException_SetTraceback(value, tb);
        failure = PyObject_CallFunctionObjArgs(lr_failure, value, type, tb != NULL ? tb : Py_None, NULL);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        if (failure == NULL)
            return -1;
        args[0] = failure, args[1] = protocol, args[2] = request;
        r = lr_call(owner, str_lr_reply_failure, args, 3);
        Py_DECREF(failure);
        return r;
    }
    if (result != Py_True) {  /* not answered yet: self.lone_result(result, channel, request) */
        args[0] = result, args[1] = protocol, args[2] = request;
        r = lr_call(owner, str_lr_lone_result, args, 3);
    }
    Py_DECREF(result);
    return r;
}

/* The frame's command handed over (the inside of dataReceived's try): 0, or -1 with an exception. */
static int lr_dispatch(turn_attrs *pa, PyObject *protocol, PyObject *command, int response) {
    PyObject *owner, *table, *resolved;
    int r;
    if (response) {  /* if not resolve(last): self._late(last) */
        if ((table = attrs_get(pa, protocol, str_lr_table)) == NULL)
            return -1;
        resolved = PyObject_CallMethodOneArg(table, str_lr_resolve, command);
        Py_DECREF(table);
        if (resolved == NULL || (r = PyObject_IsTrue(resolved)) < 0) {
            Py_XDECREF(resolved);
            return -1;
        }
        Py_DECREF(resolved);
        return r ? 0 : lr_call(protocol, str_lr_late, &command, 1);
    }
    /* self._unanswered += 1; self._owner.requests_received(self, [command]) */
    if (lr_add(pa, protocol, str_lr_unanswered, 1) < 0 || (owner = attrs_get(pa, protocol, str_lr_owner)) == NULL)
        return -1;
    {
        turn_attrs oa;
        if ((r = lr_begin(&oa, &lr_owner_attrs, owner)) == 0 &&
            (r = lr_own_method(&oa, owner, str_lr_requests_received_name, lr_requests_received)) == 1)
            r = lr_request(&oa, protocol, owner, command);  /* RemotingNode's, inlined */
        else if (r == 0)
            r = 2;
        attrs_end(&oa);
    }
    if (r != 2) {
        Py_DECREF(owner);
        return r;
    }
    {
        PyObject *requests = PyList_New(1), *args[2] = {protocol, requests};
        if (requests != NULL) {
            PyList_SET_ITEM(requests, 0, Py_NewRef(command));
            r = lr_call(owner, str_lr_requests_received_name, args, 2);
            Py_DECREF(requests);
        } else {
            r = -1;
        }
    }
    Py_DECREF(owner);
    return r;
}

/* dataReceived's finally: the collected writes written (or _reading cleared), then a broken channel closed
 * once answered. 0, or -1 with an exception. */
static int lr_read_end(turn_attrs *pa, PyObject *protocol) {
    int r = attrs_true(pa, protocol, str_lr_out), broken;
    if (r < 0)
        return -1;
    if (r ? lr_call(protocol, str_lr_write_collected, NULL, 0) < 0
          : attrs_set(pa, protocol, str_lr_reading, Py_False) < 0)
        return -1;
    if ((broken = attrs_true(pa, protocol, str_lr_broken)) <= 0)
        return broken;
    return lr_call(protocol, str_lr_close_when_answered, NULL, 0);
}

/* 1 when protocol is a RemotingProtocol whose read of data lone_read handles (the checks before any side
 * effect), with the frame's command in *command; 0 when not (nothing done), -1 with an exception. */
static int lr_accepts(turn_attrs *pa, PyObject *protocol, PyObject *data, PyObject **command, int *response) {
    PyObject *v;
    Py_ssize_t size, limit;
    uint32_t length;
    int r;
    *command = NULL;
    if (lr_protocol == NULL || !Py_IS_TYPE(protocol, lr_protocol) || !PyBytes_CheckExact(data) || orjson_loads == NULL)
        return 0;
    size = PyBytes_GET_SIZE(data);
    if (size < 4)
        return 0;
    length = (uint32_t)get_i32((const unsigned char *)PyBytes_AS_STRING(data));
    if ((uint64_t)length + 4 != (uint64_t)size)
        return 0;
    if (lr_begin(pa, &lr_protocol_attrs, protocol) < 0 ||
        (r = lr_own_method(pa, protocol, str_lr_data_received_name, lr_data_received)) < 0)
        return -1;
    if (r == 0)
        return 0;  /* a dataReceived of its own */
    if ((r = attrs_true(pa, protocol, str_lr_broken)) != 0 || (r = attrs_true(pa, protocol, str_lr_paused)) != 0)
        return r < 0 ? -1 : 0;
    if ((v = attrs_get(pa, protocol, str_lr_unprocessed)) == NULL)
        return -1;
    r = PyBytes_CheckExact(v) && PyBytes_GET_SIZE(v) == 0;
    Py_DECREF(v);
    if (!r)
        return 0;
    if ((v = attrs_get(pa, protocol, str_lr_max_length)) == NULL)
        return -1;
    limit = PyLong_Check(v) ? PyLong_AsSsize_t(v) : -1;
    Py_DECREF(v);
    if (limit < 0) {
        PyErr_Clear();
        return 0;
    }
    if ((Py_ssize_t)length > limit)
        return 0;  /* lengthLimitExceeded: dataReceived */
    if ((*command = plain_frame(PyBytes_AS_STRING(data), 4, size)) == NULL)
        return 0;  /* not the plain case (or malformed): dataReceived decodes it and answers */
    if ((*response = is_response(*command)) < 0) {
        PyErr_Clear();
        Py_CLEAR(*command);
        return 0;
    }
    return 1;
}

/* lone_read's work: 1 once handled (0 or -1 as dataReceived returned or raised), 0 having done nothing. */
static int lone_read_turn(PyObject *protocol, PyObject *data) {
    PyObject *command, *now, *type, *value, *tb;
    turn_attrs pa = {NULL};
    int response, r = lr_accepts(&pa, protocol, data, &command, &response);
    if (r <= 0) {
        attrs_end(&pa);
        return r;
    }
    Py_INCREF(protocol);
    now = attrs_get(&pa, protocol, str_lr_seconds);  /* self._last_activity = self._seconds() */
    Py_XSETREF(now, now == NULL ? NULL : PyObject_CallNoArgs(now));
    r = now == NULL ? -1 : attrs_set(&pa, protocol, str_lr_last_activity, now);
    Py_XDECREF(now);
    if (r == 0 && attrs_set(&pa, protocol, str_lr_reading, Py_True) == 0) {  /* nothing unprocessed stays b"" */
        r = lr_dispatch(&pa, protocol, command, response);
        PyErr_Fetch(&type, &value, &tb);
        if (lr_read_end(&pa, protocol) < 0) {
            r = -1;
            if (type != NULL)
                _PyErr_ChainExceptions(type, value, tb);  /* as a finally that raises */
        } else {
            PyErr_Restore(type, value, tb);
        }
    } else {
        r = -1;
    }
    Py_DECREF(command);
    Py_DECREF(protocol);
    attrs_end(&pa);
    return r < 0 ? -1 : 1;
}

static PyObject *lone_read(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    int r;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "lone_read(protocol, data)");
        return NULL;
    }
    r = lone_read_turn(args[0], args[1]);
    if (r < 0)
        return NULL;
    if (r == 0)
        Py_RETURN_NONE;
    Py_RETURN_TRUE;
}

/* channel.answer_now(frame), RemotingProtocol.answer_now in C (the reference) for a channel of exactly that
 * type, the method otherwise: 0, or -1 with an exception */
static int channel_answer_now(PyObject *channel, PyObject *frame) {
    PyObject *lost, *transport, *sent, *args[3];
    turn_attrs ca;
    int now;
    if (lr_protocol == NULL || !Py_IS_TYPE(channel, lr_protocol)) {
        PyObject *answer_now = PyUnicode_InternFromString("answer_now");
        now = answer_now == NULL ? -1 : lr_call(channel, answer_now, &frame, 1);
        Py_XDECREF(answer_now);
        return now;
    }
    if (lr_begin(&ca, &lr_protocol_attrs, channel) < 0 ||
        (now = lr_own_method(&ca, channel, str_lr_answer_now, lr_answer_now)) < 0) {
        attrs_end(&ca);
        return -1;
    }
    if (now == 0) {  /* an answer_now of its own, or another one */
        attrs_end(&ca);
        return lr_call(channel, str_lr_answer_now, &frame, 1);
    }
    /* if self._reading and self._write_now and not self._out and self._lost is None */
    if ((now = attrs_true(&ca, channel, str_lr_reading)) > 0 && (now = attrs_true(&ca, channel, str_lr_write_now)) > 0 &&
        (now = attrs_true(&ca, channel, str_lr_out)) >= 0) {
        now = !now;
        if (now) {
            lost = attrs_get(&ca, channel, str_lr_lost);
            now = lost == NULL ? -1 : lost == Py_None;
            Py_XDECREF(lost);
        }
    }
    if (now <= 0) {
        attrs_end(&ca);
        return now < 0 ? -1 : lr_call(channel, str_lr_reply_frame, &frame, 1);  /* self.reply_frame(frame) */
    }
    transport = lr_add(&ca, channel, str_lr_unanswered, -1) < 0 ? NULL : attrs_get(&ca, channel, str_lr_transport);
    attrs_end(&ca);
    if (transport == NULL)
        return -1;
    args[0] = lr_plain, args[1] = transport, args[2] = frame;  /* send_now(transport, frame) or write_now(...) */
    sent = send_now(NULL, args, 3);
    if (sent == Py_None) {
        Py_DECREF(sent);
        sent = PyObject_Vectorcall(lr_write_now, args + 1, 2, NULL);
    }
    Py_DECREF(transport);
    Py_XDECREF(sent);
    return sent == NULL ? -1 : 0;
}

static PyObject *answer_now_py(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "answer_now(channel, frame)");
        return NULL;
    }
    if (channel_answer_now(args[0], args[1]) < 0)
        return NULL;
    Py_RETURN_NONE;
}

#define LONE_READ_METHODS \
    {"answer_now", (PyCFunction)(void (*)(void))answer_now_py, METH_FASTCALL, \
     "answer_now(channel, frame): what answer_first calls, RemotingProtocol.answer_now in C for that type."}, \
    {"set_lone_read", (PyCFunction)(void (*)(void))set_lone_read, METH_FASTCALL, \
     "set_lone_read(RemotingProtocol, its dataReceived, RemotingNode.requests_received, Failure, plain, " \
     "write_now): what lone_read reads for (rocketpy/remoting/node.py)."}, \
    {"lone_read", (PyCFunction)(void (*)(void))lone_read, METH_FASTCALL, \
     "RemotingProtocol.dataReceived of one whole plain frame: True once handled, None having done nothing."},
