/* rocketpy._speedups, the client's part: included once from _speedups.c.
 *
 * A producer's send request carries the message properties in one header field, names and values
 * joined by \x01 and \x02 (rocketpy.client.api.send_header). JSON writes those as \u0001 and
 * \u0002, so json_frame, which writes only strings needing no escapes, left every send request to
 * the Python encoder (rocketpy.remoting.codec._json_header, orjson: the reference). json_frame
 * writes extFields values with these two functions instead: control characters become the same
 * \u00XX escapes orjson writes; anything else that needs escaping still goes to Python.
 */

/* Length of s as a JSON string (quotes included) when s is an exact, ASCII str whose only
 * characters needing escapes are control characters orjson writes as \u00XX (all below 0x20 but
 * \b \t \n \f \r, which have short escapes); -1 for anything else. */
static Py_ssize_t control_json(PyObject *s) {
    const unsigned char *p;
    Py_ssize_t i, n, length;
    if (!PyUnicode_CheckExact(s) || !PyUnicode_IS_ASCII(s))
        return -1;
    p = (const unsigned char *)PyUnicode_DATA(s);
    n = PyUnicode_GET_LENGTH(s);
    length = n + 2;
    for (i = written_run(p, n); i < n; i += 1 + written_run(p + i + 1, n - i - 1)) {  /* from one escape to the next */
        unsigned char c = p[i];
        if (c >= 0x20 || c == '\b' || c == '\t' || c == '\n' || c == '\f' || c == '\r')
            return -1;  /* a quote, a backslash, DEL or a short escape */
        length += 5;  /* \u00XX for one character */
    }
    return length;
}

/* Writes s as control_json measured it (after control_json accepted s). */
static char *put_control(char *at, PyObject *s) {
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)PyUnicode_DATA(s);
    Py_ssize_t i, n = PyUnicode_GET_LENGTH(s);
    *at++ = '"';
    for (i = 0; i < n; i++) {  /* a run written as it is, then the control character that ends it */
        Py_ssize_t run = written_run(p + i, n - i);
        memcpy(at, p + i, run);
        at += run;
        i += run;
        if (i == n)
            break;
        memcpy(at, "\\u00", 4);
        at[4] = hex[p[i] >> 4];
        at[5] = hex[p[i] & 0xF];
        at += 6;
    }
    *at++ = '"';
    return at;
}

/* ---- the producer's usual send (rocketpy.client.autobatch.plain_entry_size) -------------------- */

/* Names, interned on first use (this part needs nothing of the module's init). */
enum { PN_TOPIC, PN_BODY, PN_PROPERTIES, PN_DELAY, PN_WAIT, PN_MSG_TYPE, PN_TRAN, PN_UNIQ, PN_RETRY, PN_FALSE,
       PN_TRUE, PN_COUNT };
static const char *const PLAIN_NAMES[PN_COUNT] = {"topic", "body", "properties", "DELAY", "WAIT", "MSG_TYPE",
                                                  "TRAN_MSG", "UNIQ_KEY", "%RETRY%", "false", "true"};
static PyObject *plain_names[PN_COUNT];

static int plain_names_ready(void) {
    int i;
    if (plain_names[PN_COUNT - 1] != NULL)
        return 0;
    for (i = 0; i < PN_COUNT; i++) {
        if (plain_names[i] == NULL && (plain_names[i] = PyUnicode_InternFromString(PLAIN_NAMES[i])) == NULL)
            return -1;
    }
    return 0;
}

/* 1 when props[name] is the str equal to text, 0 when not (or absent), -1 on error. */
static int property_is(PyObject *props, PyObject *name, PyObject *text) {
    PyObject *value = PyDict_GetItemWithError(props, name);
    if (value == NULL)
        return PyErr_Occurred() ? -1 : 0;
    return PyUnicode_CheckExact(value) && PyUnicode_Compare(value, text) == 0;
}

/* Batch entry overhead (rocketpy.client.autobatch.BATCH_ENTRY_OVERHEAD) and a missing UNIQ_KEY's
 * share of the properties string (UNIQ_KEY_ENTRY). */
