/* rocketpy._speedups, the client's lone request (doc/benchmarks.md, "Pass: the client's lone request"):
 * included once from _speedups.c, after _speedups_remoting.h (RemotingCommand's slots: rc_get).
 *
 * send_result_then  rocketpy.client.api.send_result_then for the usual answer to a send:
 *                   the SendResult built with its slots filled (no dataclass __init__ frame, no
 *                   _send_result frame), then ``then(result, *args)``. Anything else (a Failure, a
 *                   code that is not a send status, missing or unusual fields, another queue id)
 *                   goes to the Python reference, registered by set_send_result.
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
    int i;
    if (nargs != 3 || !PyType_Check(args[0]) || !PyDict_CheckExact(args[1]) || !PyCallable_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "set_send_result(SendResult, statuses, reference)");
        return NULL;
    }
    for (i = 0; i < SR_FIELDS; i++)
        if (sr_names[i] == NULL && (sr_names[i] = PyUnicode_InternFromString(SR_NAMES[i])) == NULL)
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

/* send_result_then(response, addr, mq, msg_id, then, args): see the top of this file. */
static PyObject *send_result_then(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *response, *status, *ext, *msg_id, *queue_id, *offset_text, *transaction, *region, *mq_id;
    PyObject *result = NULL, *offset = NULL, *call[16], *returned;
    Py_ssize_t n, i;
    int64_t id, queue_offset;
    int ok;
    if (nargs != 6 || !PyTuple_CheckExact(args[5])) {
        PyErr_SetString(PyExc_TypeError, "send_result_then(response, addr, mq, msg_id, then, args)");
        return NULL;
    }
    if (send_result_reference == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "rocketpy._speedups.set_send_result() was not called");
        return NULL;
    }
    response = args[0];
    n = PyTuple_GET_SIZE(args[5]);
    if (!sr_slots || !rc_slots || RemotingCommand == NULL || !Py_IS_TYPE(response, (PyTypeObject *)RemotingCommand) ||
        n > 15)
        goto python;
    status = PyDict_GetItemWithError(send_statuses, rc_get(response, RC_CODE));
    ext = rc_get(response, RC_EXT);
    if (status == NULL || ext == NULL || !PyDict_CheckExact(ext)) {
        if (PyErr_Occurred())
            return NULL;
        goto python;
    }
    if ((msg_id = PyDict_GetItemWithError(ext, str_msg_id)) == NULL ||
        (queue_id = PyDict_GetItemWithError(ext, str_queue_id)) == NULL ||
        (offset_text = PyDict_GetItemWithError(ext, str_queue_offset)) == NULL) {
        if (PyErr_Occurred())
            return NULL;
        goto python;
    }
    id = plain_decimal(queue_id, &ok);
    if (!ok)
        goto python;
    queue_offset = plain_decimal(offset_text, &ok);
    if (!ok)
        goto python;
    if ((mq_id = PyObject_GetAttr(args[2], str_queue_id_field)) == NULL)
        return NULL;
    ok = PyLong_CheckExact(mq_id) && PyLong_AsLongLong(mq_id) == id;
    Py_DECREF(mq_id);
    if (!ok) {  /* the broker picked another queue: the reference makes its MessageQueue */
        if (PyErr_Occurred())
            PyErr_Clear();
        goto python;
    }
    transaction = PyDict_GetItemWithError(ext, str_transaction_id);
    if (transaction == NULL && PyErr_Occurred())
        return NULL;
    region = PyDict_GetItemWithError(ext, str_msg_region);
    if (region == NULL && PyErr_Occurred())
        return NULL;
    if ((offset = PyLong_FromLongLong(queue_offset)) == NULL)
        return NULL;
    result = ((PyTypeObject *)send_result_type)->tp_alloc((PyTypeObject *)send_result_type, 0);
    if (result == NULL) {
        Py_DECREF(offset);
        return NULL;
    }
    {
        PyObject *fields[SR_FIELDS] = {status, args[3], msg_id, args[2], offset,
                                       transaction != NULL ? transaction : Py_None,
                                       region != NULL ? region : str_default_region};
        for (i = 0; i < SR_FIELDS; i++)
            *(PyObject **)((char *)result + sr_offsets[i]) = Py_NewRef(fields[i]);
    }
    Py_DECREF(offset);
    call[0] = result;
    for (i = 0; i < n; i++)
        call[i + 1] = PyTuple_GET_ITEM(args[5], i);
    returned = PyObject_Vectorcall(args[4], call, n + 1, NULL);
    Py_DECREF(result);
    if (returned == NULL)
        return NULL;
    Py_DECREF(returned);
    Py_RETURN_NONE;
python:
    return PyObject_Vectorcall(send_result_reference, args, nargs, NULL);
}

#define CLIENT_LONE_METHODS                                                                                   \
    {"set_send_result", (PyCFunction)(void (*)(void))set_send_result, METH_FASTCALL,                   \
     "Register SendResult, the send statuses by code and send_result_then's Python reference."},       \
    {"send_result_then", (PyCFunction)(void (*)(void))send_result_then, METH_FASTCALL,                 \
     "C rocketpy.client.api.send_result_then for the usual answer to a send."},
