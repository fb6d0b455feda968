/* rocketpy._speedups, the broker's remoting path (doc/benchmarks.md, "Ninth pass"): included
 * once, at the end of _speedups.c, whose helpers (command_from_map, json_frame, I32_OK) it uses.
 *
 * read_frames   the frames of one read, split and decoded: RemotingProtocol.dataReceived's loop
 *               for the plain case (JSON header that orjson reads and command_from_map accepts);
 *               it stops at anything else, which the Python loop then handles frame by frame.
 * new_command   a RemotingCommand with its slots filled (what its dataclass __init__ does).
 * put_responses SendMessageProcessor._put_responses for stored puts; the others (refusals, which
 *               log) go to the processor's own _put_response.
 * response_frames  RemotingNode._reply_run's replies of a run, as frames, when every request is a
 *               plain JSON request answered by a plain command; None for anything else.
 *
 * Same rules as the rest of the module: the Python code is the reference, the C code takes only
 * the well-formed common case and hands anything else back unchanged.
 */

#define RC_FIELDS 9  /* RemotingCommand's fields, in declaration order */
enum { RC_CODE, RC_LANGUAGE, RC_VERSION, RC_OPAQUE, RC_FLAG, RC_REMARK, RC_EXT, RC_BODY, RC_SERIALIZE };
static const char *const RC_NAMES[RC_FIELDS] = {"code", "language", "version", "opaque", "flag", "remark",
                                                "ext_fields", "body", "serialize_type"};
static Py_ssize_t rc_offsets[RC_FIELDS];
static int rc_slots;  /* 1 when RemotingCommand is the slotted dataclass expected */
static PyObject *orjson_loads, *serialize_json, *one, *empty_bytes;
#define RESPONSE_FLAG_BIT 1
#define ONEWAY_FLAG_BIT 2

/* The slot offsets of a slotted class's fields (names interned) into out: 1 when every field
 * is a plain writable object slot and instances have no __dict__, else 0 (then callers call the
 * class instead of filling its slots). MessageExt's find_slots and RemotingCommand's use it. */
static int member_offsets(PyObject *cls, PyObject *const *names, int n, Py_ssize_t *out) {
    int i;
    if (cls == NULL || !PyType_Check(cls) || ((PyTypeObject *)cls)->tp_dictoffset != 0)
        return 0;
    for (i = 0; i < n; i++) {
        PyObject *d = PyObject_GetAttr(cls, names[i]);  /* the class's descriptor */
        PyMemberDef *m;
        if (d == NULL) {
            PyErr_Clear();
            return 0;
        }
        m = Py_IS_TYPE(d, &PyMemberDescr_Type) ? ((PyMemberDescrObject *)d)->d_member : NULL;
        Py_DECREF(d);  /* the class keeps it alive */
        if (m == NULL || m->type != T_OBJECT_EX || (m->flags & READONLY))
            return 0;
        out[i] = m->offset;
    }
    return 1;
}

static PyObject *rc_names[RC_FIELDS];

/* RemotingCommand's slot offsets; any surprise leaves rc_slots at 0 (the class is called). */
static void find_command_slots(void) {
    int i;
    rc_slots = 0;
    for (i = 0; i < RC_FIELDS; i++)
        if (rc_names[i] == NULL && (rc_names[i] = PyUnicode_InternFromString(RC_NAMES[i])) == NULL) {
            PyErr_Clear();
            return;
        }
    if (RemotingCommand != NULL && !PyObject_HasAttrString(RemotingCommand, "__post_init__"))
        rc_slots = member_offsets(RemotingCommand, rc_names, RC_FIELDS, rc_offsets);
}

/* A RemotingCommand of its nine fields (borrowed references, none NULL). */
static PyObject *new_command(PyObject *const *fields) {
    PyObject *cmd;
    int i;
    if (RemotingCommand == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "rocketpy._speedups.set_command_type() was not called");
        return NULL;
    }
    if (!rc_slots)
        return PyObject_Vectorcall(RemotingCommand, fields, RC_FIELDS, NULL);
    cmd = ((PyTypeObject *)RemotingCommand)->tp_alloc((PyTypeObject *)RemotingCommand, 0);
    if (cmd != NULL)
        for (i = 0; i < RC_FIELDS; i++)
            *(PyObject **)((char *)cmd + rc_offsets[i]) = Py_NewRef(fields[i]);
    return cmd;
}

static inline PyObject *rc_get(PyObject *cmd, int i) {  /* borrowed; NULL when unset */
    return *(PyObject **)((char *)cmd + rc_offsets[i]);
}

static inline void rc_set(PyObject *cmd, int i, PyObject *value) {  /* takes a new reference */
    Py_XSETREF(*(PyObject **)((char *)cmd + rc_offsets[i]), value);
}

static PyObject *str_msg_id, *str_queue_id, *str_queue_offset, *str_comma, *response_version;
static PyObject *str_queue_id_attr, *str_batch_attr, *str_read_nums, *str_write_nums, *str_perm_attr;
static PyObject *str_status, *str_append, *str_msg_ids, *str_queue_offset_attr;  /* a put's result */

/* set_remoting(orjson.loads, SerializeType.JSON, ROCKETPY_VERSION): remoting/codec.py calls it
 * at import. */
static PyObject *set_remoting(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyLong_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "set_remoting(loads, json_type, version)");
        return NULL;
    }
    if (str_msg_id == NULL) {
        str_msg_id = PyUnicode_InternFromString("msgId");
        str_queue_id = PyUnicode_InternFromString("queueId");
        str_queue_offset = PyUnicode_InternFromString("queueOffset");
        str_comma = PyUnicode_InternFromString(",");
        one = PyLong_FromLong(1);
        empty_bytes = PyBytes_FromStringAndSize(NULL, 0);
        str_queue_id_attr = PyUnicode_InternFromString("queue_id");
        str_batch_attr = PyUnicode_InternFromString("batch");
        str_read_nums = PyUnicode_InternFromString("read_queue_nums");
        str_write_nums = PyUnicode_InternFromString("write_queue_nums");
        str_perm_attr = PyUnicode_InternFromString("perm");
        str_status = PyUnicode_InternFromString("status");
        str_append = PyUnicode_InternFromString("append");
        str_msg_ids = PyUnicode_InternFromString("msg_ids");
        str_queue_offset_attr = PyUnicode_InternFromString("queue_offset");
        if (!str_msg_id || !str_queue_id || !str_queue_offset || !str_comma || !one || !empty_bytes ||
            !str_queue_id_attr || !str_batch_attr || !str_read_nums || !str_write_nums || !str_perm_attr ||
            !str_status ||
            !str_append || !str_msg_ids || !str_queue_offset_attr)
            return NULL;
    }
    Py_XSETREF(orjson_loads, Py_NewRef(args[0]));
    Py_XSETREF(serialize_json, Py_NewRef(args[1]));
    Py_XSETREF(response_version, Py_NewRef(args[2]));
    find_command_slots();
    Py_RETURN_NONE;
}

/* ---- JSON request headers, parsed straight to the command -------------------------------- */

