/* rocketpy._speedups, the client's lone request (doc/benchmarks.md, "Twenty-fifth pass: the client's lone request"):
 * included once from _speedups.c, after _speedups_remoting.h (RemotingCommand's slots: rc_get).
 *
 * send_result_then  rocketpy.client.api.send_result_then for the usual answer to a send:
 *                   the SendResult built with its slots filled (no dataclass __init__ frame, no
 *                   _send_result frame), then ``then(result, *args)``. Anything else (a Failure, a
 *                   code that is not a send status, missing or unusual fields, another queue id)
 *                   goes to the Python reference, registered by set_send_result.
 *
 * TableBase         the state of rocketpy.remoting.pending.ResponseTable and its two per-request
 *                   methods, add_then and resolve (the Python _TableBase is the reference).
 *
 * The Python code is the reference; the C code takes only the well-formed common case.
 */

#define SR_FIELDS 7  /* SendResult's fields, in declaration order */
static const char *const SR_NAMES[SR_FIELDS] = {"status", "msg_id", "offset_msg_id", "queue", "queue_offset",
                                                "transaction_id", "region_id"};
static PyObject *sr_names[SR_FIELDS], *send_result_type, *send_statuses, *send_result_reference;
static PyObject *str_transaction_id, *str_msg_region, *str_default_region, *str_queue_id_field;
static Py_ssize_t sr_offsets[SR_FIELDS];
static int sr_slots;  /* 1 when SendResult is the slotted dataclass expected */

/* set_send_result(SendResult, statuses, reference): statuses maps int codes to SendStatus members;
 * reference is the Python send_result_then. rocketpy/client/api.py calls it at import. */
static PyObject *set_send_result(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyType_Check(args[0]) || !PyDict_CheckExact(args[1]) || !PyCallable_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "set_send_result(SendResult, statuses, reference)");
        return NULL;
    }
    if (intern_array(sr_names, SR_NAMES, SR_FIELDS) < 0)
        return NULL;
    if (str_transaction_id == NULL) {
        if ((str_transaction_id = PyUnicode_InternFromString("transactionId")) == NULL ||
            (str_msg_region = PyUnicode_InternFromString("MSG_REGION")) == NULL ||
            (str_default_region = PyUnicode_InternFromString("DefaultRegion")) == NULL ||
            (str_queue_id_field = PyUnicode_InternFromString("queue_id")) == NULL)
            return NULL;
    }
    Py_XSETREF(send_result_type, Py_NewRef(args[0]));
    Py_XSETREF(send_statuses, Py_NewRef(args[1]));
    Py_XSETREF(send_result_reference, Py_NewRef(args[2]));
    sr_slots = !PyObject_HasAttrString(args[0], "__post_init__") &&
               member_offsets(args[0], sr_names, SR_FIELDS, sr_offsets);
    Py_RETURN_NONE;
}

/* The value of a str of 1 to 18 ASCII digits with an optional leading '-' (what int() reads the
 * same way); 0 with *ok = 0 for anything else (whitespace, '+', '_', other digits: Python's int). */
static int64_t plain_decimal(PyObject *s, int *ok) {
    const char *p;
    Py_ssize_t i = 0, n;
    int64_t value = 0;
    *ok = 0;
    if (!PyUnicode_CheckExact(s) || !PyUnicode_IS_ASCII(s))
        return 0;
    p = (const char *)PyUnicode_DATA(s);
    n = PyUnicode_GET_LENGTH(s);
    if (n > 0 && p[0] == '-')
        i = 1;
    if (n - i < 1 || n - i > 18)
        return 0;
    for (; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return 0;
        value = value * 10 + (p[i] - '0');
    }
    *ok = 1;
    return p[0] == '-' ? -value : value;
}

/* The SendResult of a send's usual answer (a new reference): response a RemotingCommand with a send
 * status code and plain msgId, queueId (mq's own) and queueOffset fields; NULL without an exception
 * for anything else (the Python reference decides), NULL with one on failure. */
