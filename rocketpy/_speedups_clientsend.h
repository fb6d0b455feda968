/* rocketpy._speedups, the producer's lone send from Producer.send to the socket and back (doc/benchmarks.md,
 * "Twenty-eighth pass: the client's lone send in C"): included once from _speedups.c, after _speedups_producer.h
 * (plain_send, new_member, fire_one, PS_SLOT), _speedups_table.h (usual_send_result, send_result_reference),
 * _speedups_remoting.h (new_command, json_frame) and _speedups_request.h (send_now).
 *
 * client_lone_send  plain_send's end for a usual send to a queue with nothing in flight: what
 *                   Producer._join_or_request -> AutoBatcher.join/_alone -> Producer._request_then ->
 *                   MQClientAPI.send_message_then (send_header, send_request) -> RemotingClient.invoke_then ->
 *                   RemotingProtocol.invoke_then/_send_request do, in one C call: the member Deferred, the
 *                   queue counted in flight, the request registered in the channel's response table and its
 *                   frame written (collected while the channel reads, unless it can leave at once: cs_write_now).
 *                   The send's one clock reading (plain_send's)
 *                   is its born timestamp and the start of its deadlines. Anything unusual (a subclass overriding
 *                   a step, RPC hooks, no connected channel, lingering, a producer not sending V2, ...) leaves it
 *                   to _join_or_request, before anything here changed.
 * lone_answered     what the table calls with the answer (the entry's then): send_result_then and
 *                   AutoBatcher._answered_alone in one C call for the usual answer (the caller's Deferred fired
 *                   with its SendResult, the queue idle again, or the one send that joined it meanwhile -- the
 *                   caller's next on a one-queue topic -- flushed alone: cs_flush_one); the Python ones for
 *                   anything else.
 *
 * The Python path is the reference (tests/client/test_clientsend.py compares them).
 */

enum { CS_LINGER, CS_SEND_THEN, CS_SMART, CS_GROUP, CS_QUEUE_NUMS, CS_INSTANCE, CS_API, CS_INVOKE_THEN, CS_PERMITS,
       CS_AVAILABLE, CS_RELEASE, CS_CLOSE_ON_TIMEOUT, CS_BY_ADDRESS, CS_CLOSING, CS_LOST, CS_BROKEN, CS_OWNER,
       CS_HOOKS_ON_SEND, CS_RPC_HOOKS, CS_INVOKE_THEN_NAME, CS_SEND_REQUEST, CS_TABLE, CS_ADD_THEN, CS_READING, CS_OUT,
       CS_WRITE, CS_SERIALIZE, CS_LANGUAGE, CS_FLAG, CS_ANSWERED_ALONE, CS_ANSWERED, CS_WRITE_NOW, CS_TRANSPORT,
       CS_PENDING, CS_ADDR, CS_MQ, CS_MODE, CS_CLOCK, CS_FLUSH, CS_NAMES };
static const char *const CS_TEXT[CS_NAMES] = {
    "linger", "_send_then", "send_smart_msg", "group", "default_topic_queue_nums", "instance", "api", "_invoke_then",
    "_async_permits", "available", "release", "_close_on_timeout", "_by_address", "closing", "_lost", "_broken",
    "_owner", "hooks_on_send", "rpc_hooks", "invoke_then", "_send_request", "_table", "add_then", "_reading", "_out",
    "_write", "_serialize_type", "_language", "flag", "_answered_alone", "_answered", "_write_now", "transport",
    "_pending", "addr", "mq", "mode", "_clock", "_flush"};
static PyObject *cs_names[CS_NAMES];
#define CS_KEYS 12  /* send_header's one-letter keys of a plain V2 send, in its order */
static const char *const CS_KEY_TEXT[CS_KEYS] = {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "m"};
static PyObject *cs_keys[CS_KEYS], *cs_zero_text, *cs_false_text;