/* The headers clients send: one object of the keys below, integers without fraction or
 * exponent, strings (escapes included), extFields an object of strings. Anything else (other
 * keys, duplicates, floats, raw control characters, lone surrogates, bad UTF-8, trailing data)
 * makes json_command answer NULL without an exception: orjson and command_from_map, then the
 * Python code, decide, so results and errors stay the reference's. */
typedef struct {
    const unsigned char *p, *end;
} Cursor;

enum { K_CODE, K_VERSION, K_OPAQUE, K_FLAG, K_LANGUAGE, K_REMARK, K_EXT, K_RPC, K_KEYS };
static const char *const K_NAMES[K_KEYS] = {"code", "version", "opaque", "flag", "language", "remark", "extFields",
                                            "serializeTypeCurrentRPC"};
#define STRING_STACK 512

static inline void skip_ws(Cursor *c) {
    while (c->p < c->end && *c->p <= ' ' && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static int hex4(const unsigned char *p, unsigned *out) {
    unsigned v = 0;
    int i;
    for (i = 0; i < 4; i++) {
        unsigned char h = p[i];
        v <<= 4;
        if (h >= '0' && h <= '9')
            v |= h - '0';
        else if ((h | 32) >= 'a' && (h | 32) <= 'f')
            v |= (h | 32) - 'a' + 10;
        else
            return 0;
    }
    *out = v;
    return 1;
}

/* A header's names and short values repeat request after request (a client's one-letter extFields
 * keys, its group, topic, queue ids, flags, "JAVA"): one str each from a cache instead of one per
 * request to allocate, hash (as a dict key: the topic's lookups too) and free. One-letter texts
 * have a slot each; numbers of more than 6 digits (timestamps, offsets) change every time and are
 * not cached, so that they do not evict the others. */
#define FIELD_CACHE 256
#define FIELD_CACHED_MAX 48
static PyObject *letter_cache[128], *field_cache[FIELD_CACHE];

static PyObject *field_text(const char *s, Py_ssize_t n) {
    const unsigned char *u = (const unsigned char *)s;
    PyObject **slot, *text;
    if (n == 1 && u[0] < 128)
        slot = &letter_cache[u[0]];
    else if (n < 2 || n > FIELD_CACHED_MAX || (n > 6 && u[0] >= '0' && u[0] <= '9'))
        return ascii_str(s, n);
    else
        slot = &field_cache[(unsigned)(n * 131 + u[0] * 31 + u[n / 2] * 17 + u[n - 1] * 7) % FIELD_CACHE];
    text = *slot;
    if (text != NULL && PyUnicode_GET_LENGTH(text) == n && memcmp(PyUnicode_DATA(text), s, n) == 0)
        return Py_NewRef(text);
    text = ascii_str(s, n);
    if (text != NULL)
        Py_XSETREF(*slot, Py_NewRef(text));
    return text;
}

/* How many of the characters from q on (up to end) are plain in a JSON string: not a quote, a
 * backslash, a control character (below 0x20) or non-ASCII. Eight at a time by the "has a zero
 * byte" and "has a byte less than" word tricks, whose lowest flagged byte is always a true one. */
static inline Py_ssize_t plain_run(const unsigned char *q, const unsigned char *end) {
    const unsigned char *p = q;
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const uint64_t ones = 0x0101010101010101ULL, high = 0x8080808080808080ULL;
    while (end - p >= 8) {
        uint64_t w, quote, slash, flagged;
        memcpy(&w, p, 8);
        quote = w ^ (ones * '"');
        slash = w ^ (ones * '\\');
        flagged = (((quote - ones) & ~quote) | ((slash - ones) & ~slash) | ((w - ones * 0x20) & ~w) | w) & high;
        if (flagged)
            return p - q + (__builtin_ctzll(flagged) >> 3);
        p += 8;
    }
#endif
    while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\')
        p++;
    return p - q;
}

/* The JSON string at c->p (its opening quote); ASCII ones without escapes through field_text. NULL without
 * an exception when it is not plain (see above), with one when memory ran out. */
static PyObject *json_string(Cursor *c) {
    const unsigned char *s = c->p + 1, *q = s;
    unsigned char stack[STRING_STACK], *buf, *at;
    int ascii = 1, escapes = 0;
    PyObject *r;
    if (c->p >= c->end || *c->p != '"')
        return NULL;
    for (;;) {
        q += plain_run(q, c->end);
        if (q >= c->end || *q == '"')
            break;
        if (*q < 0x20)
            return NULL;  /* orjson refuses raw control characters: the lenient path decides */
        if (*q == '\\') {
            escapes = 1;
            q++;
            if (q >= c->end)
                return NULL;
        } else if (*q >= 0x80) {
            ascii = 0;
        }
        q++;
    }
    if (q >= c->end)
        return NULL;
    c->p = q + 1;
    if (!escapes) {
        if (ascii)
            return field_text((const char *)s, q - s);
        r = PyUnicode_DecodeUTF8((const char *)s, q - s, NULL);
        if (r == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
            PyErr_Clear();
        return r;
    }
    buf = q - s <= STRING_STACK ? stack : PyMem_Malloc(q - s);  /* unescaped, it is never longer */
    if (buf == NULL)
        return PyErr_NoMemory();
    for (at = buf; s < q; s++) {
        unsigned cp;
        if (*s != '\\') {
            *at++ = *s;
            continue;
        }
        switch (*++s) {
        case '"': case '\\': case '/': *at++ = *s; break;
        case 'b': *at++ = 8; break;
        case 'f': *at++ = 12; break;
        case 'n': *at++ = 10; break;
        case 'r': *at++ = 13; break;
        case 't': *at++ = 9; break;
        case 'u':
            if (q - s < 5 || !hex4(s + 1, &cp) || (cp >= 0xD800 && cp <= 0xDFFF))
                goto bail;  /* surrogates (pairs too) are left to orjson */
            s += 4;
            if (cp < 0x80) {
                *at++ = (unsigned char)cp;
            } else if (cp < 0x800) {
                *at++ = 0xC0 | cp >> 6;
                *at++ = 0x80 | (cp & 0x3F);
            } else {
                *at++ = 0xE0 | cp >> 12;
                *at++ = 0x80 | (cp >> 6 & 0x3F);
                *at++ = 0x80 | (cp & 0x3F);
            }
            break;
        default:
            goto bail;
        }
    }
    r = PyUnicode_DecodeUTF8((const char *)buf, at - buf, NULL);
    if (r == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
        PyErr_Clear();
    if (buf != stack)
        PyMem_Free(buf);
    return r;
bail:
    if (buf != stack)
        PyMem_Free(buf);
    return NULL;
}

/* An integer without fraction or exponent, at most 18 digits, into *out; 0 for anything else. */
static int json_int(Cursor *c, int64_t *out) {
    const unsigned char *p = c->p;
    int64_t x = 0;
    int neg = 0, digits = 0;
    if (p < c->end && *p == '-') {
        neg = 1;
        p++;
    }
    if (p >= c->end || *p < '0' || *p > '9' || (*p == '0' && p + 1 < c->end && p[1] >= '0' && p[1] <= '9'))
        return 0;
    for (; p < c->end && *p >= '0' && *p <= '9'; p++) {
        if (++digits > 18)
            return 0;
        x = x * 10 + (*p - '0');
    }
    if (p < c->end && (*p == '.' || *p == 'e' || *p == 'E'))
        return 0;
    *out = neg ? -x : x;
    c->p = p;
    return 1;
}

static int json_null(Cursor *c) {
    if (c->end - c->p >= 4 && memcmp(c->p, "null", 4) == 0) {
        c->p += 4;
        return 1;
    }
    return 0;
}

/* A dict with room for 16 items without a resize (extFields: ~11 in a send). */
static PyObject *new_fields(void) {
#if PY_VERSION_HEX < 0x030D0000
    return _PyDict_NewPresized(16);
#else
    return PyDict_New();
#endif
}

/* extFields: an object of strings into a new dict; NULL (no exception) when not plain. */
static PyObject *json_fields(Cursor *c) {
    PyObject *fields = new_fields(), *k = NULL, *v = NULL;
    if (fields == NULL)
        return NULL;
    c->p++;  /* '{' */
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        return fields;
    }
    for (;;) {
        int r;
        if ((k = json_string(c)) == NULL)
            goto fail;
        skip_ws(c);
        if (c->p >= c->end || *c->p++ != ':')
            goto fail;
        skip_ws(c);
        if ((v = json_string(c)) == NULL)
            goto fail;
        r = PyDict_SetItem(fields, k, v);  /* a repeated key keeps its place, as in orjson's dict */
        Py_CLEAR(k);
        Py_CLEAR(v);
        if (r < 0)
            goto fail;
        skip_ws(c);
        if (c->p >= c->end)
            goto fail;
        if (*c->p == '}') {
            c->p++;
            return fields;
        }
        if (*c->p++ != ',')
            goto fail;
        skip_ws(c);
    }
fail:
    Py_XDECREF(k);
    Py_XDECREF(v);
    Py_DECREF(fields);
    return NULL;
}

/* Which of K_NAMES key[0:n] is (K_KEYS for none): by its length and first letter, then memcmp. */
static int header_key(const unsigned char *key, Py_ssize_t n) {
    int k;
    switch (n) {
    case 4: k = key[0] == 'c' ? K_CODE : K_FLAG; break;
    case 6: k = key[0] == 'o' ? K_OPAQUE : K_REMARK; break;
    case 7: k = K_VERSION; break;
    case 8: k = K_LANGUAGE; break;
    case 9: k = K_EXT; break;
    case 23: k = K_RPC; break;
    default: return K_KEYS;
    }
    return memcmp(K_NAMES[k], key, n) == 0 ? k : K_KEYS;
}

/* The command of a plain JSON header s[0:n] and its body; NULL without an exception when the
 * header is not plain (see above), with one on memory errors. */
static PyObject *json_command(const unsigned char *s, Py_ssize_t n, PyObject *body) {
    Cursor c = {s, s + n};
    PyObject *text[K_KEYS] = {NULL}, *f[RC_FIELDS], *result = NULL;
    int64_t num[4] = {0, 0, 0, 0};
    unsigned seen = 0;
    int i;
    skip_ws(&c);
    if (c.p >= c.end || *c.p++ != '{')
        return NULL;
    skip_ws(&c);
    for (;;) {
        const unsigned char *key;
        Py_ssize_t key_len;
        int k;
        if (c.p >= c.end || *c.p != '"')
            goto done;
        key = ++c.p;
        c.p += plain_run(c.p, c.end);  /* a control or non-ASCII character stops it too: orjson decides */
        if (c.p >= c.end || *c.p != '"')
            goto done;
        key_len = c.p++ - key;
        k = header_key(key, key_len);
        if (k == K_KEYS || (seen & 1u << k))
            goto done;  /* another key, or a repeated one: orjson decides */
        seen |= 1u << k;
        skip_ws(&c);
        if (c.p >= c.end || *c.p++ != ':')
            goto done;
        skip_ws(&c);
        if (k <= K_FLAG) {
            if (!json_int(&c, &num[k]))
                goto done;
        } else if (k == K_EXT) {
            if (json_null(&c))
                seen &= ~(1u << K_EXT);  /* null: no fields */
            else if (c.p >= c.end || *c.p != '{' || (text[K_EXT] = json_fields(&c)) == NULL)
                goto done;
        } else if (k == K_REMARK && json_null(&c)) {
            seen &= ~(1u << K_REMARK);
        } else if ((text[k] = json_string(&c)) == NULL) {
            goto done;
        }
        skip_ws(&c);
        if (c.p >= c.end)
            goto done;
        if (*c.p == '}') {
            c.p++;
            break;
        }
        if (*c.p++ != ',')
            goto done;
        skip_ws(&c);
    }
    skip_ws(&c);
    if (c.p != c.end || !(seen & 1u << K_CODE) || num[K_OPAQUE] < INT32_MIN || num[K_OPAQUE] > INT32_MAX)
        goto done;
    if (text[K_EXT] == NULL && (text[K_EXT] = PyDict_New()) == NULL)
        goto done;
    for (i = 0; i < 4; i++)
        text[i] = PyLong_FromLongLong(num[i]);
    f[RC_CODE] = text[K_CODE];
    f[RC_LANGUAGE] = text[K_LANGUAGE] != NULL ? text[K_LANGUAGE] : str_java;
    f[RC_VERSION] = text[K_VERSION];
    f[RC_OPAQUE] = text[K_OPAQUE];
    f[RC_FLAG] = text[K_FLAG];
    f[RC_REMARK] = text[K_REMARK] != NULL ? text[K_REMARK] : Py_None;
    f[RC_EXT] = text[K_EXT];
    f[RC_BODY] = body;
    f[RC_SERIALIZE] = serialize_json;
    if (f[RC_CODE] && f[RC_VERSION] && f[RC_OPAQUE] && f[RC_FLAG])
        result = new_command(f);
done:
    for (i = 0; i < K_KEYS; i++)
        Py_XDECREF(text[i]);
    return result;
}

/* One plain frame (no length prefix) at buf[start:end] as a command; NULL without an exception
 * when it is not the plain case or anything failed: the Python decoder then decodes it again and
 * answers, errors included. */
static PyObject *plain_frame(const char *buf, Py_ssize_t start, Py_ssize_t end) {
    uint32_t info;
    Py_ssize_t header_end;
    PyObject *raw, *header, *args[3], *cmd;
    if (end - start < 4)
        return NULL;
    info = (uint32_t)get_i32((const unsigned char *)buf + start);
    header_end = start + 4 + (Py_ssize_t)(info & 0xFFFFFF);
    if ((info >> 24) != 0 || header_end > end)
        return NULL;
    args[1] = PyBytes_FromStringAndSize(buf + header_end, end - header_end);
    if (args[1] == NULL)
        goto python;
    cmd = json_command((const unsigned char *)buf + start + 4, header_end - start - 4, args[1]);
    if (cmd != NULL || PyErr_Occurred()) {
        Py_DECREF(args[1]);
        if (cmd != NULL)
            return cmd;
        goto python;
    }
    raw = PyBytes_FromStringAndSize(buf + start + 4, header_end - start - 4);  /* the usual shapes, by orjson */
    if (raw == NULL) {
        Py_DECREF(args[1]);
        goto python;
    }
    header = PyObject_CallOneArg(orjson_loads, raw);
    Py_DECREF(raw);
    if (header == NULL) {  /* orjson refused it: the lenient Python path decides */
        Py_DECREF(args[1]);
        goto python;
    }
    args[0] = header;
    args[2] = serialize_json;
    cmd = command_from_map(NULL, args, 3);
    Py_DECREF(header);
    Py_DECREF(args[1]);
    if (cmd == Py_None) {
        Py_DECREF(cmd);
        return NULL;
    }
    if (cmd != NULL)
        return cmd;
python:
    PyErr_Clear();
    return NULL;
}

/* Whether a command's flag has the response bit, as Python's ``flag & 1`` (-1 on error). */
static int is_response(PyObject *cmd) {
    PyObject *flag = rc_slots && Py_IS_TYPE(cmd, (PyTypeObject *)RemotingCommand) ? Py_XNewRef(rc_get(cmd, RC_FLAG))
                                                                                 : PyObject_GetAttrString(cmd, "flag");
    PyObject *bit;
    int r;
    if (flag == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_AttributeError, "flag");
        return -1;
    }
    bit = PyNumber_And(flag, one);
    Py_DECREF(flag);
    if (bit == NULL)
        return -1;
    r = PyObject_IsTrue(bit);
    Py_DECREF(bit);
    return r;
}

/* read_frames(data, position, limit) -> ([command], position)
 * The whole plain frames of data from position on, decoded, up to (not including) the first
 * frame that is incomplete, longer than limit, or not plain; a response is included and ends
 * the list (its owner is resolved before the next frame is read, as in the Python loop). */
static PyObject *read_frames(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    const char *buf;
    Py_ssize_t size, position, limit;
    PyObject *out;
    if (nargs != 3 || orjson_loads == NULL) {
        PyErr_SetString(PyExc_TypeError, "read_frames(data, position, limit) after set_remoting()");
        return NULL;
    }
    position = PyLong_AsSsize_t(args[1]);
    limit = PyLong_AsSsize_t(args[2]);
    if ((position == -1 || limit == -1) && PyErr_Occurred())
        return NULL;
    out = PyList_New(0);
    if (out == NULL)
        return NULL;
    if (PyBytes_CheckExact(args[0]) && position >= 0 && limit >= 0) {
        buf = PyBytes_AS_STRING(args[0]);
        size = PyBytes_GET_SIZE(args[0]);
        while (size - position >= 4) {
            uint32_t length = (uint32_t)get_i32((const unsigned char *)buf + position);
            PyObject *cmd;
            int response;
            if ((uint64_t)length > (uint64_t)limit || (Py_ssize_t)length > size - position - 4)
                break;
            cmd = plain_frame(buf, position + 4, position + 4 + (Py_ssize_t)length);
            if (cmd == NULL)
                break;
            response = is_response(cmd);
            if (response < 0 || PyList_Append(out, cmd) < 0) {
                Py_DECREF(cmd);
                goto fail;
            }
            Py_DECREF(cmd);
            position += 4 + (Py_ssize_t)length;
            if (response)
                break;
        }
    }
    {
        PyObject *at = PyLong_FromSsize_t(position), *pair = at != NULL ? PyTuple_New(2) : NULL;
        if (pair == NULL) {
            Py_XDECREF(at);
            goto fail;
        }
        PyTuple_SET_ITEM(pair, 0, out);
        PyTuple_SET_ITEM(pair, 1, at);
        return pair;
    }
fail:
    Py_DECREF(out);
    return NULL;
}

/* ---- responses -------------------------------------------------------------------------- */

/* The response of one stored put, as SendMessageProcessor._put_response builds it; NULL without
 * an exception when it is not the plain case (a refusal, no append, unusual types). */
static PyObject *stored_response(PyObject *result, PyObject *request, PyObject *queue_id, PyObject *codes,
                                 PyObject *trace_fields) {
    PyObject *status = NULL, *append = NULL, *ids = NULL, *offset = NULL, *code, *msg_id = NULL;
    PyObject *queue_text = NULL, *offset_text = NULL, *fields = NULL, *response = NULL, *f[RC_FIELDS];
    if (!rc_slots || !Py_IS_TYPE(request, (PyTypeObject *)RemotingCommand) || !PyLong_CheckExact(queue_id) ||
        !PyDict_CheckExact(codes) || !PyDict_CheckExact(trace_fields) || response_version == NULL)
        return NULL;
    status = PyObject_GetAttr(result, str_status);
    if (status == NULL)
        goto python;
    code = PyDict_GetItemWithError(codes, status);  /* borrowed: a plain int for a stored status */
    if (code == NULL || !PyLong_CheckExact(code))
        goto python;
    append = PyObject_GetAttr(result, str_append);
    if (append == NULL || append == Py_None)
        goto python;
    ids = PyObject_GetAttr(append, str_msg_ids);
    offset = PyObject_GetAttr(append, str_queue_offset_attr);
    if (ids == NULL || offset == NULL || !PyList_CheckExact(ids) || PyList_GET_SIZE(ids) == 0 ||
        !PyLong_CheckExact(offset))
        goto python;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(ids); i++)
        if (!PyUnicode_CheckExact(PyList_GET_ITEM(ids, i)))
            goto python;
    msg_id = PyList_GET_SIZE(ids) == 1 ? Py_NewRef(PyList_GET_ITEM(ids, 0)) : PyUnicode_Join(str_comma, ids);
    queue_text = PyObject_Str(queue_id);
    offset_text = PyObject_Str(offset);
    fields = PyDict_Copy(trace_fields);  /* region and trace switch first, as in Python */
    if (msg_id == NULL || queue_text == NULL || offset_text == NULL || fields == NULL ||
        PyDict_SetItem(fields, str_msg_id, msg_id) < 0 || PyDict_SetItem(fields, str_queue_id, queue_text) < 0 ||
        PyDict_SetItem(fields, str_queue_offset, offset_text) < 0)
        goto python;
    f[RC_CODE] = code;
    f[RC_LANGUAGE] = str_java;
    f[RC_VERSION] = response_version;
    f[RC_OPAQUE] = rc_get(request, RC_OPAQUE);
    f[RC_FLAG] = one;
    f[RC_REMARK] = Py_None;
    f[RC_EXT] = fields;
    f[RC_BODY] = empty_bytes;
    f[RC_SERIALIZE] = rc_get(request, RC_SERIALIZE);
    if (f[RC_OPAQUE] == NULL || f[RC_SERIALIZE] == NULL)
        goto python;
    response = new_command(f);
python:
    if (response == NULL)
        PyErr_Clear();  /* the Python reference builds it, or raises what it raises */
    Py_XDECREF(status);
    Py_XDECREF(append);
    Py_XDECREF(ids);
    Py_XDECREF(offset);
    Py_XDECREF(msg_id);
    Py_XDECREF(queue_text);
    Py_XDECREF(offset_text);
    Py_XDECREF(fields);
    return response;
}

/* put_response(result, request, queue_id, codes, trace_fields) -> response or None
 * codes: {PutMessageStatus: int code} of the stored statuses whose response has no remark;
 * trace_fields: {MSG_REGION: region, TRACE_SWITCH: "true"/"false"}, copied first. */
static PyObject *put_response(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *response;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "put_response() takes 5 arguments");
        return NULL;
    }
    response = stored_response(args[0], args[1], args[2], args[3], args[4]);
    return response != NULL ? response : Py_NewRef(Py_None);
}