static PyObject *usual_send_result(PyObject *response, PyObject *mq, PyObject *msg_id) {
    PyObject *status, *ext, *store_id, *queue_id, *offset_text, *transaction, *region, *mq_id;
    PyObject *result, *offset;
    Py_ssize_t i;
    int64_t id, queue_offset;
    int ok;
    if (!sr_slots || !rc_slots || RemotingCommand == NULL || !Py_IS_TYPE(response, (PyTypeObject *)RemotingCommand))
        return NULL;
    if (rc_get(response, RC_CODE) == NULL)
        return NULL;
    status = PyDict_GetItemWithError(send_statuses, rc_get(response, RC_CODE));
    ext = rc_get(response, RC_EXT);
    if (status == NULL || ext == NULL || !PyDict_CheckExact(ext))
        return NULL;
    if ((store_id = PyDict_GetItemWithError(ext, str_msg_id)) == NULL ||
        (queue_id = PyDict_GetItemWithError(ext, str_queue_id)) == NULL ||
        (offset_text = PyDict_GetItemWithError(ext, str_queue_offset)) == NULL)
        return NULL;
    id = plain_decimal(queue_id, &ok);
    if (!ok)
        return NULL;
    queue_offset = plain_decimal(offset_text, &ok);
    if (!ok)
        return NULL;
    if ((mq_id = PyObject_GetAttr(mq, str_queue_id_field)) == NULL)
        return NULL;
    ok = 0;
    if (PyLong_CheckExact(mq_id)) {
        long long mine = PyLong_AsLongLong(mq_id);
        if (mine == -1 && PyErr_Occurred())
            PyErr_Clear();  /* beyond 64 bits: the reference compares */
        else
            ok = mine == id;
    }
    Py_DECREF(mq_id);
    if (!ok)  /* the broker picked another queue (or an odd one): the reference makes its MessageQueue */
        return NULL;
    transaction = PyDict_GetItemWithError(ext, str_transaction_id);
    if (transaction == NULL && PyErr_Occurred())
        return NULL;
    region = PyDict_GetItemWithError(ext, str_msg_region);
    if (region == NULL && PyErr_Occurred())
        return NULL;
    if ((offset = PyLong_FromLongLong(queue_offset)) == NULL)
        return NULL;
    result = ((PyTypeObject *)send_result_type)->tp_alloc((PyTypeObject *)send_result_type, 0);
    if (result != NULL) {
        PyObject *fields[SR_FIELDS] = {status, msg_id, store_id, mq, offset,
                                       transaction != NULL ? transaction : Py_None,
                                       region != NULL ? region : str_default_region};
        for (i = 0; i < SR_FIELDS; i++)
            *(PyObject **)((char *)result + sr_offsets[i]) = Py_NewRef(fields[i]);
    }
    Py_DECREF(offset);
    return result;
}

/* send_result_then(response, addr, mq, msg_id, then, args): see the top of this file. */
static PyObject *send_result_then(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *result, *call[16], *returned;
    Py_ssize_t n, i;
    if (nargs != 6 || !PyTuple_CheckExact(args[5])) {
        PyErr_SetString(PyExc_TypeError, "send_result_then(response, addr, mq, msg_id, then, args)");
        return NULL;
    }
    if (send_result_reference == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "rocketpy._speedups.set_send_result() was not called");
        return NULL;
    }
    n = PyTuple_GET_SIZE(args[5]);
    if (n > 15 || (result = usual_send_result(args[0], args[2], args[3])) == NULL) {
        if (PyErr_Occurred())
            return NULL;
        return PyObject_Vectorcall(send_result_reference, args, nargs, NULL);
    }
    call[0] = result;
    for (i = 0; i < n; i++)
        call[i + 1] = PyTuple_GET_ITEM(args[5], i);
    returned = PyObject_Vectorcall(args[4], call, n + 1, NULL);
    Py_DECREF(result);
    if (returned == NULL)
        return NULL;
    Py_DECREF(returned);
    Py_RETURN_NONE;
}

/* ---- the response table's per-request methods (rocketpy.remoting.pending) -------------------- */

/* TableBase: the state of rocketpy.remoting.pending.ResponseTable (_pending, _next) with its two
 * per-request methods, add_then and resolve, in C; the Python subclass has the others. The Python
 * _TableBase in pending.py is the reference. */
typedef struct {
    PyObject_HEAD
    PyObject *pending;  /* dict: opaque -> (then, args, deadline, release, close_on_timeout) */
    long long next;     /* the next opaque to try */
} TableBase;

static PyObject *outcome_reporter;  /* pending._outcome_failed(then, error): logs a raising ``then`` */
static PyObject *str_opaque_attr;

