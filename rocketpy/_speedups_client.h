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
    for (i = 0; i < n; i++) {
        unsigned char c = p[i];
        if (c < 0x20) {
            if (c == '\b' || c == '\t' || c == '\n' || c == '\f' || c == '\r')
                return -1;
            length += 5;  /* \u00XX for one character */
        } else if (c == '"' || c == '\\' || c == 0x7F) {
            return -1;
        }
    }
    return length;
}

/* Writes s as control_json measured it (after control_json accepted s). */
static char *put_control(char *at, PyObject *s) {
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)PyUnicode_DATA(s);
    Py_ssize_t i, n = PyUnicode_GET_LENGTH(s);
    *at++ = '"';
    for (i = 0; i < n; i++) {
        unsigned char c = p[i];
        if (c < 0x20) {
            memcpy(at, "\\u00", 4);
            at[4] = hex[c >> 4];
            at[5] = hex[c & 0xF];
            at += 6;
        } else {
            *at++ = (char)c;
        }
    }
    *at++ = '"';
    return at;
}