/* put_responses(results, stored, responses, reference, codes, trace_fields) -> None
 * responses[index] = the response of each (index, request, queue_id) of stored and its result:
 * stored_response, else reference(result, request, queue_id) (the processor's _put_response). */
static PyObject *put_responses(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *results, *stored, *responses;
    Py_ssize_t i, n;
    if (nargs != 6 || !PyList_CheckExact(args[0]) || !PyList_CheckExact(args[1]) || !PyList_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "put_responses(results, stored, responses, reference, codes, trace_fields)");
        return NULL;
    }
    results = args[0], stored = args[1], responses = args[2];
    n = PyList_GET_SIZE(results) < PyList_GET_SIZE(stored) ? PyList_GET_SIZE(results) : PyList_GET_SIZE(stored);
    for (i = 0; i < n; i++) {  /* zip(stored, results), as the Python loop */
        PyObject *entry = PyList_GET_ITEM(stored, i), *result = PyList_GET_ITEM(results, i), *response, *call[3];
        int r;
        if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 3) {
            PyErr_SetString(PyExc_TypeError, "put_responses: stored entries are (index, request, queue_id)");
            return NULL;
        }
        Py_INCREF(entry);  /* the reference below is Python code: keep both alive */
        Py_INCREF(result);
        response = stored_response(result, PyTuple_GET_ITEM(entry, 1), PyTuple_GET_ITEM(entry, 2), args[4], args[5]);
        if (response == NULL) {
            call[0] = result, call[1] = PyTuple_GET_ITEM(entry, 1), call[2] = PyTuple_GET_ITEM(entry, 2);
            response = PyObject_Vectorcall(args[3], call, 3, NULL);
        }
        r = response == NULL ? -1 : PyObject_SetItem(responses, PyTuple_GET_ITEM(entry, 0), response);
        Py_XDECREF(response);
        Py_DECREF(result);
        Py_DECREF(entry);
        if (r < 0)
            return NULL;
    }
    Py_RETURN_NONE;
}

