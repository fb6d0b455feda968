/* The batch put path's copies: write_buffers (store/mappedfile.py MappedFile.append_many) copies a
 * chunk's records into the mapped commit-log file in one call, not a Python slice assignment per
 * record. */

/* write_buffers(data, pos, buffers) -> end: each of ``buffers`` (bytes-like) copied back to back
 * into the writable buffer ``data`` from ``pos``; IndexError, and nothing written, when they
 * would not fit. */
static PyObject *write_buffers(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer dest;
    PyObject *seq;
    Py_ssize_t pos, n, total = 0, i;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "write_buffers(data, pos, buffers)");
        return NULL;
    }
    pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred())
        return NULL;
    seq = PySequence_Fast(args[2], "buffers must be a sequence");
    if (seq == NULL)
        return NULL;
    if (PyObject_GetBuffer(args[0], &dest, PyBUF_WRITABLE) < 0) {
        Py_DECREF(seq);
        return NULL;
    }
    n = PySequence_Fast_GET_SIZE(seq);
    for (i = 0; i < n; i++) {  /* sizes first: all or nothing */
        PyObject *b = PySequence_Fast_GET_ITEM(seq, i);
        if (PyByteArray_Check(b))
            total += PyByteArray_GET_SIZE(b);
        else if (PyBytes_Check(b))
            total += PyBytes_GET_SIZE(b);
        else {
            PyErr_SetString(PyExc_TypeError, "buffers must be bytes or bytearray");
            goto fail;
        }
    }
    if (pos < 0 || total > dest.len - pos) {
        PyErr_SetString(PyExc_IndexError, "the buffers do not fit the file");
        goto fail;
    }
    for (i = 0; i < n; i++) {
        PyObject *b = PySequence_Fast_GET_ITEM(seq, i);
        Py_ssize_t len = PyByteArray_Check(b) ? PyByteArray_GET_SIZE(b) : PyBytes_GET_SIZE(b);
        memcpy((char *)dest.buf + pos, PyByteArray_Check(b) ? PyByteArray_AS_STRING(b) : PyBytes_AS_STRING(b), len);
        pos += len;
    }
    PyBuffer_Release(&dest);
    Py_DECREF(seq);
    return PyLong_FromSsize_t(pos);
fail:
    PyBuffer_Release(&dest);
    Py_DECREF(seq);
    return NULL;
}