/* Registered by lone_setup (rocketpy/client/producer.py); cs_ready is 0 until then. */
static PyObject *cs_request_then, *cs_batcher_cls, *cs_api_cls, *cs_client_invoke_then, *cs_permits_cls,
    *cs_channel_invoke_then, *cs_channel_send_request, *cs_tbw102, *cs_code, *cs_version, *cs_async, *cs_answered,
    *cs_plain_tcp;
static int cs_ready;

/* obj.name (a new reference), NULL with an exception when absent. */
static inline PyObject *cs_get(PyObject *obj, int name) {
    return PyObject_GetAttr(obj, cs_names[name]);
}

/* 1 when obj.name is a method of obj whose function is `function` (not overridden, not patched), 0 when not,
 * -1 on error. */
static int cs_method_is(PyObject *obj, int name, PyObject *function) {
    PyObject *m = cs_get(obj, name);
    int same;
    if (m == NULL)
        return -1;
    same = PyMethod_Check(m) && PyMethod_GET_FUNCTION(m) == function && PyMethod_GET_SELF(m) == obj;
    Py_DECREF(m);
    return same;
}

/* 1 when obj.name is true, 0 when false, -1 on error. */
static int cs_true(PyObject *obj, int name) {
    return attr_true(obj, cs_names[name]);  /* _speedups_producer.h */
}

/* The send header of a plain V2 send (api.send_header(group, msg, queue_id, 0, born_ms, queue_nums)). */
static PyObject *cs_header(PyObject *producer, PyObject *msg, PyObject *topic, PyObject *props, PyObject *mq,
                           PyObject *begin) {
    PyObject *v[CS_KEYS] = {NULL}, *fields = NULL, *o;
    double seconds = PyFloat_AsDouble(begin);
    int i;
    if (seconds == -1.0 && PyErr_Occurred())
        return NULL;
    v[0] = cs_get(producer, CS_GROUP);
    v[1] = Py_NewRef(topic);
    v[2] = Py_NewRef(cs_tbw102);
    if ((o = cs_get(producer, CS_QUEUE_NUMS)) != NULL) {
        v[3] = PyObject_Str(o);
        Py_DECREF(o);
    }
    if ((o = PyObject_GetAttr(mq, str_queue_id_field)) != NULL) {
        v[4] = PyObject_Str(o);
        Py_DECREF(o);
    }
    v[5] = Py_NewRef(cs_zero_text);
    v[6] = PyLong_FromDouble(seconds * 1000);  /* int(seconds * 1000) */
    if (v[6] != NULL)
        Py_SETREF(v[6], PyObject_Str(v[6]));
    if ((o = cs_get(msg, CS_FLAG)) != NULL) {
        v[7] = PyObject_Str(o);
        Py_DECREF(o);
    }
    v[8] = properties_to_string(NULL, props);
    v[9] = Py_NewRef(cs_zero_text);
    v[10] = Py_NewRef(cs_false_text);
    v[11] = Py_NewRef(cs_false_text);
    for (i = 0; i < CS_KEYS; i++)
        if (v[i] == NULL)
            goto done;
    if ((fields = _PyDict_NewPresized(CS_KEYS)) == NULL)
        goto done;
    for (i = 0; i < CS_KEYS; i++)
        if (PyDict_SetItem(fields, cs_keys[i], v[i]) < 0) {
            Py_CLEAR(fields);
            goto done;
        }
done:
    for (i = 0; i < CS_KEYS; i++)
        Py_XDECREF(v[i]);
    return fields;
}

/* The connected channel to addr and its client, as RemotingClient.invoke_then and RemotingProtocol.invoke_then
 * find them on their usual path (new references); 0 when the send must take the Python path, -1 on error. */