/* Whether request is a RemotingCommand (slots known) with a JSON header, an opaque, and not
 * oneway: one whose answer the C encoder may frame. */
static int wants_json_answer(PyObject *request) {
    PyObject *v;
    int64_t x;
    if (!rc_slots || !Py_IS_TYPE(request, (PyTypeObject *)RemotingCommand))
        return 0;
    v = rc_get(request, RC_FLAG);
    if (v == NULL || !I64_OK(v, &x) || (x & ONEWAY_FLAG_BIT))
        return 0;
    v = rc_get(request, RC_SERIALIZE);
    return v != NULL && PyLong_Check(v) && I64_OK(v, &x) && x == 0 && rc_get(request, RC_OPAQUE) != NULL;
}

/* response_frames(run, results) -> [frame] or None
 * The frames RemotingNode._reply_run writes for a run when every request is a JSON request
 * that wants an answer and every result a RemotingCommand that json_frame encodes; each
 * response gets its request's opaque, the response flag and the serialize type first (as
 * _send_response does). None for anything else: the Python loop then answers the run. */
static PyObject *response_frames(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *run, *results, *out;
    Py_ssize_t i, n;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "response_frames(run, results)");
        return NULL;
    }
    run = args[0], results = args[1];
    if (!rc_slots || !PyList_CheckExact(run) || !PyList_CheckExact(results) ||
        PyList_GET_SIZE(run) != PyList_GET_SIZE(results))
        Py_RETURN_NONE;
    n = PyList_GET_SIZE(run);
    for (i = 0; i < n; i++) {  /* check every pair before changing any response */
        PyObject *request = PyList_GET_ITEM(run, i), *response = PyList_GET_ITEM(results, i), *v;
        int64_t x;
        if (!wants_json_answer(request) || !Py_IS_TYPE(response, (PyTypeObject *)RemotingCommand))
            Py_RETURN_NONE;
        v = rc_get(response, RC_FLAG);
        if (v == NULL || !PyLong_CheckExact(v) || !I64_OK(v, &x))
            Py_RETURN_NONE;
    }
    out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (i = 0; i < n; i++) {
        PyObject *request = PyList_GET_ITEM(run, i), *response = PyList_GET_ITEM(results, i), *flag, *frame;
        int64_t x = 0;
        I64_OK(rc_get(response, RC_FLAG), &x);
        flag = PyLong_FromLongLong(x | RESPONSE_FLAG_BIT);
        if (flag == NULL)
            goto fail;
        rc_set(response, RC_OPAQUE, Py_NewRef(rc_get(request, RC_OPAQUE)));
        rc_set(response, RC_FLAG, flag);
        rc_set(response, RC_SERIALIZE, Py_NewRef(rc_get(request, RC_SERIALIZE)));
        frame = json_frame(NULL, response);
        if (frame == NULL)
            goto fail;
        if (frame == Py_None) {  /* not plain: Python encodes the run (and repeats the three fields) */
            Py_DECREF(frame);
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        PyList_SET_ITEM(out, i, frame);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* ---- the send processor's single message (rocketpy.broker.send._single_message) ----------- */

enum { SM_TOPIC, SM_FLAG, SM_PROPERTIES, SM_SYS_FLAG, SM_BORN, SM_RECONSUME, SM_ATTRS };
enum { LH_GROUP, LH_TOPIC, LH_DEFAULT_TOPIC, LH_QUEUE_NUMS, LH_QUEUE_ID, LH_SYS_FLAG, LH_BORN, LH_FLAG, LH_PROPERTIES,
       LH_RECONSUME, LH_MAX_RECONSUME, LH_BATCH };  /* SendHeader's fields, in send_header's order */

/* The six values message_of reads, a[SM_*], from a send header's fields h[LH_*] (borrowed). */
static void message_attrs(PyObject *const *h, PyObject **a) {
    a[SM_TOPIC] = h[LH_TOPIC], a[SM_FLAG] = h[LH_FLAG], a[SM_PROPERTIES] = h[LH_PROPERTIES];
    a[SM_SYS_FLAG] = h[LH_SYS_FLAG], a[SM_BORN] = h[LH_BORN], a[SM_RECONSUME] = h[LH_RECONSUME];
}
static const char *const SM_NAMES[SM_ATTRS] = {"topic", "flag", "properties", "sys_flag", "born_timestamp",
                                               "reconsume_times"};
static PyObject *sm_names[SM_ATTRS], *str_tran_msg, *str_retry, *str_dlq;
#define COMPRESSED_FLAG 0x1  /* MessageSysFlag.COMPRESSED */
#define RETRY_PREFIX "%RETRY%"
#define TRANSACTION_MASK 0xC
#define TRANSACTION_PREPARED_TYPE 0x4

/* The interned names single_message reads (once); -1 with an exception on failure. */
static int single_message_names(void) {
    int i;
    if (str_retry != NULL)
        return 0;
    for (i = 0; i < SM_ATTRS; i++)
        if (sm_names[i] == NULL && (sm_names[i] = PyUnicode_InternFromString(SM_NAMES[i])) == NULL)
            return -1;
    if (str_tran_msg == NULL && (str_tran_msg = PyUnicode_InternFromString("TRAN_MSG")) == NULL)
        return -1;
    if (str_dlq == NULL && (str_dlq = PyUnicode_InternFromString("%DLQ%")) == NULL)
        return -1;
    return (str_retry = PyUnicode_InternFromString(RETRY_PREFIX)) == NULL ? -1 : 0;
}

/* single_message's work on the header's six values a[SM_*] (borrowed): the MessageExt, None when
 * Python must decide, NULL with an exception. */
static PyObject *message_of(PyObject *const *a, PyObject *body, PyObject *queue_id, PyObject *born_host,
                            PyObject *store_host, PyObject *cluster, Py_ssize_t limit, Py_ssize_t max_body) {
    PyObject *f[N_FIELDS], *empty = NULL, *props = NULL, *result = NULL;
    int64_t sys_flag;
    int i, has;
    if (!PyBytes_CheckExact(body) || PyBytes_GET_SIZE(body) > max_body || !PyUnicode_CheckExact(cluster) ||
        MessageExt == NULL)
        Py_RETURN_NONE;
    if (!PyUnicode_CheckExact(a[SM_TOPIC]) || !PyUnicode_CheckExact(a[SM_PROPERTIES]) ||
        !PyUnicode_IS_ASCII(a[SM_PROPERTIES]) || PyUnicode_GET_LENGTH(a[SM_PROPERTIES]) > limit ||
        PyUnicode_Tailmatch(a[SM_TOPIC], str_retry, 0, PY_SSIZE_T_MAX, -1) != 0)  /* an error too */
        goto python;
    if (!I64_OK(a[SM_SYS_FLAG], &sys_flag) || (sys_flag & TRANSACTION_MASK) == TRANSACTION_PREPARED_TYPE)
        goto python;
    empty = PyDict_New();
    if (empty == NULL)
        goto done;
    props = stored_properties((const char *)PyUnicode_DATA(a[SM_PROPERTIES]), PyUnicode_GET_LENGTH(a[SM_PROPERTIES]),
                              empty, cluster);
    if (props == NULL)
        goto done;
    has = PyDict_Contains(props, str_tran_msg);
    if (has != 0) {
        if (has > 0)
            goto python;
        goto done;
    }
    f[0] = Py_NewRef(a[SM_TOPIC]);
    f[1] = Py_NewRef(body);
    f[2] = Py_NewRef(a[SM_FLAG]);
    f[3] = props;
    props = NULL;
    f[4] = Py_NewRef(queue_id);
    f[5] = Py_NewRef(a[SM_SYS_FLAG]);
    f[6] = Py_NewRef(a[SM_BORN]);
    f[7] = Py_NewRef(born_host);
    f[8] = PyLong_FromLong(0);
    f[9] = Py_NewRef(store_host);
    f[10] = Py_NewRef(a[SM_RECONSUME]);
    for (i = 11; i < N_FIELDS; i++)
        f[i] = PyLong_FromLong(0);
    result = new_message(f);
    goto done;
python:
    PyErr_Clear();  /* the Tailmatch error, if any: Python raises it again */
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(empty);
    Py_XDECREF(props);
    return result;
}

/* single_message(header, body, queue_id, born_host, store_host, cluster, limit, max_body)
 *   -> MessageExt or None
 * SendMessageProcessor._single_message (and half_message, which passes it) for the common case:
 * a body of at most max_body bytes, a topic that is not a retry topic, ASCII properties of at
 * most limit characters (no size check needed) without TRAN_MSG, a sysFlag that is not PREPARED.
 * None for anything else: the Python code answers, errors included. */
static PyObject *single_message(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *a[SM_ATTRS] = {NULL}, *result = NULL;
    Py_ssize_t limit, max_body;
    int i;
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "single_message() takes 8 arguments");
        return NULL;
    }
    limit = PyLong_AsSsize_t(args[6]);
    max_body = PyLong_AsSsize_t(args[7]);
    if ((limit == -1 || max_body == -1) && PyErr_Occurred())
        return NULL;
    if (single_message_names() < 0)
        return NULL;
    for (i = 0; i < SM_ATTRS; i++)
        if ((a[i] = PyObject_GetAttr(args[0], sm_names[i])) == NULL) {
            PyErr_Clear();
            result = Py_NewRef(Py_None);
            goto done;
        }
    result = message_of(a, args[1], args[2], args[3], args[4], args[5], limit, max_body);
done:
    for (i = 0; i < SM_ATTRS; i++)
        Py_XDECREF(a[i]);
    return result;
}