#define PLAIN_ENTRY_OVERHEAD 22
#define PLAIN_UNIQ_ENTRY (8 + 1 + 32)

/* plain_entry_size's answer for a message's topic, body and properties: its entry size, -1 when it is not
 * plain, -2 on error (an exception set). */
static Py_ssize_t plain_size(PyObject *topic, PyObject *body, PyObject *props, PyObject *valid_topics,
                             Py_ssize_t max_size, Py_ssize_t compress_over, Py_ssize_t max_bytes) {
    PyObject *key, *value;
    Py_ssize_t n, pos = 0, chars = 0, count = 0;
    int found;
    if (!PyUnicode_CheckExact(topic) || !PyBytes_CheckExact(body) || !PyDict_CheckExact(props))
        return -1;
    n = PyBytes_GET_SIZE(body);
    if (n == 0 || n > max_size || n >= compress_over || n + PLAIN_ENTRY_OVERHEAD >= max_bytes)
        return -1;
    found = PySequence_Contains(valid_topics, topic);
    if (found <= 0)
        return found < 0 ? -2 : -1;
    found = (int)PyUnicode_Tailmatch(topic, plain_names[PN_RETRY], 0, PY_SSIZE_T_MAX, -1);
    if (found != 0)
        return found < 0 ? -2 : -1;
    while (PyDict_Next(props, &pos, &key, &value)) {
        if (!PyUnicode_CheckExact(key) || !PyUnicode_CheckExact(value))
            return -1;
        chars += PyUnicode_GET_LENGTH(key) + PyUnicode_GET_LENGTH(value) + 2;
        count++;
    }
    if ((found = PyDict_Contains(props, plain_names[PN_DELAY])) != 0 ||
        (found = property_is(props, plain_names[PN_WAIT], plain_names[PN_FALSE])) != 0 ||
        (found = PyDict_Contains(props, plain_names[PN_MSG_TYPE])) != 0 ||
        (found = property_is(props, plain_names[PN_TRAN], plain_names[PN_TRUE])) != 0)
        return found < 0 ? -2 : -1;
    if ((found = PyDict_Contains(props, plain_names[PN_UNIQ])) < 0)
        return -2;
    if (count > 0)
        chars -= 1;  /* no trailing separator */
    if (!found)
        chars += count > 0 ? PLAIN_UNIQ_ENTRY + 1 : PLAIN_UNIQ_ENTRY;
    return PLAIN_ENTRY_OVERHEAD + n + chars;
}

/* plain_entry_size(msg, valid_topics, max_message_size, compress_over, max_bytes) -> int: the Python
 * reference's answer; -1 for anything unusual (properties not all exact str, a str subclass topic, ...),
 * which sends the message down the producer's general path: -1 is always a safe answer. */
static PyObject *plain_entry_size(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *topic = NULL, *body = NULL, *props = NULL;
    Py_ssize_t max_size, compress_over, max_bytes, result = -2;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "plain_entry_size takes 5 arguments");
        return NULL;
    }
    max_size = PyLong_AsSsize_t(args[2]);
    compress_over = PyLong_AsSsize_t(args[3]);
    max_bytes = PyLong_AsSsize_t(args[4]);
    if ((max_size == -1 || compress_over == -1 || max_bytes == -1) && PyErr_Occurred())
        return NULL;
    if (plain_names_ready() < 0)
        return NULL;
    if ((topic = PyObject_GetAttr(args[0], plain_names[PN_TOPIC])) != NULL &&
        (body = PyObject_GetAttr(args[0], plain_names[PN_BODY])) != NULL &&
        (props = PyObject_GetAttr(args[0], plain_names[PN_PROPERTIES])) != NULL)
        result = plain_size(topic, body, props, args[1], max_size, compress_over, max_bytes);
    Py_XDECREF(topic);
    Py_XDECREF(body);
    Py_XDECREF(props);
    return result == -2 ? NULL : PyLong_FromSsize_t(result);
}

#define CLIENT_METHODS                                                                               \
    {"plain_entry_size", (PyCFunction)(void (*)(void))plain_entry_size, METH_FASTCALL,               \
     "C rocketpy.client.autobatch.plain_entry_size."},