static int cs_channel(PyObject *producer, PyObject *addr, PyObject **remoting_out, PyObject **channel_out) {
    PyObject *instance = NULL, *api = NULL, *invoke = NULL, *remoting, *by_address = NULL, *channel = NULL, *owner = NULL;
    int ok = 0;
    if ((instance = cs_get(producer, CS_INSTANCE)) == NULL || (api = cs_get(instance, CS_API)) == NULL)
        goto done;
    if (!Py_IS_TYPE(api, (PyTypeObject *)cs_api_cls) || (invoke = cs_get(api, CS_INVOKE_THEN)) == NULL ||
        !PyMethod_Check(invoke) || PyMethod_GET_FUNCTION(invoke) != cs_client_invoke_then)
        goto done;
    remoting = PyMethod_GET_SELF(invoke);
    if ((by_address = cs_get(remoting, CS_BY_ADDRESS)) == NULL || !PyDict_CheckExact(by_address))
        goto done;
    channel = Py_XNewRef(PyDict_GetItemWithError(by_address, addr));
    if (channel == NULL || cs_true(channel, CS_CLOSING) != 0 || cs_method_is(channel, CS_INVOKE_THEN_NAME,
        cs_channel_invoke_then) != 1 || cs_method_is(channel, CS_SEND_REQUEST, cs_channel_send_request) != 1)
        goto done;
    /* RemotingProtocol.invoke_then's own test: not lost, not broken, no RPC hooks to run */
    if ((owner = cs_get(channel, CS_LOST)) == NULL || owner != Py_None || cs_true(channel, CS_BROKEN) != 0)
        goto done;
    Py_SETREF(owner, cs_get(channel, CS_OWNER));
    if (owner == NULL || (ok = cs_true(owner, CS_HOOKS_ON_SEND)) < 0 || (ok && (ok = cs_true(owner, CS_RPC_HOOKS)) != 0)) {
        ok = 0;
        goto done;
    }
    ok = 1;
    *remoting_out = Py_NewRef(remoting);
    *channel_out = Py_NewRef(channel);
done:
    Py_XDECREF(instance);
    Py_XDECREF(api);
    Py_XDECREF(invoke);
    Py_XDECREF(by_address);
    Py_XDECREF(channel);
    Py_XDECREF(owner);
    return PyErr_Occurred() ? -1 : ok;
}

/* The release and close_on_timeout of RemotingClient.invoke_then for mode (new references; an ASYNC send
 * takes its permit); 0 when no permit is free (the Python path fails the send), -1 on error. */
static int cs_permit(PyObject *remoting, PyObject *mode, PyObject **release, PyObject **close) {
    PyObject *permits, *available = NULL, *less = NULL;
    long long n;
    if (mode != cs_async) {
        if ((*close = cs_get(remoting, CS_CLOSE_ON_TIMEOUT)) == NULL)
            return -1;
        *release = Py_NewRef(Py_None);
        return 1;
    }
    if ((permits = cs_get(remoting, CS_PERMITS)) == NULL)
        return -1;
    if (!Py_IS_TYPE(permits, (PyTypeObject *)cs_permits_cls) || (available = cs_get(permits, CS_AVAILABLE)) == NULL ||
        !PyLong_CheckExact(available) || ((n = PyLong_AsLongLong(available)) == -1 && PyErr_Occurred()) || n <= 0 ||
        (less = PyLong_FromLongLong(n - 1)) == NULL || (*release = cs_get(permits, CS_RELEASE)) == NULL) {
        Py_DECREF(permits);
        Py_XDECREF(available);
        Py_XDECREF(less);
        return PyErr_Occurred() ? -1 : 0;
    }
    if (PyObject_SetAttr(permits, cs_names[CS_AVAILABLE], less) < 0) {  /* Permits.try_acquire */
        Py_CLEAR(*release);
        n = -1;
    }
    Py_DECREF(permits);
    Py_DECREF(available);
    Py_DECREF(less);
    *close = Py_NewRef(Py_False);
    return n < 0 ? -1 : 1;
}