/* ---- a run of send requests (rocketpy.broker.send.process_requests' loop) ------------------ */

#define PERM_WRITE 2  /* rocketpy.common.topic.PERM_WRITE */

/* An exact int attribute of obj within 32 bits into *out: 1; 0 when absent or not one (cleared). */
static int exact_int_attr(PyObject *obj, PyObject *name, int64_t *out) {
    PyObject *v = PyObject_GetAttr(obj, name);
    int ok = v != NULL && PyLong_CheckExact(v) && I32_OK(v, out);
    Py_XDECREF(v);
    if (!ok)
        PyErr_Clear();
    return ok;
}

/* The config SendMessageProcessor._check gives a send of topic to queue_id when its checks passed
 * before and pass again as they stand: its name checked valid earlier (problems[topic] is None), in
 * the topic table (table: topics.live_table()), writable, queue_id below its queue count. A new
 * reference, or NULL (no exception) when _check must decide: not checked yet, not in the table
 * (auto-creation), an error to answer. */
static PyObject *sendable_config(PyObject *table, PyObject *problems, PyObject *topic, int64_t queue_id) {
    PyObject *config;
    int64_t perm, read_nums, write_nums;
    if (!PyDict_CheckExact(table) || !PyDict_CheckExact(problems) ||
        PyDict_GetItemWithError(problems, topic) != Py_None)
        goto python;
    config = Py_XNewRef(PyDict_GetItemWithError(table, topic));
    if (config == NULL)
        goto python;
    if (exact_int_attr(config, str_perm_attr, &perm) && (perm & PERM_WRITE) &&
        exact_int_attr(config, str_read_nums, &read_nums) && exact_int_attr(config, str_write_nums, &write_nums) &&
        queue_id < (read_nums > write_nums ? read_nums : write_nums))
        return config;
    Py_DECREF(config);
python:
    PyErr_Clear();
    return NULL;
}