#define OPAQUE_MAX 2147483647LL
#define OPAQUE_MIN (-2147483647LL - 1)

static int table_traverse(TableBase *self, visitproc visit, void *arg) {
    Py_VISIT(self->pending);  /* a Python subclass's traverse visits its type */
    return 0;
}

static int table_clear(TableBase *self) {
    Py_CLEAR(self->pending);
    return 0;
}

static void table_dealloc(TableBase *self) {  /* a Python subclass's dealloc releases its type */
    PyObject_GC_UnTrack(self);
    table_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* add_then(request, deadline, then, args, release=None, close_on_timeout=False) -> opaque (positional). */
static PyObject *table_add_then(TableBase *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *key, *entry, *request;
    long long opaque;
    int taken;
    if (nargs < 4 || nargs > 6) {
        PyErr_SetString(PyExc_TypeError, "add_then(request, deadline, then, args, release=None, close_on_timeout=False)");
        return NULL;
    }
    if (self->pending == NULL || !PyDict_CheckExact(self->pending)) {
        PyErr_SetString(PyExc_TypeError, "ResponseTable._pending must be a dict");
        return NULL;
    }
    request = args[0];
    opaque = self->next;
    for (;;) {  /* the next free opaque: counts up, wraps to -2**31, skips opaques still pending */
        if ((key = PyLong_FromLongLong(opaque)) == NULL)
            return NULL;
        taken = PyDict_Contains(self->pending, key);
        if (taken <= 0)
            break;
        Py_DECREF(key);
        opaque = opaque < OPAQUE_MAX ? opaque + 1 : OPAQUE_MIN;
    }
    if (taken < 0)
        goto error;
    self->next = opaque < OPAQUE_MAX ? opaque + 1 : OPAQUE_MIN;
    if (rc_slots && RemotingCommand != NULL && Py_IS_TYPE(request, (PyTypeObject *)RemotingCommand))
        rc_set(request, RC_OPAQUE, Py_NewRef(key));
    else if (PyObject_SetAttr(request, str_opaque_attr, key) < 0)
        goto error;
    entry = PyTuple_Pack(5, args[2], args[3], args[1], nargs > 4 ? args[4] : Py_None,
                         nargs > 5 ? args[5] : Py_False);
    if (entry == NULL || PyDict_SetItem(self->pending, key, entry) < 0) {
        Py_XDECREF(entry);
        goto error;
    }
    Py_DECREF(entry);
    return key;
error:
    Py_DECREF(key);
    return NULL;
}

/* resolve(response) -> bool: the Python reference's, a raising ``then`` reported to outcome_reporter. */
static PyObject *table_resolve(TableBase *self, PyObject *response) {
    PyObject *key, *entry, *then, *then_args, *release, *call[16], *returned;
    Py_ssize_t n, i;
    if (self->pending == NULL || !PyDict_CheckExact(self->pending)) {
        PyErr_SetString(PyExc_TypeError, "ResponseTable._pending must be a dict");
        return NULL;
    }
    if (rc_slots && RemotingCommand != NULL && Py_IS_TYPE(response, (PyTypeObject *)RemotingCommand)) {
        key = Py_XNewRef(rc_get(response, RC_OPAQUE));
        if (key == NULL) {
            PyErr_SetString(PyExc_AttributeError, "opaque");
            return NULL;
        }
    } else if ((key = PyObject_GetAttr(response, str_opaque_attr)) == NULL) {
        return NULL;
    }
    entry = PyDict_GetItemWithError(self->pending, key);
    if (entry == NULL) {
        Py_DECREF(key);
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_FALSE;
    }
    Py_INCREF(entry);
    if (PyDict_DelItem(self->pending, key) < 0) {
        Py_DECREF(key);
        Py_DECREF(entry);
        return NULL;
    }
    Py_DECREF(key);
    if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 5) {
        Py_DECREF(entry);
        PyErr_SetString(PyExc_TypeError, "a ResponseTable entry is (then, args, deadline, release, close_on_timeout)");
        return NULL;
    }
    then = PyTuple_GET_ITEM(entry, 0);
    release = PyTuple_GET_ITEM(entry, 3);
    if ((then_args = PySequence_Tuple(PyTuple_GET_ITEM(entry, 1))) == NULL) {  /* a tuple: itself */
        Py_DECREF(entry);
        return NULL;
    }
    if (release != Py_None) {
        if ((returned = PyObject_CallNoArgs(release)) == NULL) {
            Py_DECREF(then_args);
            Py_DECREF(entry);
            return NULL;
        }
        Py_DECREF(returned);
    }
    n = PyTuple_GET_SIZE(then_args);
    if (n < 16) {
        call[0] = response;
        for (i = 0; i < n; i++)
            call[i + 1] = PyTuple_GET_ITEM(then_args, i);
        returned = PyObject_Vectorcall(then, call, n + 1, NULL);
    } else {  /* rare: many arguments */
        PyObject *first = PyTuple_Pack(1, response), *all = NULL;
        if (first != NULL)
            all = PySequence_Concat(first, then_args);
        Py_XDECREF(first);
        returned = all == NULL ? NULL : PyObject_Call(then, all, NULL);
        Py_XDECREF(all);
    }
    Py_DECREF(then_args);
    if (returned == NULL) {  /* an exception from ``then``: logged, never the caller's */
        PyObject *type, *value, *tb, *reported;
        if (!PyErr_ExceptionMatches(PyExc_Exception) || outcome_reporter == NULL) {
            Py_DECREF(entry);
            return NULL;  /* KeyboardInterrupt and the like go on, as in the reference */
        }
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        if (tb != NULL)
            PyException_SetTraceback(value, tb);
        reported = PyObject_CallFunctionObjArgs(outcome_reporter, then, value, NULL);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        if (reported == NULL) {
            Py_DECREF(entry);
            return NULL;
        }
        Py_DECREF(reported);
    } else {
        Py_DECREF(returned);
    }
    Py_DECREF(entry);
    Py_RETURN_TRUE;
}