/* A frame made while the channel reads (an answer's callback sent it) leaves at once, when nothing was
 * collected before it and no other request is pending on the channel (no other answer can be in this read
 * to leave with): send_now on a plain TCP transport with nothing queued (rocketpy/remoting/writenow.py).
 * 1 when written, 0 when it is to be collected as RemotingProtocol._send_request collects it, -1 on error. */
static int cs_write_now(PyObject *channel, PyObject *table, PyObject *out, PyObject *frame) {
    PyObject *pending, *transport, *r;
    int ok = 0;
    if (PyList_GET_SIZE(out) != 0 || (ok = cs_true(channel, CS_WRITE_NOW)) != 1)
        return ok < 0 ? -1 : 0;
    if ((pending = cs_get(table, CS_PENDING)) == NULL)
        return -1;
    ok = PyDict_CheckExact(pending) && PyDict_GET_SIZE(pending) == 1;
    Py_DECREF(pending);
    if (!ok)
        return 0;
    if ((transport = cs_get(channel, CS_TRANSPORT)) == NULL)
        return -1;
    {
        PyObject *call[3] = {cs_plain_tcp, transport, frame};
        r = send_now(NULL, call, 3);  /* _speedups_request.h */
    }
    Py_DECREF(transport);
    if (r == NULL)
        return -1;
    ok = r == Py_True;
    Py_DECREF(r);
    return ok;
}

/* AutoBatcher._alone(queue, member, timeout) for a single message sent as it is, through the producer's
 * _request_then and the client to the channel (see the top of this file): `now` is the send's one clock
 * reading (born timestamp; the table's deadline is now + timeout). `member` is the waiting send (a flush of
 * one), or NULL: then it is made here from made[] = {size, deadline, retry} (AutoBatcher.join). With
 * `flushing`, the queue's waiting list is emptied when the send is taken (AutoBatcher._flush). Returns the
 * member (a new reference); NULL without an exception when the Python steps must take it (nothing here
 * changed), NULL with one on failure. */