/* The messages of a batch request of a run, as _prepare's _batch_messages builds them when nothing
 * needs its checks' answers: a topic of at most TOPIC_MAX_LENGTH characters, not a retry or dead
 * letter topic, an uncompressed body within max_body, no properties in the header (rocketpy's
 * send_batch; they would be every entry's), and stored_batch takes the body. NULL (an exception
 * or not) for anything else: _prepare decides again. a: the header's values (message_attrs);
 * msg_args: born_host, store_host, cluster, limit, max_body, as for single_message. */
static PyObject *run_batch(PyObject *const *a, PyObject *body, int64_t queue_id, PyObject *const *msg_args) {
    PyObject *args[11], *msgs;
    Py_ssize_t max_body;
    int64_t sys_flag;
    max_body = PyLong_AsSsize_t(msg_args[4]);
    if (max_body == -1 || !PyBytes_CheckExact(body) || PyBytes_GET_SIZE(body) > max_body)
        return NULL;
    if (!PyUnicode_CheckExact(a[SM_TOPIC]) || PyUnicode_GET_LENGTH(a[SM_TOPIC]) > TOPIC_MAX_LENGTH ||
        PyUnicode_Tailmatch(a[SM_TOPIC], str_retry, 0, PY_SSIZE_T_MAX, -1) != 0 ||
        PyUnicode_Tailmatch(a[SM_TOPIC], str_dlq, 0, PY_SSIZE_T_MAX, -1) != 0 ||
        !PyUnicode_CheckExact(a[SM_PROPERTIES]) || PyUnicode_GET_LENGTH(a[SM_PROPERTIES]) != 0 ||
        !PyLong_CheckExact(a[SM_SYS_FLAG]) || !I32_OK(a[SM_SYS_FLAG], &sys_flag) || (sys_flag & COMPRESSED_FLAG))
        return NULL;
    args[0] = body, args[1] = a[SM_TOPIC], args[3] = msg_args[2], args[4] = msg_args[3];
    args[6] = a[SM_SYS_FLAG], args[7] = a[SM_BORN], args[8] = msg_args[0], args[9] = msg_args[1];
    args[10] = a[SM_RECONSUME];
    if ((args[2] = PyDict_New()) == NULL || (args[5] = PyLong_FromLongLong(queue_id)) == NULL) {
        Py_XDECREF(args[2]);
        return NULL;
    }
    msgs = stored_batch(NULL, args, 11);
    Py_DECREF(args[2]);
    Py_DECREF(args[5]);
    if (msgs == Py_None)
        Py_CLEAR(msgs);
    return msgs;
}