static PyMethodDef table_methods[] = {
    {"add_then", (PyCFunction)(void (*)(void))table_add_then, METH_FASTCALL,
     "Register a request under the next free opaque (set on it, and returned); its outcome goes to then."},
    {"resolve", (PyCFunction)table_resolve, METH_O,
     "Complete the request a response answers; False when none is pending (a late reply)."},
    {NULL, NULL, 0, NULL}};

static PyMemberDef table_members[] = {
    {"_pending", T_OBJECT_EX, offsetof(TableBase, pending), 0, "opaque -> pending entry"},
    {"_next", T_LONGLONG, offsetof(TableBase, next), 0, "the next opaque to try"},
    {NULL, 0, 0, 0, NULL}};

static PyTypeObject TableBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "rocketpy._speedups.TableBase",
    .tp_basicsize = sizeof(TableBase),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The response table's state and per-request methods (rocketpy.remoting.pending).",
    .tp_traverse = (traverseproc)table_traverse,
    .tp_clear = (inquiry)table_clear,
    .tp_dealloc = (destructor)table_dealloc,
    .tp_methods = table_methods,
    .tp_members = table_members,
    .tp_new = PyType_GenericNew,
};

/* table_base(reporter) -> TableBase, made ready on first use; reporter(then, error) logs a raising then. */
static PyObject *table_base(PyObject *self, PyObject *reporter) {
    if (!PyCallable_Check(reporter)) {
        PyErr_SetString(PyExc_TypeError, "table_base(reporter)");
        return NULL;
    }
    if (str_opaque_attr == NULL && (str_opaque_attr = PyUnicode_InternFromString("opaque")) == NULL)
        return NULL;
    if (!(TableBaseType.tp_flags & Py_TPFLAGS_READY) && PyType_Ready(&TableBaseType) < 0)
        return NULL;
    Py_XSETREF(outcome_reporter, Py_NewRef(reporter));
    return Py_NewRef((PyObject *)&TableBaseType);
}

#define CLIENT_LONE_METHODS                                                                                   \
    {"set_send_result", (PyCFunction)(void (*)(void))set_send_result, METH_FASTCALL,                   \
     "Register SendResult, the send statuses by code and send_result_then's Python reference."},       \
    {"send_result_then", (PyCFunction)(void (*)(void))send_result_then, METH_FASTCALL,                 \
     "C rocketpy.client.api.send_result_then for the usual answer to a send."},                      \
    {"table_base", table_base, METH_O,                                                                  \
     "The response table's C base (add_then, resolve), given the reporter of a raising then."},