static PyObject *cs_alone(PyObject *producer, PyObject *batcher, PyObject *queue, PyObject *msg, PyObject *now,
                          PyObject *timeout, PyObject *member, PyObject *const *made, int flushing) {
    PyObject *o = NULL, *remoting = NULL, *channel = NULL, *release = NULL, *close = NULL, *addr = NULL, *mq = NULL;
    PyObject *mode = NULL, *deadline = NULL, *fields = NULL, *request = NULL, *then_args = NULL, *frame = NULL;
    PyObject *table = NULL, *topic, *props, *msg_id, *serialize = NULL, *language = NULL;
    int ok, reading = 0;
    Py_XINCREF(member);
    /* _alone's send_then is the producer's _request_then, which sends V2 through the client API */
    if ((o = cs_get(batcher, CS_SEND_THEN)) == NULL || !PyMethod_Check(o) || PyMethod_GET_FUNCTION(o) != cs_request_then ||
        PyMethod_GET_SELF(o) != producer)
        goto python;
    Py_CLEAR(o);
    if ((o = cs_get(producer, CS_SMART)) == NULL || o != Py_True)
        goto python;
    Py_CLEAR(o);
    /* the queue's own address, MessageQueue and mode (what _alone passes) */
    if ((addr = cs_get(queue, CS_ADDR)) == NULL || (mq = cs_get(queue, CS_MQ)) == NULL || (mode = cs_get(queue, CS_MODE)) == NULL)
        goto python;
    if ((ok = cs_channel(producer, addr, &remoting, &channel)) != 1)
        goto python;
    if ((serialize = cs_get(remoting, CS_SERIALIZE)) == NULL || (language = cs_get(remoting, CS_LANGUAGE)) == NULL ||
        (table = cs_get(channel, CS_TABLE)) == NULL)
        goto python;
    topic = PS_SLOT(msg, ps_message_at[0]);
    props = PS_SLOT(msg, ps_message_at[2]);
    if (!Py_IS_TYPE(msg, (PyTypeObject *)ps_message_cls) || topic == NULL || props == NULL || !PyDict_CheckExact(props) ||
        PS_SLOT(msg, ps_message_at[1]) == NULL)
        goto python;
    msg_id = Py_XNewRef(PyDict_GetItemWithError(props, ps_uniq));
    if (msg_id == NULL)
        goto python;
    /* the request (send_message_then's, stamped by RemotingClient.invoke_then) */
    fields = cs_header(producer, msg, topic, props, mq, now);
    if (fields == NULL) {
        Py_DECREF(msg_id);
        goto python;
    }
    {
        PyObject *f[RC_FIELDS] = {cs_code, language, cs_version, zero, zero, Py_None, fields,
                                  PS_SLOT(msg, ps_message_at[1]), serialize};
        request = new_command(f);
    }
    if (request == NULL || (deadline = PyNumber_Add(now, timeout)) == NULL || (then_args = PyTuple_New(6)) == NULL) {
        Py_DECREF(msg_id);
        goto python;
    }
    PyTuple_SET_ITEM(then_args, 0, Py_NewRef(addr));
    PyTuple_SET_ITEM(then_args, 1, Py_NewRef(mq));
    PyTuple_SET_ITEM(then_args, 2, msg_id);  /* the reference taken */
    PyTuple_SET_ITEM(then_args, 3, Py_NewRef(queue));
    PyTuple_SET_ITEM(then_args, 5, Py_NewRef(batcher));
    /* from here on, what AutoBatcher.join/_flush and _alone change: the member, the queue, the permit */
    if ((ok = cs_permit(remoting, mode, &release, &close)) != 1)
        goto python;
    if (member == NULL && ((member = new_member()) == NULL || set_member_slot(member, 0, msg) < 0 ||
                           set_member_slot(member, 1, made[0]) < 0 || set_member_slot(member, 2, made[1]) < 0 ||
                           set_member_slot(member, 3, made[2]) < 0)) {
        PyObject *r;
        Py_CLEAR(member);
        if (release != Py_None && (r = PyObject_CallNoArgs(release)) != NULL)  /* the permit back */
            Py_DECREF(r);
        goto done;
    }
    if (flushing) {  /* _flush: waiting, queue.waiting = queue.waiting, [] */
        if ((o = PyList_New(0)) == NULL)
            goto failed;
        Py_XSETREF(PS_SLOT(queue, ps_queue_at[1]), o);
        o = NULL;
    }
    PyTuple_SET_ITEM(then_args, 4, Py_NewRef(member));
    Py_XSETREF(PS_SLOT(queue, ps_queue_at[0]), Py_NewRef(one));  /* queue.in_flight += 1 (it was 0) */
    {
        PyObject *call[7] = {table, request, deadline, cs_answered, then_args, release, close}, *opaque;
        opaque = PyObject_VectorcallMethod(cs_names[CS_ADD_THEN], call, 7 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        if (opaque == NULL)
            goto failed;
        Py_DECREF(opaque);
    }
    /* RemotingProtocol._send_request: the frame collected while the channel reads, else written */
    frame = PyLong_Check(serialize) && PyLong_AsLong(serialize) == 0 ? json_frame(NULL, request) : Py_NewRef(Py_None);
    if (frame == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            goto failed;
        PyErr_Clear();
    }
    if (frame == NULL || frame == Py_None || (reading = cs_true(channel, CS_READING)) < 0 ||
        (reading && ((o = cs_get(channel, CS_OUT)) == NULL || !PyList_CheckExact(o)))) {
        PyErr_Clear();
        Py_CLEAR(o);
        o = PyObject_CallMethodOneArg(channel, cs_names[CS_SEND_REQUEST], request);  /* the encoder's answer */
    } else if (reading) {
        if ((ok = cs_write_now(channel, table, o, frame)) < 0 || (ok == 0 && PyList_Append(o, frame) < 0))
            Py_CLEAR(o);
    } else {
        o = PyObject_CallMethodOneArg(channel, cs_names[CS_WRITE], frame);
    }
    if (o == NULL)
        goto failed;
    Py_CLEAR(o);
    goto done;
failed:  /* as _alone: _answered_alone(Failure(), queue, member) */
    if (!PyErr_ExceptionMatches(PyExc_Exception)) {  /* KeyboardInterrupt and the like go on */
        Py_CLEAR(member);
        goto done;
    }
    {
        PyObject *failure = failure_of_raised(member), *r = NULL;
        if (failure != NULL) {
            PyObject *call[4] = {batcher, failure, queue, member};
            r = PyObject_VectorcallMethod(cs_names[CS_ANSWERED_ALONE], call, 4 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
            Py_DECREF(failure);
        }
        if (r == NULL)
            Py_CLEAR(member);
        Py_XDECREF(r);
    }
    goto done;
python:
    if (PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_Exception))
            PyErr_Clear();  /* the Python path finds the same answer, or the error */
    }
    Py_CLEAR(member);
done:
    Py_XDECREF(o);
    Py_XDECREF(remoting);
    Py_XDECREF(channel);
    Py_XDECREF(release);
    Py_XDECREF(close);
    Py_XDECREF(addr);
    Py_XDECREF(mq);
    Py_XDECREF(mode);
    Py_XDECREF(deadline);
    Py_XDECREF(fields);
    Py_XDECREF(request);
    Py_XDECREF(then_args);
    Py_XDECREF(frame);
    Py_XDECREF(table);
    Py_XDECREF(serialize);
    Py_XDECREF(language);
    return member;
}