/* The message of one usual request of a run, as _prepare builds it: its header's fields parsed (as
 * send_header does), its topic already checked in this run (in checked), or earlier and still valid
 * (sendable_config, with table and problems: then added to checked, as _prepare does), its queue id
 * given and valid, and message_of (single_message's work) takes it; for a batch request (*batch set)
 * the list of run_batch. Sets *queue_id. NULL without an exception for anything else. */
static PyObject *run_message(PyObject *request, PyObject *checked, PyObject *table, PyObject *problems,
                             PyObject *const *msg_args, int64_t *queue_id, int *batch) {
    PyObject *ext, *body, *h[SH_FIELDS], *a[SM_ATTRS], *config = NULL, *v = NULL, *msg = NULL;
    Py_ssize_t limit, max_body;
    int64_t read_nums, write_nums;
    int i, filled = 0, slow = 0;
    if (!rc_slots || !Py_IS_TYPE(request, (PyTypeObject *)RemotingCommand) || (ext = rc_get(request, RC_EXT)) == NULL ||
        (body = rc_get(request, RC_BODY)) == NULL || !PyDict_CheckExact(ext))
        return NULL;
    for (; filled < SH_FIELDS; filled++)  /* send_header's parse, without the SendHeader */
        if ((h[filled] = sh_field(ext, filled, &slow)) == NULL)
            goto python;
    if (!PyUnicode_CheckExact(h[LH_TOPIC]) || !I32_OK(h[LH_QUEUE_ID], queue_id) || *queue_id < 0)
        goto python;
    *batch = h[LH_BATCH] == Py_True;
    config = Py_XNewRef(PyDict_GetItemWithError(checked, h[LH_TOPIC]));
    if (config == NULL) {  /* the run's first of its topic: valid as checked earlier, else _prepare checks it */
        if (PyErr_Occurred() || (config = sendable_config(table, problems, h[LH_TOPIC], *queue_id)) == NULL ||
            PyDict_SetItem(checked, h[LH_TOPIC], config) < 0)
            goto python;
    }
    if ((v = PyObject_GetAttr(config, str_read_nums)) == NULL || !I32_OK(v, &read_nums))
        goto python;
    Py_CLEAR(v);
    if ((v = PyObject_GetAttr(config, str_write_nums)) == NULL || !I32_OK(v, &write_nums))
        goto python;
    Py_CLEAR(v);
    if (*queue_id >= (read_nums > write_nums ? read_nums : write_nums))
        goto python;
    message_attrs(h, a);
    if (*batch) {
        msg = run_batch(a, body, *queue_id, msg_args);
        goto python;
    }
    limit = PyLong_AsSsize_t(msg_args[3]);
    max_body = PyLong_AsSsize_t(msg_args[4]);
    if ((limit == -1 || max_body == -1) && PyErr_Occurred())
        goto python;
    msg = message_of(a, body, h[LH_QUEUE_ID], msg_args[0], msg_args[1], msg_args[2], limit, max_body);
    if (msg == Py_None)
        Py_CLEAR(msg);
python:
    for (i = 0; i < filled; i++)
        Py_DECREF(h[i]);
    Py_XDECREF(config);
    Py_XDECREF(v);
    if (msg == NULL)
        PyErr_Clear();  /* _prepare decides again, and raises or answers what it must */
    return msg;
}

static PyObject *str_remote_address;

/* The born host of a message from channel once SendMessageProcessor._peer_host parsed its peer:
 * peers[channel.remote_address] for a non-empty str address; a new reference, or NULL (no exception)
 * when not there (then _peer_host parses it). */
static PyObject *cached_born_host(PyObject *channel, PyObject *peers) {
    PyObject *address, *host = NULL;
    if (str_remote_address == NULL && (str_remote_address = PyUnicode_InternFromString("remote_address")) == NULL)
        goto done;
    address = PyObject_GetAttr(channel, str_remote_address);
    if (address != NULL && PyUnicode_CheckExact(address) && PyUnicode_GET_LENGTH(address) > 0 &&
        PyDict_CheckExact(peers))
        host = Py_XNewRef(PyDict_GetItemWithError(peers, address));
    Py_XDECREF(address);
done:
    PyErr_Clear();
    return host;
}

/* The born host of channel's messages: cached_born_host, else peer_host(channel) (_peer_host); NULL
 * with an exception on failure. */
static PyObject *born_host_of(PyObject *channel, PyObject *peers, PyObject *peer_host) {
    PyObject *host = cached_born_host(channel, peers);
    return host != NULL ? host : PyObject_CallOneArg(peer_host, channel);
}

/* (msgs, queue id, batch) of a usual request, as _prepare gives them (run_message; msgs a list for a
 * batch, else a 1-tuple); NULL without an exception when _prepare must decide, NULL with one on failure. */