/* plain_send's end for a send to `queue` (NULL: none yet), after it set the queue index, the UNIQ_KEY and
 * made `first` (see the top of this file): AutoBatcher.join sends it alone when nothing is in flight or
 * waiting and nothing lingers. The member Deferred; NULL without an exception when the send takes
 * Producer._join_or_request (nothing here changed), NULL with one on failure. */
static PyObject *client_lone_send(PyObject *producer, PyObject *batcher, PyObject *queue, PyObject *addr, PyObject *msg,
                                  PyObject *mq, PyObject *mode, PyObject *timeout, PyObject *begin, PyObject *first,
                                  PyObject *size_obj) {
    PyObject *in_flight, *waiting, *linger, *deadline, *member;
    double seconds;
    if (!cs_ready || queue == NULL || !Py_IS_TYPE(queue, (PyTypeObject *)ps_queue_cls) ||
        !Py_IS_TYPE(batcher, (PyTypeObject *)cs_batcher_cls))
        return NULL;
    in_flight = PS_SLOT(queue, ps_queue_at[0]);
    waiting = PS_SLOT(queue, ps_queue_at[1]);
    if (in_flight == NULL || !PyLong_CheckExact(in_flight) || PyLong_AsLong(in_flight) != 0 || waiting == NULL ||
        !PyList_CheckExact(waiting) || PyList_GET_SIZE(waiting) != 0)
        goto python;
    if ((linger = cs_get(batcher, CS_LINGER)) == NULL)
        goto python;
    seconds = PyFloat_AsDouble(linger);
    Py_DECREF(linger);
    if (seconds > 0 || (seconds == -1.0 && PyErr_Occurred()) || (deadline = PyNumber_Add(begin, timeout)) == NULL)
        goto python;
    {
        PyObject *made[3] = {size_obj, deadline, first};
        member = cs_alone(producer, batcher, queue, msg, begin, timeout, NULL, made, 0);
    }
    Py_DECREF(deadline);
    return member;
python:
    if (PyErr_Occurred() && PyErr_ExceptionMatches(PyExc_Exception))
        PyErr_Clear();
    return NULL;
}

/* AutoBatcher._flush(queue) when the one send waiting is still in time (its send alone): 1 when taken,
 * 0 when the Python _flush must run (nothing changed), -1 on error. The queue has nothing in flight. */
static int cs_flush_one(PyObject *batcher, PyObject *queue) {
    PyObject *member = PyList_GET_ITEM(PS_SLOT(queue, ps_queue_at[1]), 0), *send_then, *clock = NULL, *now = NULL;
    PyObject *timeout = NULL, *msg, *deadline, *taken = NULL;
    if (!Py_IS_TYPE(member, (PyTypeObject *)ps_member_cls) || ws_at[0] < 0 || (msg = PS_SLOT(member, ws_at[0])) == NULL ||
        (deadline = PS_SLOT(member, ws_at[2])) == NULL || !PyFloat_CheckExact(deadline))
        return 0;
    Py_INCREF(member);
    if ((send_then = cs_get(batcher, CS_SEND_THEN)) == NULL || !PyMethod_Check(send_then) ||
        (clock = cs_get(batcher, CS_CLOCK)) == NULL || (now = PyObject_CallMethodNoArgs(clock, ps_names[PS_SECONDS])) == NULL ||
        !PyFloat_CheckExact(now) || PyFloat_AS_DOUBLE(deadline) <= PyFloat_AS_DOUBLE(now))  /* timed out: _flush fails it */
        goto done;
    if ((timeout = PyFloat_FromDouble(PyFloat_AS_DOUBLE(deadline) - PyFloat_AS_DOUBLE(now))) == NULL)
        goto done;
    taken = cs_alone(PyMethod_GET_SELF(send_then), batcher, queue, msg, now, timeout, member, NULL, 1);
done:
    Py_DECREF(member);
    Py_XDECREF(send_then);
    Py_XDECREF(clock);
    Py_XDECREF(now);
    Py_XDECREF(timeout);
    if (taken != NULL) {
        Py_DECREF(taken);
        return 1;
    }
    if (PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            return -1;
        PyErr_Clear();  /* the Python _flush finds the same answer, or the error */
    }
    return 0;
}