static PyObject *run_prepared(PyObject *request, PyObject *checked, PyObject *table, PyObject *problems,
                              PyObject *const *msg_args) {
    PyObject *msg, *msgs, *queue_obj, *prepared;
    int64_t queue_id = 0;
    int batch = 0;
    msg = run_message(request, checked, table, problems, msg_args, &queue_id, &batch);
    if (msg == NULL)
        return NULL;
    msgs = batch ? Py_NewRef(msg) : PyTuple_Pack(1, msg);
    queue_obj = PyLong_FromLongLong(queue_id);
    Py_DECREF(msg);
    prepared = msgs && queue_obj ? PyTuple_Pack(3, msgs, queue_obj, batch ? Py_True : Py_False) : NULL;
    Py_XDECREF(msgs);
    Py_XDECREF(queue_obj);
    return prepared;
}

/* send_prepared(request, channel, table, problems, peers, peer_host, store_host, cluster, limit, max_body)
 *   -> (msgs, queue id, batch) or None
 * SendMessageProcessor._prepare (the reference) for a usual request alone (process_request) whose topic
 * was checked earlier and is still valid (sendable_config); None, having done nothing, for anything else
 * (then _prepare decides). table, problems, peers, peer_host: as for send_run. */
static PyObject *send_prepared(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *checked, *prepared, *msg_args[5];
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "send_prepared(request, channel, table, problems, peers, peer_host, "
                                         "store_host, cluster, limit, max_body)");
        return NULL;
    }
    if (str_write_nums == NULL || single_message_names() < 0 || (checked = PyDict_New()) == NULL)
        return NULL;
    if ((msg_args[0] = born_host_of(args[1], args[4], args[5])) == NULL) {
        Py_DECREF(checked);
        return NULL;
    }
    memcpy(msg_args + 1, args + 6, 4 * sizeof(PyObject *));
    prepared = run_prepared(args[0], checked, args[2], args[3], msg_args);
    Py_DECREF(msg_args[0]);
    Py_DECREF(checked);
    if (prepared == NULL && !PyErr_Occurred())
        Py_RETURN_NONE;
    return prepared;
}

/* send_run(requests, channel, checked, peers, store_host, cluster, limit, max_body, prepare,
 *          puts, stored, responses, table, problems, peer_host) -> None
 * SendMessageProcessor.process_requests' loop: the usual requests in C (run_message), the others
 * through prepare(request, channel, born_host, checked) (its _prepare); puts, stored (response
 * index, request, queue id) and responses (the error response, or a placeholder) are appended to.
 * table, problems: the topic table (topics.live_table()) and the processor's checked names; peers,
 * peer_host: its parsed peers and _peer_host, which give the run's born host. */
static PyObject *send_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *requests, *checked, *puts, *stored, *responses, *msg_args[5], *born_host;
    Py_ssize_t i;
    if (nargs != 15 || !PyList_CheckExact(args[0]) || !PyDict_CheckExact(args[2]) || !PyList_CheckExact(args[9]) ||
        !PyList_CheckExact(args[10]) || !PyList_CheckExact(args[11])) {
        PyErr_SetString(PyExc_TypeError, "send_run(requests, channel, checked, peers, store_host, cluster, limit, "
                                         "max_body, prepare, puts, stored, responses, table, problems, peer_host)");
        return NULL;
    }
    if (str_write_nums == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "rocketpy._speedups.set_remoting() was not called");
        return NULL;
    }
    if (single_message_names() < 0)
        return NULL;
    requests = args[0], checked = args[2], puts = args[9], stored = args[10], responses = args[11];
    if ((born_host = born_host_of(args[1], args[3], args[14])) == NULL)  /* one peer for the whole run */
        return NULL;
    msg_args[0] = born_host, msg_args[1] = args[4], msg_args[2] = args[5], msg_args[3] = args[6], msg_args[4] = args[7];
    for (i = 0; i < PyList_GET_SIZE(requests); i++) {
        PyObject *request = PyList_GET_ITEM(requests, i), *prepared, *msgs = NULL, *queue_obj = NULL;
        PyObject *entry = NULL, *index = NULL;
        int r = -1;
        Py_INCREF(request);  /* prepare is Python code: the list may change under us */
        prepared = run_prepared(request, checked, args[12], args[13], msg_args);
        if (prepared == NULL && !PyErr_Occurred()) {
            PyObject *call[4] = {request, args[1], born_host, checked};
            prepared = PyObject_Vectorcall(args[8], call, 4, NULL);
        }
        if (prepared != NULL && PyTuple_CheckExact(prepared)) {  /* (msgs, queue id, batch), else a response */
            if (PyTuple_GET_SIZE(prepared) != 3) {
                PyErr_Format(PyExc_TypeError, "send_run: prepare gave %R", prepared);
                Py_CLEAR(prepared);
            } else {
                msgs = Py_NewRef(PyTuple_GET_ITEM(prepared, 0));
                queue_obj = Py_NewRef(PyTuple_GET_ITEM(prepared, 1));
            }
        }
        if (prepared != NULL) {
            if (msgs != NULL) {  /* to store: the response replaces the placeholder once stored */
                index = PyLong_FromSsize_t(PyList_GET_SIZE(responses));
                entry = index ? PyTuple_Pack(3, index, request, queue_obj) : NULL;
                r = entry == NULL || PyList_Append(puts, msgs) < 0 || PyList_Append(stored, entry) < 0 ? -1 : 0;
            } else {
                r = 0;
            }
            if (r == 0)
                r = PyList_Append(responses, prepared);
        }
        Py_XDECREF(prepared);
        Py_XDECREF(msgs);
        Py_XDECREF(queue_obj);
        Py_XDECREF(entry);
        Py_XDECREF(index);
        Py_DECREF(request);
        if (r < 0) {
            Py_DECREF(born_host);
            return NULL;
        }
    }
    Py_DECREF(born_host);
    Py_RETURN_NONE;
}

#define REMOTING_METHODS \
    {"set_remoting", (PyCFunction)(void (*)(void))set_remoting, METH_FASTCALL, \
     "Register orjson.loads, SerializeType.JSON and the responses' version (remoting/codec.py)."}, \
    {"read_frames", (PyCFunction)(void (*)(void))read_frames, METH_FASTCALL, \
     "The plain frames of a read from a position: ([command], position) (RemotingProtocol.dataReceived)."}, \
    {"put_response", (PyCFunction)(void (*)(void))put_response, METH_FASTCALL, \
     "The response of a stored put, or None (rocketpy.broker.send._put_response)."}, \
    {"put_responses", (PyCFunction)(void (*)(void))put_responses, METH_FASTCALL, \
     "The responses of a run's puts, the plain ones in C (rocketpy.broker.send._put_responses)."}, \
    {"response_frames", (PyCFunction)(void (*)(void))response_frames, METH_FASTCALL, \
     "The frames of a run's plain responses, or None (rocketpy.remoting.node._reply_run)."}, \
    {"single_message", (PyCFunction)(void (*)(void))single_message, METH_FASTCALL, \
     "The MessageExt of a usual single send, or None (rocketpy.broker.send._single_message)."}, \
    {"send_prepared", (PyCFunction)(void (*)(void))send_prepared, METH_FASTCALL, \
     "rocketpy.broker.send._prepare for a usual request whose topic was checked earlier, or None."}, \
    {"send_run", (PyCFunction)(void (*)(void))send_run, METH_FASTCALL, \
     "rocketpy.broker.send.process_requests' loop: the usual requests in C, the others through _prepare."},