/* lone_answered(response, addr, mq, msg_id, queue, member, batcher): see the top of this file. */
static PyObject *lone_answered(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *result, *queue, *in_flight, *waiting, *linger_call, *r;
    long count;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "lone_answered(response, addr, mq, msg_id, queue, member, batcher)");
        return NULL;
    }
    queue = args[4];
    if (!cs_ready || !fire_ready || !Py_IS_TYPE(queue, (PyTypeObject *)ps_queue_cls) ||
        (result = usual_send_result(args[0], args[2], args[3])) == NULL) {
        PyObject *call[6], *then, *rest;
        if (PyErr_Occurred())
            return NULL;
        /* send_result_then(response, addr, mq, msg_id, batcher._answered_alone, (queue, member)) */
        if ((then = PyObject_GetAttr(args[6], cs_names[CS_ANSWERED_ALONE])) == NULL)
            return NULL;
        if ((rest = PyTuple_Pack(2, queue, args[5])) == NULL) {
            Py_DECREF(then);
            return NULL;
        }
        call[0] = args[0], call[1] = args[1], call[2] = args[2], call[3] = args[3], call[4] = then, call[5] = rest;
        r = send_result_reference == NULL ? (PyErr_SetString(PyExc_RuntimeError, "set_send_result() was not called"), NULL)
                                          : PyObject_Vectorcall(send_result_reference, call, 6, NULL);
        Py_DECREF(then);
        Py_DECREF(rest);
        return r;
    }
    if (fire_one(args[5], result) < 0) {  /* as _answered_alone: the queue stays counted */
        Py_DECREF(result);
        return NULL;
    }
    Py_DECREF(result);
    /* AutoBatcher._answered(queue): in C when nothing waits for a flush it would make, or the one send
     * that joined meanwhile (the caller's next, to a queue of its own) leaves alone */
    in_flight = PS_SLOT(queue, ps_queue_at[0]);
    waiting = PS_SLOT(queue, ps_queue_at[1]);
    linger_call = PS_SLOT(queue, ps_queue_at[2]);
    if (in_flight != NULL && PyLong_CheckExact(in_flight) && waiting != NULL && PyList_CheckExact(waiting) &&
        ((count = PyLong_AsLong(in_flight)) > 0 || !PyErr_Occurred())) {
        int lingers = linger_call != NULL && linger_call != Py_None, flushes = !lingers &&
            PyList_GET_SIZE(waiting) == 1 && count == 1;
        if (PyList_GET_SIZE(waiting) == 0 || lingers || flushes) {
            PyObject *less = PyNumber_Subtract(in_flight, one);
            int taken = 1;
            if (less == NULL)
                return NULL;
            Py_XSETREF(PS_SLOT(queue, ps_queue_at[0]), less);
            if (flushes && (taken = cs_flush_one(args[6], queue)) < 0)
                return NULL;
            if (taken)
                Py_RETURN_NONE;
            {
                PyObject *call[2] = {args[6], queue};  /* what _answered does next */
                return PyObject_VectorcallMethod(cs_names[CS_FLUSH], call, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
            }
        }
    }
    PyErr_Clear();
    {
        PyObject *call[2] = {args[6], queue};
        return PyObject_VectorcallMethod(cs_names[CS_ANSWERED], call, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    }
}

/* lone_setup(request_then, batcher_cls, api_cls, client_invoke_then, permits_cls, channel_invoke_then,
 * channel_send_request, tbw102, code, version, async_mode, answered, plain_tcp): after plain_setup and
 * set_send_result; plain_tcp is writenow.PLAIN_SEND (send_now's transport types). */
static PyObject *lone_setup(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject **targets[13] = {&cs_request_then, &cs_batcher_cls, &cs_api_cls, &cs_client_invoke_then, &cs_permits_cls,
                              &cs_channel_invoke_then, &cs_channel_send_request, &cs_tbw102, &cs_code, &cs_version,
                              &cs_async, &cs_answered, &cs_plain_tcp};
    int i;
    if (nargs != 13 || !PyType_Check(args[1]) || !PyType_Check(args[2]) || !PyType_Check(args[4]) ||
        !PyUnicode_CheckExact(args[7]) || !PyLong_CheckExact(args[8]) || !PyLong_CheckExact(args[9]) ||
        !PyAnySet_Check(args[12])) {
        PyErr_SetString(PyExc_TypeError, "lone_setup(request_then, batcher_cls, api_cls, client_invoke_then, "
                        "permits_cls, channel_invoke_then, channel_send_request, tbw102, code, version, async, answered, "
                        "plain_tcp)");
        return NULL;
    }
    if (intern_array(cs_names, CS_TEXT, CS_NAMES) < 0 || intern_array(cs_keys, CS_KEY_TEXT, CS_KEYS) < 0)
        return NULL;
    if ((cs_zero_text == NULL && (cs_zero_text = PyUnicode_InternFromString("0")) == NULL) ||
        (cs_false_text == NULL && (cs_false_text = PyUnicode_InternFromString("false")) == NULL))
        return NULL;
    for (i = 0; i < 13; i++)
        Py_XSETREF(*targets[i], Py_NewRef(args[i]));
    /* the pieces it reads: plain_send's, the SendResult's (set_send_result), the command's, json_frame's */
    cs_ready = ps_ready && fire_ready && sr_slots && rc_slots && RemotingCommand != NULL && zero != NULL && one != NULL;
    return PyBool_FromLong(cs_ready);
}

#define CLIENTSEND_METHODS                                                                                    \
    {"lone_setup", (PyCFunction)(void (*)(void))lone_setup, METH_FASTCALL,                                  \
     "Register the steps of a lone send that plain_send takes in C (rocketpy/client/producer.py)."},      \
    {"lone_answered", (PyCFunction)(void (*)(void))lone_answered, METH_FASTCALL,                            \
     "The answer to a lone send made in C: the caller's Deferred fired, the queue idle again."},
