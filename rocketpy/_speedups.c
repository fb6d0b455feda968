/* rocketpy._speedups: optional C versions of the hot pure functions of rocketpy.common.message,
 * rocketpy.store.index and the broker's batch loop (doc/store.md, "Compiled accelerator").
 *
 * The Python functions are the reference. Each function here handles the common, well-formed
 * case and hands anything else (malformed bytes, unusual types, out-of-range numbers, IPv6
 * hosts) to the Python function it replaces, which message.py registers through setup(). So
 * results and exceptions are the Python ones by construction; this file only has to be fast on
 * good input and never read outside a buffer on bad input (every length is checked first).
 *
 * Reference counting: every function owns what it creates and releases it on every path; the
 * "fail:" labels drop partial results before returning NULL or falling back.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <string.h>
#include "_speedups_crc.h"  /* crc_fast: the body CRC by carry-less multiplication */

#define MAGIC_CODE (-626843481)      /* 0xDAA320A7, v1 record */
#define HOSTS_V6 0x30                /* BORNHOST_V6 | STOREHOST_V6 */
#define FIXED_V4 88                  /* bytes before the body with IPv4 hosts */
#define MAX_PROPERTIES_LENGTH 32767
#define TOPIC_MAX_LENGTH 127
#define N_FIELDS 16                  /* MessageExt's fields, in declaration order */

/* Registered by setup(): the Python references and the types they return. */
static PyObject *RecordError, *MessageExt;
static PyObject *py_decode_record, *py_decode_records, *py_encode_record, *py_encode_batch, *py_patch_record, *py_batch_entries;
static PyObject *py_string_to_properties, *py_properties_to_string, *py_java_hash, *py_tags_code;
static PyObject *zlib_crc32;

/* MessageExt's slot offsets (a slotted dataclass), so decoding fills them without running
 * __init__; 0 when the layout is not the expected one (then the class is called instead). */
static Py_ssize_t slot_offsets[N_FIELDS];
static int use_slots;
static const char *const FIELD_NAMES[N_FIELDS] = {
    "topic", "body", "flag", "properties", "queue_id", "sys_flag", "born_timestamp", "born_host",
    "store_timestamp", "store_host", "reconsume_times", "prepared_transaction_offset", "queue_offset",
    "commit_log_offset", "store_size", "body_crc"};
static PyObject *field_names[N_FIELDS];   /* interned */

/* ---- big-endian helpers ----------------------------------------------------------------- */

static inline int32_t get_i32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
}
static inline int64_t get_i64(const unsigned char *p) {
    return (int64_t)((uint64_t)(uint32_t)get_i32(p) << 32 | (uint32_t)get_i32(p + 4));
}
static inline int16_t get_i16(const unsigned char *p) { return (int16_t)(p[0] << 8 | p[1]); }
static inline void put_i32(unsigned char *p, int32_t v) {
    uint32_t u = (uint32_t)v;
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    u = __builtin_bswap32(u);  /* one store (a record has ~20 of these fields) */
    memcpy(p, &u, 4);
#else
    p[0] = u >> 24; p[1] = u >> 16; p[2] = u >> 8; p[3] = u;
#endif
}
static inline void put_i64(unsigned char *p, int64_t v) {
    put_i32(p, (int32_t)((uint64_t)v >> 32));
    put_i32(p + 4, (int32_t)(uint64_t)v);
}

/* An int in [lo, hi] into *out; 0 (no exception set) for anything else. */
static int as_int64(PyObject *o, int64_t lo, int64_t hi, int64_t *out) {
    int overflow;
    long long v;
    if (!PyLong_Check(o))
        return 0;
    v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    if (v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}
#define I32_OK(o, out) as_int64((o), INT32_MIN, INT32_MAX, (out))
#define I64_OK(o, out) as_int64((o), INT64_MIN, INT64_MAX, (out))

/* Call a Python reference with the original arguments (the slow and error paths). */
static PyObject *fallback(PyObject *func, PyObject *const *args, Py_ssize_t nargs) {
    if (func == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "rocketpy._speedups.setup() was not called");
        return NULL;
    }
    return PyObject_Vectorcall(func, args, nargs, NULL);
}

/* ---- properties ------------------------------------------------------------------------- */

/* An ASCII str of s[0:n]. */
static PyObject *ascii_str(const char *s, Py_ssize_t n) {
    PyObject *out = PyUnicode_New(n, 127);
    if (out != NULL)
        memcpy(PyUnicode_DATA(out), s, n);
    return out;
}

/* An ASCII str of s[0:n] (n ≥ 1) from a cache of 64 (the last one in each slot). */
#define TEXT_CACHE 64
static PyObject *cached_ascii(PyObject **cache, const char *s, Py_ssize_t n) {
    unsigned slot = (unsigned)(n * 31 + (unsigned char)s[0] * 7 + (unsigned char)s[n - 1]) % TEXT_CACHE;
    PyObject *text = cache[slot];
    if (text != NULL && PyUnicode_GET_LENGTH(text) == n && memcmp(PyUnicode_DATA(text), s, n) == 0)
        return Py_NewRef(text);
    text = ascii_str(s, n);
    if (text != NULL)
        Py_XSETREF(cache[slot], Py_NewRef(text));
    return text;
}

/* Property names repeat (TAGS, KEYS, UNIQ_KEY, ...): one str each, its hash computed once. */
static PyObject *name_cache[TEXT_CACHE];

static PyObject *property_name(const char *s, Py_ssize_t n) { return cached_ascii(name_cache, s, n); }

/* Short property values repeat too (a producer's TAGS, often its KEYS): one str each, not one
 * per message to allocate and free. */
#define VALUE_CACHED_MAX 16
static PyObject *value_cache[TEXT_CACHE];

static PyObject *property_value(const char *s, Py_ssize_t n) {
    return n > VALUE_CACHED_MAX ? ascii_str(s, n) : cached_ascii(value_cache, s, n);
}

/* result[name] = value, releasing both (either may be NULL after a failed allocation). */
static int set_property(PyObject *result, PyObject *name, PyObject *value) {
    int r = (name == NULL || value == NULL) ? -1 : PyDict_SetItem(result, name, value);
    Py_XDECREF(name);
    Py_XDECREF(value);
    return r;
}

/* A WAIT value that lower()s to "false" (an ASCII value: no other letters lower to these). */
static int is_false_text(const char *v, Py_ssize_t n) {
    static const char want[] = "false";
    Py_ssize_t i;
    if (n != 5)
        return 0;
    for (i = 0; i < 5; i++)
        if ((v[i] | 0x20) != want[i])
            return 0;
    return 1;
}

/* parse_properties over ASCII bytes s[0:n]; with wait_false, WAIT items are left out and
 * *wait_false says whether the last one was false (unchanged when there is none). */
static PyObject *parse_ascii_items(const char *s, Py_ssize_t n, int *wait_false) {
    const char *end = s + n;
    PyObject *result = PyDict_New();
    if (result == NULL)
        return NULL;
    while (s < end) {
        const char *item_end = memchr(s, 2, end - s), *sep;
        if (item_end == NULL)
            item_end = end;
        sep = memchr(s, 1, item_end - s);
        if (sep != NULL && sep > s && sep + 1 < item_end) {
            if (wait_false != NULL && sep - s == 4 && memcmp(s, "WAIT", 4) == 0)
                *wait_false = is_false_text(sep + 1, item_end - sep - 1);
            else if (set_property(result, property_name(s, sep - s), property_value(sep + 1, item_end - sep - 1)) < 0)
                goto fail;
        }
        s = item_end + 1;
    }
    return result;
fail:
    Py_DECREF(result);
    return NULL;
}

static PyObject *parse_ascii_properties(const char *s, Py_ssize_t n) { return parse_ascii_items(s, n, NULL); }

static int all_ascii(const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i;
    unsigned char any = 0;
    for (i = 0; i < n; i++)
        any |= s[i];
    return any < 128;
}

/* "k\x01v\x02k\x01v" → dict; items without a name or value are skipped (as in Python). */
static PyObject *parse_properties(PyObject *text) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), start = 0;
    PyObject *result;
    if (PyUnicode_IS_ASCII(text))
        return parse_ascii_properties((const char *)PyUnicode_DATA(text), n);
    result = PyDict_New();
    if (result == NULL)
        return NULL;
    while (start < n) {
        Py_ssize_t end = PyUnicode_FindChar(text, 2, start, n, 1), sep;
        if (end == -2)
            goto fail;
        if (end < 0)
            end = n;
        sep = PyUnicode_FindChar(text, 1, start, end, 1);
        if (sep == -2)
            goto fail;
        if (sep > start && sep + 1 < end &&
            set_property(result, PyUnicode_Substring(text, start, sep), PyUnicode_Substring(text, sep + 1, end)) < 0)
            goto fail;
        start = end + 1;
    }
    return result;
fail:
    Py_DECREF(result);
    return NULL;
}

static PyObject *string_to_properties(PyObject *self, PyObject *text) {
    if (text == Py_None || (PyUnicode_Check(text) && PyUnicode_GET_LENGTH(text) == 0))
        return PyDict_New();
    if (!PyUnicode_Check(text))
        return fallback(py_string_to_properties, &text, 1);
    return parse_properties(text);
}

static PyObject *properties_to_string(PyObject *self, PyObject *props) {
    Py_ssize_t pos = 0, length = 0, at = 0, count;
    Py_UCS4 maxchar = 127;
    PyObject *k, *v, *out;
    if (!PyDict_CheckExact(props))
        return fallback(py_properties_to_string, &props, 1);
    count = PyDict_GET_SIZE(props);
    if (count == 0)
        return PyUnicode_New(0, 0);
    while (PyDict_Next(props, &pos, &k, &v)) {
        if (!PyUnicode_CheckExact(k) || !PyUnicode_CheckExact(v))
            return fallback(py_properties_to_string, &props, 1);
        length += PyUnicode_GET_LENGTH(k) + PyUnicode_GET_LENGTH(v) + 1;
        if (PyUnicode_MAX_CHAR_VALUE(k) > maxchar)
            maxchar = PyUnicode_MAX_CHAR_VALUE(k);
        if (PyUnicode_MAX_CHAR_VALUE(v) > maxchar)
            maxchar = PyUnicode_MAX_CHAR_VALUE(v);
    }
    out = PyUnicode_New(length + count - 1, maxchar);
    if (out == NULL)
        return NULL;
    pos = 0;  /* nothing above ran Python code: the dict is unchanged */
    if (maxchar < 128) {  /* all ASCII (the usual case): plain byte copies */
        char *dst = (char *)PyUnicode_DATA(out);
        while (PyDict_Next(props, &pos, &k, &v)) {
            if (at > 0)
                dst[at++] = 2;
            memcpy(dst + at, PyUnicode_DATA(k), PyUnicode_GET_LENGTH(k));
            at += PyUnicode_GET_LENGTH(k);
            dst[at++] = 1;
            memcpy(dst + at, PyUnicode_DATA(v), PyUnicode_GET_LENGTH(v));
            at += PyUnicode_GET_LENGTH(v);
        }
        return out;
    }
    while (PyDict_Next(props, &pos, &k, &v)) {
        if (at > 0)
            PyUnicode_WriteChar(out, at++, 2);
        if (PyUnicode_CopyCharacters(out, at, k, 0, PyUnicode_GET_LENGTH(k)) < 0)
            goto fail;
        at += PyUnicode_GET_LENGTH(k);
        PyUnicode_WriteChar(out, at++, 1);
        if (PyUnicode_CopyCharacters(out, at, v, 0, PyUnicode_GET_LENGTH(v)) < 0)
            goto fail;
        at += PyUnicode_GET_LENGTH(v);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* ---- Java String.hashCode --------------------------------------------------------------- */

/* 31-polynomial continued from h over text[start:end] (UTF-16 code units) into *out; 0 for a lone
 * surrogate (Python raises). */
static int java_hash_span(uint32_t h, PyObject *text, Py_ssize_t start, Py_ssize_t end, uint32_t *out) {
    Py_ssize_t i;
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    if (kind == PyUnicode_1BYTE_KIND) {
        const Py_UCS1 *s = data;
        for (i = start; i + 4 <= end; i += 4)  /* four steps at once: 31^4 h + 31^3 a + 31^2 b + 31 c + d */
            h = 923521u * h + 29791u * s[i] + 961u * s[i + 1] + 31u * s[i + 2] + s[i + 3];
        for (; i < end; i++)
            h = 31 * h + s[i];
    } else {
        for (i = start; i < end; i++) {
            Py_UCS4 c = PyUnicode_READ(kind, data, i);
            if (c >= 0xD800 && c <= 0xDFFF)
                return 0;
            if (c >= 0x10000) {  /* a surrogate pair */
                c -= 0x10000;
                h = 31 * h + (0xD800 + (c >> 10));
                c = 0xDC00 + (c & 0x3FF);
            }
            h = 31 * h + c;
        }
    }
    *out = h;
    return 1;
}

static int java_hash_of(PyObject *text, int32_t *out) {
    uint32_t h;
    if (!java_hash_span(0, text, 0, PyUnicode_GET_LENGTH(text), &h))
        return 0;
    *out = (int32_t)h;
    return 1;
}

static PyObject *java_hash(PyObject *self, PyObject *text) {
    int32_t h;
    if (!PyUnicode_Check(text) || !java_hash_of(text, &h))
        return fallback(py_java_hash, &text, 1);
    return PyLong_FromLong(h);
}

static PyObject *tags_code(PyObject *self, PyObject *tags) {
    int32_t h;
    if (tags == Py_None)
        return PyLong_FromLong(0);
    if (!PyUnicode_Check(tags) || !java_hash_of(tags, &h))
        return fallback(py_tags_code, &tags, 1);
    return PyLong_FromLong(h);
}

/* The index's |hashCode| with Integer.MIN_VALUE → 0 (rocketpy.store.index.key_hash). */
static PyObject *key_hash(PyObject *self, PyObject *key) {
    int32_t h;
    if (!PyUnicode_Check(key) || !java_hash_of(key, &h)) {  /* the reference raises for these */
        PyObject *r = fallback(py_java_hash, &key, 1);
        long v;
        if (r == NULL)
            return NULL;
        v = PyLong_AsLong(r);
        Py_DECREF(r);
        if (v == -1 && PyErr_Occurred())
            return NULL;
        h = (int32_t)v;
    }
    return PyLong_FromLong(h == INT32_MIN ? 0 : (h < 0 ? -h : h));
}

/* ---- batch bodies ----------------------------------------------------------------------- */

/* SEND_BATCH_MESSAGE body → [(flag, body, properties text)]; bytes only, else Python. */
static PyObject *batch_entries(PyObject *self, PyObject *data) {
    const unsigned char *buf;
    Py_ssize_t pos = 0, end;
    PyObject *out;
    if (!PyBytes_CheckExact(data))
        return fallback(py_batch_entries, &data, 1);
    buf = (const unsigned char *)PyBytes_AS_STRING(data);
    end = PyBytes_GET_SIZE(data);
    out = PyList_New(0);
    if (out == NULL)
        return NULL;
    while (pos < end) {
        int32_t size, flag, body_len;
        int16_t props_len;
        Py_ssize_t body_at, props_at;
        PyObject *body, *props, *item;
        if (end - pos < 22)
            goto malformed;
        size = get_i32(buf + pos);
        flag = get_i32(buf + pos + 12);
        body_len = get_i32(buf + pos + 16);
        body_at = pos + 20;
        if (body_len < 0 || body_len > end - body_at - 2)
            goto malformed;
        props_len = get_i16(buf + body_at + body_len);
        props_at = body_at + body_len + 2;
        if (props_len < 0 || props_len > end - props_at || (int64_t)size != 22 + (int64_t)body_len + props_len)
            goto malformed;
        props = PyUnicode_DecodeUTF8((const char *)buf + props_at, props_len, NULL);
        if (props == NULL) {
            PyErr_Clear();
            goto malformed;
        }
        body = PyBytes_FromStringAndSize((const char *)buf + body_at, body_len);
        if (body == NULL) {
            Py_DECREF(props);
            goto fail;
        }
        item = Py_BuildValue("(iNN)", flag, body, props);  /* N: steals body and props */
        if (item == NULL || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            goto fail;
        }
        Py_DECREF(item);
        pos = props_at + props_len;
    }
    return out;
malformed:  /* the Python reference raises the RecordError */
    Py_DECREF(out);
    return fallback(py_batch_entries, &data, 1);
fail:
    Py_DECREF(out);
    return NULL;
}

/* ---- records ---------------------------------------------------------------------------- */

/* The last hosts packed: a record has two (the producer's and the broker's), the same tuples for
 * a whole batch. Held, so that a cached address is never another tuple's; a tuple of a str and an
 * int never changes. */
#define PACKED_HOSTS 4
static PyObject *packed_hosts[PACKED_HOSTS];
static unsigned char packed_ips[PACKED_HOSTS][4];
static int64_t packed_ports[PACKED_HOSTS];
static unsigned packed_next;

/* An IPv4 (ip, port) tuple of strictly dotted-quad form into 4 bytes and a port; 0 otherwise. */
static int pack_host(PyObject *host, unsigned char ip[4], int64_t *port) {
    const char *text;
    unsigned i;
    for (i = 0; i < PACKED_HOSTS; i++)
        if (packed_hosts[i] == host) {
            memcpy(ip, packed_ips[i], 4);
            *port = packed_ports[i];
            return 1;
        }
    if (!PyTuple_CheckExact(host) || PyTuple_GET_SIZE(host) != 2)
        return 0;
    if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(host, 0)) || !PyUnicode_IS_ASCII(PyTuple_GET_ITEM(host, 0)) ||
        !PyLong_CheckExact(PyTuple_GET_ITEM(host, 1)))
        return 0;
    text = (const char *)PyUnicode_DATA(PyTuple_GET_ITEM(host, 0));
    if (inet_pton(AF_INET, text, ip) != 1)  /* where inet_pton accepts, inet_aton agrees */
        return 0;
    if (!I32_OK(PyTuple_GET_ITEM(host, 1), port))
        return 0;
    i = packed_next++ % PACKED_HOSTS;
    Py_XSETREF(packed_hosts[i], Py_NewRef(host));
    memcpy(packed_ips[i], ip, 4);
    packed_ports[i] = *port;
    return 1;
}

static int crc_of(const char *data, Py_ssize_t n, int32_t *out) {
    /* zlib.crc32 masked to 31 bits: crc_fast when the CPU allows, else zlib's own code through the
     * Python module. 0, or -1 with an exception. */
    PyObject *view, *r;
    if (crc_fast_ready) {
        *out = (int32_t)(crc_fast((const unsigned char *)data, (size_t)n) & 0x7FFFFFFF);
        return 0;
    }
    view = PyMemoryView_FromMemory((char *)data, n, PyBUF_READ);
    if (view == NULL)
        return -1;
    r = PyObject_CallOneArg(zlib_crc32, view);
    Py_DECREF(view);
    if (r == NULL)
        return -1;
    *out = (int32_t)(PyLong_AsUnsignedLongMask(r) & 0x7FFFFFFF);
    Py_DECREF(r);
    return 0;
}

/* PyUnicode_AsUTF8AndSize, an ASCII str's own bytes without the call (a record's properties are). */
static inline const char *utf8_of(PyObject *text, Py_ssize_t *size) {
    if (PyUnicode_IS_COMPACT_ASCII(text)) {
        *size = PyUnicode_GET_LENGTH(text);
        return (const char *)PyUnicode_DATA(text);
    }
    return PyUnicode_AsUTF8AndSize(text, size);
}

/* The message's attributes encode_record reads, in this order. */
enum { A_TOPIC, A_PROPS, A_BODY, A_QUEUE_ID, A_FLAG, A_QUEUE_OFFSET, A_PHYS, A_SYS_FLAG, A_BORN_TS,
       A_BORN_HOST, A_STORE_TS, A_STORE_HOST, A_RECONSUME, A_PREPARED, N_ATTRS };
static const int ATTR_FIELD[N_ATTRS] = {0, 3, 1, 4, 2, 12, 13, 5, 6, 7, 8, 9, 10, 11};

/* What a message's record is made of (record_parts), until write_record writes it. */
typedef struct {
    PyObject *a[N_ATTRS];  /* new references */
    int64_t n[N_ATTRS];
    unsigned char born_ip[4], store_ip[4];
    const char *topic;
    Py_ssize_t topic_len, props_len, size;
    int32_t crc;
} RecordParts;

static void release_parts(RecordParts *r) {
    int i;
    for (i = 0; i < N_ATTRS; i++)
        Py_CLEAR(r->a[i]);
}

/* msg's attributes and sizes for its record: 1; 0 when the Python reference must encode it (unusual
 * input); -1 with an exception. Nothing is held but on 1. */
static int record_parts(PyObject *msg, RecordParts *r) {
    PyObject *k, *v;
    Py_ssize_t pos = 0, count;
    int i;
    memset(r->a, 0, sizeof r->a);
    r->props_len = 0;
    for (i = 0; i < N_ATTRS; i++) {
        if (use_slots && Py_IS_TYPE(msg, (PyTypeObject *)MessageExt))  /* read the slot itself */
            r->a[i] = Py_XNewRef(*(PyObject **)((char *)msg + slot_offsets[ATTR_FIELD[i]]));
        else if ((r->a[i] = PyObject_GetAttr(msg, field_names[ATTR_FIELD[i]])) == NULL)
            PyErr_Clear();
        if (r->a[i] == NULL)  /* an unset slot raises AttributeError in Python */
            goto slow;
    }
    if (!PyUnicode_CheckExact(r->a[A_TOPIC]) || !PyDict_CheckExact(r->a[A_PROPS]) || !PyBytes_CheckExact(r->a[A_BODY]))
        goto slow;
    r->topic = PyUnicode_AsUTF8AndSize(r->a[A_TOPIC], &r->topic_len);
    if (r->topic == NULL) {
        PyErr_Clear();
        goto slow;
    }
    if (r->topic_len > TOPIC_MAX_LENGTH)
        goto slow;
    for (i = A_QUEUE_ID; i < N_ATTRS; i++) {
        if (i == A_BORN_HOST || i == A_STORE_HOST)
            continue;
        if (i == A_QUEUE_ID || i == A_FLAG || i == A_SYS_FLAG || i == A_RECONSUME ? !I32_OK(r->a[i], &r->n[i])
                                                                                  : !I64_OK(r->a[i], &r->n[i]))
            goto slow;
    }
    if (!pack_host(r->a[A_BORN_HOST], r->born_ip, &r->n[A_BORN_HOST]) ||
        !pack_host(r->a[A_STORE_HOST], r->store_ip, &r->n[A_STORE_HOST]))
        goto slow;
    /* the properties' UTF-8 length: k\x01v joined by \x02 */
    count = PyDict_GET_SIZE(r->a[A_PROPS]);
    while (PyDict_Next(r->a[A_PROPS], &pos, &k, &v)) {
        Py_ssize_t kl, vl;
        if (!PyUnicode_CheckExact(k) || !PyUnicode_CheckExact(v))
            goto slow;
        if (utf8_of(k, &kl) == NULL || utf8_of(v, &vl) == NULL) {
            PyErr_Clear();  /* a lone surrogate: Python raises UnicodeEncodeError */
            goto slow;
        }
        r->props_len += kl + vl + 1;
    }
    if (count > 0)
        r->props_len += count - 1;
    if (r->props_len > MAX_PROPERTIES_LENGTH)
        goto slow;
    r->size = FIXED_V4 + PyBytes_GET_SIZE(r->a[A_BODY]) + 1 + r->topic_len + 2 + r->props_len;
    if (r->size > INT32_MAX)
        goto slow;
    if (crc_of(PyBytes_AS_STRING(r->a[A_BODY]), PyBytes_GET_SIZE(r->a[A_BODY]), &r->crc) < 0) {
        release_parts(r);
        return -1;
    }
    return 1;
slow:
    release_parts(r);
    return 0;
}

/* The record of record_parts into p[0:r->size]; r's references released. 0 (what was written is
 * garbage) when the properties no longer have the length measured: Python code ran in between
 * (a finalizer, from an allocation) and changed them; they are read again, in the same order. */
static int write_record(unsigned char *p, RecordParts *r) {
    PyObject *k, *v;
    Py_ssize_t pos = 0, body_len = PyBytes_GET_SIZE(r->a[A_BODY]);
    unsigned char *end = p + r->size;
    int first = 1;
    put_i32(p, (int32_t)r->size);
    put_i32(p + 4, MAGIC_CODE);
    put_i32(p + 8, r->crc);
    put_i32(p + 12, (int32_t)r->n[A_QUEUE_ID]);
    put_i32(p + 16, (int32_t)r->n[A_FLAG]);
    put_i64(p + 20, r->n[A_QUEUE_OFFSET]);
    put_i64(p + 28, r->n[A_PHYS]);
    put_i32(p + 36, (int32_t)(r->n[A_SYS_FLAG] & ~HOSTS_V6));
    put_i64(p + 40, r->n[A_BORN_TS]);
    memcpy(p + 48, r->born_ip, 4);
    put_i32(p + 52, (int32_t)r->n[A_BORN_HOST]);
    put_i64(p + 56, r->n[A_STORE_TS]);
    memcpy(p + 64, r->store_ip, 4);
    put_i32(p + 68, (int32_t)r->n[A_STORE_HOST]);
    put_i32(p + 72, (int32_t)r->n[A_RECONSUME]);
    put_i64(p + 76, r->n[A_PREPARED]);
    put_i32(p + 84, (int32_t)body_len);
    p += FIXED_V4;
    memcpy(p, PyBytes_AS_STRING(r->a[A_BODY]), body_len);
    p += body_len;
    *p++ = (unsigned char)r->topic_len;
    memcpy(p, r->topic, r->topic_len);
    p += r->topic_len;
    *p++ = (unsigned char)(r->props_len >> 8);
    *p++ = (unsigned char)r->props_len;
    while (PyDict_Next(r->a[A_PROPS], &pos, &k, &v)) {
        Py_ssize_t kl, vl;
        const char *ks = PyUnicode_CheckExact(k) ? utf8_of(k, &kl) : NULL;
        const char *vs = ks != NULL && PyUnicode_CheckExact(v) ? utf8_of(v, &vl) : NULL;
        if (vs == NULL || kl + vl + 1 + !first > end - p) {
            PyErr_Clear();
            release_parts(r);
            return 0;
        }
        if (!first)
            *p++ = 2;
        first = 0;
        memcpy(p, ks, kl);
        p += kl;
        *p++ = 1;
        memcpy(p, vs, vl);
        p += vl;
    }
    release_parts(r);
    return p == end;
}

static PyObject *encode_record(PyObject *self, PyObject *msg) {
    RecordParts r;
    PyObject *out;
    switch (record_parts(msg, &r)) {
    case 0:  /* unusual input: the Python reference encodes it or raises */
        return fallback(py_encode_record, &msg, 1);
    case -1:
        return NULL;
    }
    out = PyByteArray_FromStringAndSize(NULL, r.size);
    if (out == NULL) {
        release_parts(&r);
        return NULL;
    }
    if (!write_record((unsigned char *)PyByteArray_AS_STRING(out), &r)) {
        Py_DECREF(out);
        return fallback(py_encode_record, &msg, 1);
    }
    return out;
}

static PyObject *patch_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    int64_t queue_offset, phys, store_ts;
    unsigned char *p;
    if (nargs != 4 || !PyByteArray_CheckExact(args[0]) || PyByteArray_GET_SIZE(args[0]) < 64 ||
        !I64_OK(args[1], &queue_offset) || !I64_OK(args[2], &phys) || !I64_OK(args[3], &store_ts))
        return fallback(py_patch_record, args, nargs);
    p = (unsigned char *)PyByteArray_AS_STRING(args[0]);
    put_i64(p + 20, queue_offset);
    put_i64(p + 28, phys);
    put_i64(p + 56, store_ts);
    Py_RETURN_NONE;
}

/* (ip, port) tuples of IPv4 hosts, cached by their 8 bytes: hosts repeat (the broker's own,
 * one per producer connection), as the Python side's lru_cache does. */
#define HOST_CACHE 256
static uint64_t host_keys[HOST_CACHE];
static PyObject *host_values[HOST_CACHE];

static PyObject *host_v4(const unsigned char *p) {
    uint64_t key = (uint64_t)(uint32_t)get_i32(p) << 32 | (uint32_t)get_i32(p + 4);
    unsigned slot = (unsigned)((key * 0x9E3779B97F4A7C15ULL) >> 56);
    PyObject *host;
    if (host_values[slot] != NULL && host_keys[slot] == key) {
        Py_INCREF(host_values[slot]);
        return host_values[slot];
    }
    host = Py_BuildValue("(Ni)", PyUnicode_FromFormat("%u.%u.%u.%u", p[0], p[1], p[2], p[3]), get_i32(p + 4));
    if (host == NULL)
        return NULL;
    Py_XSETREF(host_values[slot], Py_NewRef(host));
    host_keys[slot] = key;
    return host;
}

/* The last topic decoded: records of a pull share it. */
static PyObject *last_topic;

static PyObject *topic_of(const char *p, Py_ssize_t n) {
    if (last_topic != NULL && PyUnicode_IS_ASCII(last_topic) && PyUnicode_GET_LENGTH(last_topic) == n &&
        memcmp(PyUnicode_DATA(last_topic), p, n) == 0)
        return Py_NewRef(last_topic);
    PyObject *topic = PyUnicode_DecodeUTF8(p, n, NULL);
    if (topic != NULL)
        Py_XSETREF(last_topic, Py_NewRef(topic));
    return topic;
}

/* A MessageExt from its 16 fields (stolen references; NULLs allowed and released). */
static PyObject *new_message(PyObject *f[N_FIELDS]) {
    PyObject *msg = NULL;
    int i;
    for (i = 0; i < N_FIELDS; i++)
        if (f[i] == NULL)
            goto done;
    if (MessageExt == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "rocketpy._speedups.setup() was not called");
        goto done;
    }
    if (use_slots) {
        msg = ((PyTypeObject *)MessageExt)->tp_alloc((PyTypeObject *)MessageExt, 0);
        if (msg != NULL)
            for (i = 0; i < N_FIELDS; i++) {  /* hand the references to the slots */
                *(PyObject **)((char *)msg + slot_offsets[i]) = f[i];
                f[i] = NULL;
            }
    } else {
        msg = PyObject_Vectorcall(MessageExt, f, N_FIELDS, NULL);
    }
done:
    for (i = 0; i < N_FIELDS; i++)
        Py_XDECREF(f[i]);
    return msg;
}

/* Decode the IPv4 record at offset of buf[0:len]. Returns the message, or NULL with no
 * exception set when the record needs the Python reference (IPv6, malformed), or NULL with an
 * exception (memory). *size gets the record's size. */
static PyObject *decode_v4(const unsigned char *buf, Py_ssize_t len, Py_ssize_t offset, int check_crc,
                           Py_ssize_t *size_out) {
    const unsigned char *r;
    Py_ssize_t pos, body_len, topic_len, props_len;
    int32_t size, crc;
    PyObject *f[N_FIELDS] = {NULL}, *props_text;
    if (offset < 0 || offset > len || len - offset < FIXED_V4 + 3)
        return NULL;
    r = buf + offset;
    size = get_i32(r);
    if (get_i32(r + 4) != MAGIC_CODE || (get_i32(r + 36) & HOSTS_V6))
        return NULL;
    body_len = get_i32(r + 84);
    pos = FIXED_V4;
    if (body_len < 0 || body_len > len - offset - pos - 3)
        return NULL;
    pos += body_len;
    topic_len = r[pos];
    if (topic_len > len - offset - pos - 3)
        return NULL;
    props_len = get_i16(r + pos + 1 + topic_len);
    if (props_len < 0 || props_len > len - offset - pos - 3 - topic_len)
        return NULL;
    if (size != pos + 3 + topic_len + props_len)
        return NULL;
    crc = get_i32(r + 8);
    if (check_crc) {
        int32_t actual;
        if (crc_of((const char *)r + FIXED_V4, body_len, &actual) < 0)
            return NULL;  /* with the exception */
        if (actual != crc)
            return NULL;
    }
    f[0] = topic_of((const char *)r + pos + 1, topic_len);
    if (f[0] != NULL && all_ascii(r + pos + 3 + topic_len, props_len)) {  /* no text to build first */
        f[3] = parse_ascii_properties((const char *)r + pos + 3 + topic_len, props_len);
    } else {
        props_text = f[0] ? PyUnicode_DecodeUTF8((const char *)r + pos + 3 + topic_len, props_len, NULL) : NULL;
        if (props_text == NULL) {  /* bad UTF-8: the Python reference raises the RecordError */
            Py_XDECREF(f[0]);
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                PyErr_Clear();
            return NULL;
        }
        f[3] = parse_properties(props_text);
        Py_DECREF(props_text);
    }
    f[1] = PyBytes_FromStringAndSize((const char *)r + FIXED_V4, body_len);
    f[2] = PyLong_FromLong(get_i32(r + 16));
    f[4] = PyLong_FromLong(get_i32(r + 12));
    f[5] = PyLong_FromLong(get_i32(r + 36));
    f[6] = PyLong_FromLongLong(get_i64(r + 40));
    f[7] = host_v4(r + 48);
    f[8] = PyLong_FromLongLong(get_i64(r + 56));
    f[9] = host_v4(r + 64);
    f[10] = PyLong_FromLong(get_i32(r + 72));
    f[11] = PyLong_FromLongLong(get_i64(r + 76));
    f[12] = PyLong_FromLongLong(get_i64(r + 20));
    f[13] = PyLong_FromLongLong(get_i64(r + 28));
    f[14] = PyLong_FromLong(size);
    f[15] = PyLong_FromLong(crc);
    *size_out = size;
    return new_message(f);  /* NULL only with an exception */
}

/* One record: the C decoder, else the Python reference (which decodes IPv6 hosts or raises). */
static PyObject *decode_at(PyObject *data, const Py_buffer *view, Py_ssize_t offset, int check_crc,
                           Py_ssize_t *size) {
    PyObject *msg = decode_v4(view->buf, view->len, offset, check_crc, size), *args[3], *s;
    if (msg != NULL || PyErr_Occurred())
        return msg;
    args[0] = data;
    args[1] = PyLong_FromSsize_t(offset);
    args[2] = check_crc ? Py_True : Py_False;
    if (args[1] == NULL)
        return NULL;
    msg = fallback(py_decode_record, args, 3);
    Py_DECREF(args[1]);
    if (msg == NULL)
        return NULL;
    s = PyObject_GetAttr(msg, field_names[14]);  /* store_size */
    *size = s ? PyLong_AsSsize_t(s) : -1;
    Py_XDECREF(s);
    if (*size <= 0) {
        Py_DECREF(msg);
        if (!PyErr_Occurred())
            PyErr_Format(RecordError, "record at %zd has no size", offset);
        return NULL;
    }
    return msg;
}

static PyObject *decode_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *data, *offset_obj = NULL, *crc_obj = NULL, *msg;
    Py_ssize_t offset = 0, size, i, nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    int check_crc = 0;
    Py_buffer view;
    if (nargs < 1 || nargs > 3)
        return PyErr_Format(PyExc_TypeError, "decode_record() takes 1 to 3 positional arguments");
    data = args[0];
    if (nargs > 1)
        offset_obj = args[1];
    if (nargs > 2)
        crc_obj = args[2];
    for (i = 0; i < nkw; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        if (PyUnicode_CompareWithASCIIString(name, "offset") == 0 && offset_obj == NULL)
            offset_obj = args[nargs + i];
        else if (PyUnicode_CompareWithASCIIString(name, "check_crc") == 0 && crc_obj == NULL)
            crc_obj = args[nargs + i];
        else
            return PyErr_Format(PyExc_TypeError, "decode_record() got an unexpected keyword argument %R", name);
    }
    if (offset_obj != NULL) {
        if (!PyLong_CheckExact(offset_obj))
            goto slow;
        offset = PyLong_AsSsize_t(offset_obj);
        if (offset == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            goto slow;
        }
    }
    if (crc_obj != NULL && (check_crc = PyObject_IsTrue(crc_obj)) < 0)
        return NULL;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        goto slow;
    }
    msg = decode_at(data, &view, offset, check_crc, &size);
    PyBuffer_Release(&view);
    return msg;
slow: {  /* not a buffer, or an unusual offset: the Python reference */
        PyObject *zero = PyLong_FromLong(0);
        PyObject *call[3] = {data, offset_obj ? offset_obj : zero, crc_obj ? crc_obj : Py_False};
        msg = fallback(py_decode_record, call, 3);
        Py_DECREF(zero);
        return msg;
    }
}

/* decode_records(data, extra=None): every record of data; extra's items added to each one's properties. */
static PyObject *decode_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer view;
    Py_ssize_t pos = 0, size = 0;
    PyObject *out, *data, *extra;
    if (nargs < 1 || nargs > 2)
        return PyErr_Format(PyExc_TypeError, "decode_records() takes 1 or 2 arguments");
    data = args[0];
    extra = nargs > 1 && args[1] != Py_None ? args[1] : NULL;
    if ((extra != NULL && !PyDict_CheckExact(extra)) || PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        return fallback(py_decode_records, args, nargs);
    }
    out = PyList_New(0);
    while (out != NULL && pos < view.len) {
        PyObject *msg = decode_at(data, &view, pos, 0, &size), *props = NULL;
        if (msg == NULL || (extra != NULL && ((props = PyObject_GetAttr(msg, field_names[3])) == NULL
                                              || PyDict_Update(props, extra) < 0))
            || PyList_Append(out, msg) < 0)
            Py_CLEAR(out);
        Py_XDECREF(props);
        Py_XDECREF(msg);
        pos += size;
    }
    PyBuffer_Release(&view);
    return out;
}

/* ---- batch bodies, the client's side --------------------------------------------------- */

/* The UTF-8 length of properties_to_string(props), or -1 (no exception) when props are not an
 * exact dict of exact str (or hold a lone surrogate): the Python reference handles those. */
static Py_ssize_t properties_utf8_length(PyObject *props) {
    Py_ssize_t pos = 0, length = 0, kl, vl;
    PyObject *k, *v;
    if (!PyDict_CheckExact(props))
        return -1;
    while (PyDict_Next(props, &pos, &k, &v)) {
        if (!PyUnicode_CheckExact(k) || !PyUnicode_CheckExact(v))
            return -1;
        if (PyUnicode_AsUTF8AndSize(k, &kl) == NULL || PyUnicode_AsUTF8AndSize(v, &vl) == NULL) {
            PyErr_Clear();
            return -1;
        }
        length += kl + vl + 2;
    }
    return length ? length - 1 : 0;
}

/* Write properties_to_string(props) as UTF-8 at p (its length was checked by the caller). */
static unsigned char *write_properties(unsigned char *p, PyObject *props) {
    Py_ssize_t pos = 0, kl, vl;
    PyObject *k, *v;
    int first = 1;
    while (PyDict_Next(props, &pos, &k, &v)) {
        const char *ks = utf8_of(k, &kl), *vs = utf8_of(v, &vl);
        if (!first)
            *p++ = 2;
        first = 0;
        memcpy(p, ks, kl);
        p += kl;
        *p++ = 1;
        memcpy(p, vs, vl);
        p += vl;
    }
    return p;
}

/* SEND_BATCH_MESSAGE body of a list of messages; anything unusual goes to the Python reference. */
static PyObject *encode_batch(PyObject *self, PyObject *messages) {
    Py_ssize_t n, i, total = 0;
    PyObject **held = NULL, *out = NULL;   /* body, properties of each message */
    int64_t *flags = NULL;
    Py_ssize_t *props_lens = NULL;
    unsigned char *p;
    if (!PyList_CheckExact(messages))
        return fallback(py_encode_batch, &messages, 1);
    n = PyList_GET_SIZE(messages);
    held = PyMem_Calloc(2 * n + 1, sizeof(PyObject *));
    flags = PyMem_Calloc(n + 1, sizeof(int64_t));
    props_lens = PyMem_Calloc(n + 1, sizeof(Py_ssize_t));
    if (held == NULL || flags == NULL || props_lens == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (i = 0; i < n; i++) {  /* first pass: take each message's fields, check them, size the body */
        PyObject *msg = PyList_GET_ITEM(messages, i), *flag;
        held[2 * i] = PyObject_GetAttr(msg, field_names[1]);      /* body */
        held[2 * i + 1] = PyObject_GetAttr(msg, field_names[3]);  /* properties */
        flag = PyObject_GetAttr(msg, field_names[2]);
        if (held[2 * i] == NULL || held[2 * i + 1] == NULL || flag == NULL) {
            Py_XDECREF(flag);
            PyErr_Clear();
            goto slow;
        }
        if (!I32_OK(flag, &flags[i]) || !PyBytes_CheckExact(held[2 * i])) {
            Py_DECREF(flag);
            goto slow;
        }
        Py_DECREF(flag);
        props_lens[i] = properties_utf8_length(held[2 * i + 1]);
        if (props_lens[i] < 0 || props_lens[i] > 32767 || PyBytes_GET_SIZE(held[2 * i]) > INT32_MAX - 22 - 32767)
            goto slow;
        total += 22 + PyBytes_GET_SIZE(held[2 * i]) + props_lens[i];
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL)
        goto done;
    p = (unsigned char *)PyBytes_AS_STRING(out);
    for (i = 0; i < n; i++) {  /* second pass: no Python code ran since, the sizes hold */
        Py_ssize_t body_len = PyBytes_GET_SIZE(held[2 * i]);
        put_i32(p, (int32_t)(22 + body_len + props_lens[i]));
        put_i32(p + 4, 0);
        put_i32(p + 8, 0);
        put_i32(p + 12, (int32_t)flags[i]);
        put_i32(p + 16, (int32_t)body_len);
        memcpy(p + 20, PyBytes_AS_STRING(held[2 * i]), body_len);
        p += 20 + body_len;
        *p++ = (unsigned char)(props_lens[i] >> 8);
        *p++ = (unsigned char)props_lens[i];
        p = write_properties(p, held[2 * i + 1]);
    }
    goto done;
slow:
    out = fallback(py_encode_batch, &messages, 1);
done:
    if (held != NULL)
        for (i = 0; i < 2 * n; i++)
            Py_XDECREF(held[i]);
    PyMem_Free(held);
    PyMem_Free(flags);
    PyMem_Free(props_lens);
    return out;
}

/* ---- the broker's batch path ------------------------------------------------------------ */

static PyObject *str_wait, *str_cluster, *str_false;

/* stored_properties for ASCII entry text, in one pass: the dict that parsing, updating with
 * shared, dropping WAIT, setting CLUSTER and putting back WAIT=false gives (same items, same
 * order), without building WAIT's value or a method call per message. shared_wait: -1 when
 * shared has no WAIT, else whether its (ASCII) WAIT is false: it overrides the entry's. */
static PyObject *stored_ascii_properties(const char *s, Py_ssize_t n, PyObject *shared, PyObject *cluster,
                                         int shared_wait) {
    int wait_false = -1;  /* the entry's: -1 when it has no WAIT item */
    Py_ssize_t pos = 0;
    PyObject *result = parse_ascii_items(s, n, &wait_false), *k, *v;
    if (result == NULL)
        return NULL;
    if (shared_wait >= 0)
        wait_false = shared_wait;
    while (PyDict_Next(shared, &pos, &k, &v))
        if (!(shared_wait >= 0 && PyUnicode_CheckExact(k) && PyUnicode_CompareWithASCIIString(k, "WAIT") == 0) &&
            PyDict_SetItem(result, k, v) < 0)
            goto fail;
    if (PyDict_SetItem(result, str_cluster, cluster) < 0 || (wait_false == 1 && PyDict_SetItem(result, str_wait, str_false) < 0))
        goto fail;
    return result;
fail:
    Py_DECREF(result);
    return NULL;
}

/* A batch entry's properties as the broker stores them (SendMessageProcessor._stored_properties
 * without its size check): the entry's own, updated with the header's (shared); WAIT dropped,
 * CLUSTER set, and WAIT=false put back at the end when it was false. */
static PyObject *stored_properties(const char *s, Py_ssize_t n, PyObject *shared, PyObject *cluster) {
    PyObject *props, *wait;
    int shared_wait = -1;
    wait = PyDict_GET_SIZE(shared) ? PyDict_GetItemWithError(shared, str_wait) : NULL;  /* borrowed */
    if (wait == NULL && PyErr_Occurred())
        return NULL;
    if (wait != NULL && PyUnicode_CheckExact(wait) && PyUnicode_IS_ASCII(wait))
        shared_wait = is_false_text((const char *)PyUnicode_DATA(wait), PyUnicode_GET_LENGTH(wait));
    if ((wait == NULL || shared_wait >= 0) && all_ascii((const unsigned char *)s, n))
        return stored_ascii_properties(s, n, shared, cluster, shared_wait);
    if (all_ascii((const unsigned char *)s, n)) {
        props = parse_ascii_properties(s, n);
    } else {
        PyObject *text = PyUnicode_DecodeUTF8(s, n, NULL);
        if (text == NULL)
            return NULL;
        props = parse_properties(text);
        Py_DECREF(text);
    }
    if (props == NULL)
        return NULL;
    if (PyDict_GET_SIZE(shared) && PyDict_Update(props, shared) < 0)
        goto fail;
    wait = PyDict_GetItemWithError(props, str_wait);  /* borrowed */
    if (wait != NULL) {
        PyObject *lower = PyObject_CallMethod(wait, "lower", NULL);
        int is_false;
        if (lower == NULL)
            goto fail;
        is_false = PyObject_RichCompareBool(lower, str_false, Py_EQ);
        Py_DECREF(lower);
        if (is_false < 0 || PyDict_DelItem(props, str_wait) < 0 || PyDict_SetItem(props, str_cluster, cluster) < 0 ||
            (is_false && PyDict_SetItem(props, str_wait, str_false) < 0))
            goto fail;
    } else if (PyErr_Occurred() || PyDict_SetItem(props, str_cluster, cluster) < 0) {
        goto fail;
    }
    return props;
fail:
    Py_DECREF(props);
    return NULL;
}

/* A batch's entries usually carry the same property names in the same order (a producer's KEYS,
 * TAGS, UNIQ_KEY): the stored dict of an earlier entry, copied with the values that differ set,
 * is the dict stored_properties builds (same items, same order) for an entry with the same names,
 * at the cost of one copy and a replaced value or two instead of a new dict and an insert each. */
#define SHAPE_MAX 16
typedef struct {
    Py_ssize_t count;  /* the names and values of the entry dict was made of, CLUSTER aside */
    PyObject *names[SHAPE_MAX], *values[SHAPE_MAX], *dict;
} EntryShape;

static void shape_clear(EntryShape *shape) {
    Py_ssize_t i;
    for (i = 0; i < shape->count; i++) {
        Py_CLEAR(shape->names[i]);
        Py_CLEAR(shape->values[i]);
    }
    shape->count = 0;
    Py_CLEAR(shape->dict);
}

/* The items of ASCII entry text s[0:n] (name at spans[4i], its length, value, its length): their
 * count; -1 when one is not a plain name=value pair (parse_ascii_items would skip it) or a WAIT,
 * or there are over SHAPE_MAX. */
static Py_ssize_t shape_items(const char *s, Py_ssize_t n, Py_ssize_t spans[4 * SHAPE_MAX]) {
    const char *start = s, *end = s + n;
    Py_ssize_t count = 0;
    while (s < end) {
        const char *item_end = memchr(s, 2, end - s), *sep;
        if (item_end == NULL)
            item_end = end;
        sep = memchr(s, 1, item_end - s);
        if (count == SHAPE_MAX || sep == NULL || sep == s || sep + 1 >= item_end ||
            (sep - s == 4 && memcmp(s, "WAIT", 4) == 0))
            return -1;
        spans[4 * count] = s - start, spans[4 * count + 1] = sep - s;
        spans[4 * count + 2] = sep + 1 - start, spans[4 * count + 3] = item_end - sep - 1;
        count++;
        s = item_end + 1;
    }
    return count;
}

static int same_ascii(PyObject *text, const char *s, Py_ssize_t n) {
    return PyUnicode_GET_LENGTH(text) == n && memcmp(PyUnicode_DATA(text), s, n) == 0;
}

/* Keeps dict, stored_properties' result for ASCII entry text s[0:n] with no shared properties, as
 * the shape of later entries when it is one: distinct plain items (no WAIT, no CLUSTER), then CLUSTER. */
static void shape_from(EntryShape *shape, const char *s, Py_ssize_t n, PyObject *dict) {
    Py_ssize_t spans[4 * SHAPE_MAX], count = shape_items(s, n, spans), pos = 0, i = 0;
    PyObject *k, *v;
    if (count < 0 || PyDict_GET_SIZE(dict) != count + 1)
        return;  /* a repeated name or a CLUSTER item: no shape */
    while (PyDict_Next(dict, &pos, &k, &v) && i < count) {
        if (!PyUnicode_CheckExact(k) || !PyUnicode_IS_COMPACT_ASCII(k) || !PyUnicode_CheckExact(v) ||
            !PyUnicode_IS_COMPACT_ASCII(v) || !same_ascii(k, s + spans[4 * i], spans[4 * i + 1]) ||
            !same_ascii(v, s + spans[4 * i + 2], spans[4 * i + 3]))
            break;
        shape->names[i] = Py_NewRef(k);
        shape->values[i] = Py_NewRef(v);
        shape->count = ++i;
    }
    if (i == count)
        shape->dict = Py_NewRef(dict);
    else
        shape_clear(shape);
}

/* The stored properties of ASCII entry text s[0:n] from the shape, when its names are the shape's
 * in the same order: 1 with *out; 0 when they are not; -1 with an exception. */
static int shaped_properties(EntryShape *shape, const char *s, Py_ssize_t n, PyObject **out) {
    Py_ssize_t spans[4 * SHAPE_MAX], count = shape_items(s, n, spans), i;
    PyObject *props;
    if (count != shape->count)
        return 0;
    for (i = 0; i < count; i++)
        if (!same_ascii(shape->names[i], s + spans[4 * i], spans[4 * i + 1]))
            return 0;
    if ((props = PyDict_Copy(shape->dict)) == NULL)
        return -1;
    for (i = 0; i < count; i++) {
        const char *v = s + spans[4 * i + 2];
        Py_ssize_t vn = spans[4 * i + 3];
        if (!same_ascii(shape->values[i], v, vn) && set_property(props, Py_NewRef(shape->names[i]), property_value(v, vn)) < 0) {
            Py_DECREF(props);
            return -1;
        }
    }
    *out = props;
    return 1;
}

/* stored_batch(body, topic, shared, cluster, limit, queue_id, sys_flag, born_timestamp, born_host,
 *              store_host, reconsume_times) -> [MessageExt] or None
 * The messages of a SEND_BATCH_MESSAGE body as SendMessageProcessor._batch_messages builds them;
 * None when the body is malformed or empty, or an entry's properties are longer than ``limit``
 * bytes (they may need the size check): the caller then runs its Python loop, which answers
 * those cases. */
static PyObject *stored_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *data, *shared, *cluster, *out, *zero;
    EntryShape shape = {0};
    const char *buf;
    Py_ssize_t pos = 0, end, limit;
    if (nargs != 11)
        return PyErr_Format(PyExc_TypeError, "stored_batch() takes 11 arguments");
    data = args[0], shared = args[2], cluster = args[3];
    limit = PyLong_AsSsize_t(args[4]);
    if (limit == -1 && PyErr_Occurred())
        return NULL;
    if (!PyBytes_CheckExact(data) || !PyDict_CheckExact(shared) || !PyUnicode_CheckExact(cluster) ||
        PyBytes_GET_SIZE(data) == 0)
        Py_RETURN_NONE;
    buf = PyBytes_AS_STRING(data);
    end = PyBytes_GET_SIZE(data);
    out = PyList_New(0);
    zero = PyLong_FromLong(0);
    if (out == NULL || zero == NULL)
        goto fail;
    while (pos < end) {
        const unsigned char *e = (const unsigned char *)buf + pos;
        int32_t size, body_len;
        int16_t props_len;
        Py_ssize_t body_at = pos + 20, props_at;
        PyObject *f[N_FIELDS], *msg;
        int i, ascii;
        if (end - pos < 22)
            goto python;
        size = get_i32(e);
        body_len = get_i32(e + 16);
        if (body_len < 0 || body_len > end - body_at - 2)
            goto python;
        props_len = get_i16((const unsigned char *)buf + body_at + body_len);
        props_at = body_at + body_len + 2;
        if (props_len < 0 || props_len > end - props_at || (int64_t)size != 22 + (int64_t)body_len + props_len ||
            props_len > limit)
            goto python;
        f[3] = NULL;
        ascii = all_ascii((const unsigned char *)buf + props_at, props_len);
        if (shape.dict != NULL && ascii && shaped_properties(&shape, buf + props_at, props_len, &f[3]) < 0)
            goto fail;
        if (f[3] == NULL) {
            f[3] = stored_properties(buf + props_at, props_len, shared, cluster);
            if (f[3] == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                    goto fail;
                PyErr_Clear();
                goto python;
            }
            if (shape.dict == NULL && PyDict_GET_SIZE(shared) == 0 && ascii)
                shape_from(&shape, buf + props_at, props_len, f[3]);
        }
        f[0] = Py_NewRef(args[1]);
        f[1] = PyBytes_FromStringAndSize(buf + body_at, body_len);
        f[2] = PyLong_FromLong(get_i32(e + 12));
        f[4] = Py_NewRef(args[5]);   /* queue_id */
        f[5] = Py_NewRef(args[6]);   /* sys_flag */
        f[6] = Py_NewRef(args[7]);   /* born_timestamp */
        f[7] = Py_NewRef(args[8]);   /* born_host */
        f[9] = Py_NewRef(args[9]);   /* store_host */
        f[10] = Py_NewRef(args[10]); /* reconsume_times */
        f[8] = Py_NewRef(zero);      /* store_timestamp, then the five store fields */
        for (i = 11; i < N_FIELDS; i++)
            f[i] = Py_NewRef(zero);
        msg = new_message(f);
        if (msg == NULL || PyList_Append(out, msg) < 0) {
            Py_XDECREF(msg);
            goto fail;
        }
        Py_DECREF(msg);
        pos = props_at + props_len;
    }
    Py_DECREF(zero);
    shape_clear(&shape);
    return out;
python:
    Py_DECREF(out);
    Py_DECREF(zero);
    shape_clear(&shape);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(out);
    Py_XDECREF(zero);
    shape_clear(&shape);
    return NULL;
}

/* ---- the store's inline-append check --------------------------------------------------- */

static PyObject *str_delay, *str_timer_at, *str_timer_sec, *str_timer_ms, *str_keys, *str_space, *py_inline_bound;

/* entries[(topic, queue_id)] += count */
static int run_flush(PyObject *entries, PyObject *topic, PyObject *queue_id, Py_ssize_t count) {
    PyObject *where = PyTuple_Pack(2, topic, queue_id), *old, *now;
    int r = -1;
    if (where == NULL)
        return -1;
    old = PyDict_GetItemWithError(entries, where);  /* borrowed */
    if (old != NULL || !PyErr_Occurred()) {
        now = PyLong_FromSsize_t((old ? PyLong_AsSsize_t(old) : 0) + count);
        if (now != NULL) {
            r = PyDict_SetItem(entries, where, now);
            Py_DECREF(now);
        }
    }
    Py_DECREF(where);
    return r;
}

/* Equal str objects (compact strs of equal text have the same kind). */
static inline int same_text(PyObject *a, PyObject *b) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(a);
    return a == b || (n == PyUnicode_GET_LENGTH(b) && PyUnicode_KIND(a) == PyUnicode_KIND(b) &&
                      memcmp(PyUnicode_DATA(a), PyUnicode_DATA(b), n * PyUnicode_KIND(a)) == 0);
}

/* rocketpy.store.messagestore.inline_bound: (size bound, index keys, {(topic, queue_id): count})
 * or None; anything but lists or tuples of MessageExt with dict-of-str properties goes to the
 * reference. One pass: the reference returns None at the first message it would here, and
 * redoes from the start whatever comes to it (no Python code runs below). */
static PyObject *inline_bound(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t max_body, fixed, size = 0, keys = 0, run = 0, i, j;
    PyObject *puts, *entries, *run_topic = NULL, *run_queue = NULL, *result;
    if (nargs != 3)
        return PyErr_Format(PyExc_TypeError, "inline_bound() takes 3 arguments");
    puts = args[0];
    max_body = PyLong_AsSsize_t(args[1]);
    fixed = PyLong_AsSsize_t(args[2]);
    if ((max_body == -1 || fixed == -1) && PyErr_Occurred())
        return NULL;
    if (!(PyList_CheckExact(puts) || PyTuple_CheckExact(puts)) || !use_slots)  /* a lone put: a tuple */
        return fallback(py_inline_bound, args, nargs);
    entries = PyDict_New();
    if (entries == NULL)
        return NULL;
    for (i = 0; i < PySequence_Fast_GET_SIZE(puts); i++) {
        PyObject *msgs = PySequence_Fast_GET_ITEM(puts, i);
        if (!PyList_CheckExact(msgs) && !PyTuple_CheckExact(msgs))
            goto python;
        for (j = 0; j < PySequence_Fast_GET_SIZE(msgs); j++) {
            PyObject *msg = PySequence_Fast_GET_ITEM(msgs, j), *body, *props, *topic, *queue_id, *k, *v, *found = NULL;
            Py_ssize_t chars = 0, pos = 0;
            int delayed = 0;
            if (!Py_IS_TYPE(msg, (PyTypeObject *)MessageExt))
                goto python;
            body = *(PyObject **)((char *)msg + slot_offsets[1]);
            props = *(PyObject **)((char *)msg + slot_offsets[3]);
            topic = *(PyObject **)((char *)msg + slot_offsets[0]);
            queue_id = *(PyObject **)((char *)msg + slot_offsets[4]);
            if (body == NULL || !PyBytes_CheckExact(body) || props == NULL || !PyDict_CheckExact(props) ||
                topic == NULL || !PyUnicode_CheckExact(topic) || queue_id == NULL || !PyLong_CheckExact(queue_id))
                goto python;
            while (PyDict_Next(props, &pos, &k, &v)) {
                if (!PyUnicode_CheckExact(k) || !PyUnicode_CheckExact(v))
                    goto python;
                chars += PyUnicode_GET_LENGTH(k) + PyUnicode_GET_LENGTH(v) + 2;
                /* a delay level or a timer moves the message to another queue */
                if (same_text(k, str_delay) || same_text(k, str_timer_at) || same_text(k, str_timer_sec) ||
                    same_text(k, str_timer_ms))
                    delayed = 1;
                else if (same_text(k, str_keys))
                    found = v;
            }
            if (delayed || PyBytes_GET_SIZE(body) > max_body) {
                Py_DECREF(entries);
                Py_RETURN_NONE;
            }
            size += fixed + PyBytes_GET_SIZE(body) + PyUnicode_GET_LENGTH(topic) + 4 * chars;
            keys += 2;
            if (found != NULL && PyUnicode_GET_LENGTH(found) > 0) {
                Py_ssize_t spaces = PyUnicode_Count(found, str_space, 0, PY_SSIZE_T_MAX);
                if (spaces < 0)
                    goto fail;
                keys += spaces;
            }
            /* consume-queue entries: counted per run of the same (topic, queue_id) objects */
            if (topic != run_topic || queue_id != run_queue) {
                if (run && run_flush(entries, run_topic, run_queue, run) < 0)
                    goto fail;
                run_topic = topic, run_queue = queue_id, run = 0;
            }
            run++;
        }
    }
    if (run && run_flush(entries, run_topic, run_queue, run) < 0)
        goto fail;
    result = Py_BuildValue("(nnN)", size, keys, entries);
    return result;
python:
    Py_DECREF(entries);
    return fallback(py_inline_bound, args, nargs);
fail:
    Py_DECREF(entries);
    return NULL;
}

/* ---- send request headers (rocketpy.broker.sendheader) ------------------------------------ */

/* SendHeader's fields in order, each read by its one-letter (V2) key, then its long name. */
enum { F_STR, F_STR_OR_EMPTY, F_INT, F_INT_OR_0, F_INT_OR_NONE, F_LONG, F_BOOL };
#define SH_FIELDS 12
static const char SH_KINDS[SH_FIELDS] = {F_STR, F_STR, F_STR, F_INT, F_INT, F_INT, F_LONG, F_INT,
                                         F_STR_OR_EMPTY, F_INT_OR_0, F_INT_OR_NONE, F_BOOL};
static PyObject *sh_keys[SH_FIELDS][2];   /* (short, long), registered by set_send_header() */
static PyObject *SendHeader, *py_send_header;

/* An ASCII str of [+-]?[0-9]{1,18} within [lo, hi] into *out; 0 for anything else (Python decides). */
static int small_int(PyObject *v, int64_t lo, int64_t hi, int64_t *out) {
    const char *s;
    Py_ssize_t n, i = 0;
    int64_t x = 0;
    if (!PyUnicode_CheckExact(v) || !PyUnicode_IS_ASCII(v))
        return 0;
    s = (const char *)PyUnicode_DATA(v);
    n = PyUnicode_GET_LENGTH(v);
    if (n > 0 && (s[0] == '+' || s[0] == '-'))
        i = 1;
    if (n - i < 1 || n - i > 18)  /* 18 digits cannot overflow an int64 */
        return 0;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        x = x * 10 + (s[i] - '0');
    }
    if (s[0] == '-')
        x = -x;
    if (x < lo || x > hi)
        return 0;
    *out = x;
    return 1;
}

/* The value under either key, a new reference; NULL without an exception when absent. */
static PyObject *sh_lookup(PyObject *fields, int i) {
    PyObject *v = PyDict_GetItemWithError(fields, sh_keys[i][0]);
    if (v == NULL && !PyErr_Occurred())
        v = PyDict_GetItemWithError(fields, sh_keys[i][1]);
    return Py_XNewRef(v);
}

/* One field's value (a new reference), or NULL: *slow set when Python must decide (missing,
 * unparsable, out of range, not a plain str), else an exception is set. */
static PyObject *sh_field(PyObject *fields, int i, int *slow) {
    PyObject *v = sh_lookup(fields, i), *out = NULL;
    int kind = SH_KINDS[i];
    int64_t x;
    if (v == NULL && PyErr_Occurred())
        return NULL;
    if (v != NULL && !PyUnicode_CheckExact(v))
        goto slow;
    switch (kind) {
    case F_STR:
        if (v == NULL)
            goto slow;
        return v;
    case F_STR_OR_EMPTY:
        return v != NULL ? v : PyUnicode_New(0, 0);
    case F_BOOL:
        if (v == NULL)
            Py_RETURN_FALSE;
        if (!PyUnicode_IS_ASCII(v))
            goto slow;
        {
            const char *s = (const char *)PyUnicode_DATA(v);
            Py_ssize_t n = PyUnicode_GET_LENGTH(v);
            int yes = (n == 1 && s[0] == '1') || (n == 4 && (s[0] | 32) == 't' && (s[1] | 32) == 'r' &&
                                                  (s[2] | 32) == 'u' && (s[3] | 32) == 'e');
            Py_DECREF(v);
            return PyBool_FromLong(yes);
        }
    default:  /* integers; "" counts as absent */
        if (v == NULL || PyUnicode_GET_LENGTH(v) == 0) {
            Py_XDECREF(v);
            if (kind == F_INT_OR_0)
                return PyLong_FromLong(0);
            if (kind == F_INT_OR_NONE)
                Py_RETURN_NONE;
            *slow = 1;  /* required: Python raises "is missing" */
            return NULL;
        }
        if (kind == F_LONG ? !small_int(v, INT64_MIN, INT64_MAX, &x) : !small_int(v, INT32_MIN, INT32_MAX, &x))
            goto slow;
        out = PyLong_FromLongLong(x);
        Py_DECREF(v);
        return out;
    }
slow:
    Py_XDECREF(v);
    *slow = 1;
    return NULL;
}

/* rocketpy.broker.sendheader.parse_fields for a well-formed header; anything else goes to it. */
static PyObject *send_header(PyObject *self, PyObject *fields) {
    PyObject *values[SH_FIELDS], *result = NULL;
    int i, filled = 0, slow = 0;
    if (SendHeader == NULL || py_send_header == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "rocketpy._speedups.set_send_header() was not called");
        return NULL;
    }
    if (!PyDict_CheckExact(fields))
        return PyObject_CallOneArg(py_send_header, fields);
    for (; filled < SH_FIELDS; filled++) {
        values[filled] = sh_field(fields, filled, &slow);
        if (values[filled] == NULL)
            break;
    }
    if (filled == SH_FIELDS)
        result = PyObject_Vectorcall(SendHeader, values, SH_FIELDS, NULL);
    else if (slow)
        result = PyObject_CallOneArg(py_send_header, fields);
    for (i = 0; i < filled; i++)
        Py_DECREF(values[i]);
    return result;
}

static PyObject *set_send_header(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *keys;
    int i, j;
    if (nargs != 3 || !PyList_CheckExact(args[2]) || PyList_GET_SIZE(args[2]) != SH_FIELDS) {
        PyErr_SetString(PyExc_TypeError, "set_send_header(cls, reference, [(short, long)] * 12)");
        return NULL;
    }
    keys = args[2];
    for (i = 0; i < SH_FIELDS; i++) {
        PyObject *pair = PyList_GET_ITEM(keys, i);
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2 ||
            !PyUnicode_CheckExact(PyTuple_GET_ITEM(pair, 0)) || !PyUnicode_CheckExact(PyTuple_GET_ITEM(pair, 1))) {
            PyErr_SetString(PyExc_TypeError, "set_send_header: keys must be (str, str) pairs");
            return NULL;
        }
    }
    for (i = 0; i < SH_FIELDS; i++)
        for (j = 0; j < 2; j++)
            Py_XSETREF(sh_keys[i][j], Py_NewRef(PyTuple_GET_ITEM(PyList_GET_ITEM(keys, i), j)));
    Py_XSETREF(SendHeader, Py_NewRef(args[0]));
    Py_XSETREF(py_send_header, Py_NewRef(args[1]));
    Py_RETURN_NONE;
}

static inline Py_ssize_t plain_run(const unsigned char *q, const unsigned char *end);  /* _speedups_remoting.h */

/* How many of p[0:n] JSON writes as they are: plain_run's (eight at a time), but not DEL, which the
 * encoder escapes as orjson does (a batch's answer carries a msgId list of over a thousand characters). */
static Py_ssize_t written_run(const unsigned char *p, Py_ssize_t n) {
    Py_ssize_t run = plain_run(p, p + n);
    const unsigned char *del = memchr(p, 0x7F, run);
    return del == NULL ? run : del - p;
}

#include "_speedups_client.h"  /* control_json, put_control: extFields values with \u00XX escapes */
#include "_speedups_pull.h"  /* pull_collect, resident: the store's pull read */

/* ---- JSON frames (rocketpy.remoting.codec.encode) ---------------------------------------- */

/* RemotingCommand's attributes the JSON header holds, and the body. */
enum { J_CODE, J_EXT, J_FLAG, J_LANGUAGE, J_OPAQUE, J_REMARK, J_VERSION, J_BODY, J_ATTRS };
static const char *const J_NAMES[J_ATTRS] = {"code", "ext_fields", "flag", "language", "opaque", "remark",
                                              "version", "body"};
static PyObject *j_names[J_ATTRS];
#define MAX_FRAME_LENGTH (16 * 1024 * 1024)

/* Length of a plain str written as a JSON string (quotes included) with no escapes; -1 when it
 * needs any (non-ASCII, control characters, quote, backslash, DEL) or is not an exact str. */
static Py_ssize_t plain_json(PyObject *s) {
    const unsigned char *p;
    Py_ssize_t n;
    if (!PyUnicode_CheckExact(s) || !PyUnicode_IS_ASCII(s))
        return -1;
    p = (const unsigned char *)PyUnicode_DATA(s);
    n = PyUnicode_GET_LENGTH(s);
    return written_run(p, n) == n ? n + 2 : -1;
}

static char *put_str(char *at, PyObject *s) {  /* after plain_json accepted s */
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    *at++ = '"';
    memcpy(at, PyUnicode_DATA(s), n);
    at += n;
    *at++ = '"';
    return at;
}

static char *put_raw(char *at, const char *s, Py_ssize_t n) {
    memcpy(at, s, n);
    return at + n;
}

/* The decimal text of x into out (room for 20 characters): snprintf's "%lld" without its cost. */
static int i64_text(int64_t x, char *out) {
    char digits[20];
    uint64_t u = x < 0 ? (uint64_t)0 - (uint64_t)x : (uint64_t)x;
    int n = 0, len = 0;
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (x < 0)
        out[len++] = '-';
    while (n)
        out[len++] = digits[--n];
    return len;
}

/* The whole frame of a JSON command whose header is all plain: ints within 64 bits, ASCII text
 * without escapes (but control characters in extFields values, _speedups_client.h), a dict of
 * str extFields, a bytes body; None for anything else (the Python encoder then answers, errors
 * included). Byte-identical to orjson's compact output. */
static PyObject *json_frame(PyObject *self, PyObject *cmd) {
    PyObject *a[J_ATTRS] = {NULL}, *result = NULL, *k, *v;
    char nums[4][24], *at;
    int num_len[4], ints[4] = {J_CODE, J_FLAG, J_OPAQUE, J_VERSION}, i;
    Py_ssize_t header = 0, body, pos = 0, n;
    for (i = 0; i < J_ATTRS; i++) {
        a[i] = PyObject_GetAttr(cmd, j_names[i]);
        if (a[i] == NULL) {
            PyErr_Clear();
            goto python;
        }
    }
    for (i = 0; i < 4; i++) {
        int64_t x;
        if (!PyLong_CheckExact(a[ints[i]]) || !I64_OK(a[ints[i]], &x))
            goto python;
        num_len[i] = i64_text(x, nums[i]);
    }
    if (!PyBytes_CheckExact(a[J_BODY]) || !PyDict_CheckExact(a[J_EXT]) || (n = plain_json(a[J_LANGUAGE])) < 0)
        goto python;
    /* {"code":N,"extFields":{...},"flag":N,"language":"L","opaque":N,"remark":"R",
       "serializeTypeCurrentRPC":"JSON","version":N} */
    header = 8 + num_len[0] + 8 + num_len[1] + 12 + n + 10 + num_len[2] + 33 + 11 + num_len[3] + 1;
    if (a[J_REMARK] != Py_None) {
        if ((n = plain_json(a[J_REMARK])) < 0)
            goto python;
        header += 10 + n;
    }
    if (PyDict_GET_SIZE(a[J_EXT]) > 0) {
        header += 14;  /* "extFields":{}, */
        while (PyDict_Next(a[J_EXT], &pos, &k, &v)) {
            Py_ssize_t kn = plain_json(k), vn = control_json(v);  /* a send's properties: \x01, \x02 */
            if (kn < 0 || vn < 0)
                goto python;
            header += kn + vn + 2;  /* ':' and ',' or, after the last, the closing '}' */
        }
    }
    body = PyBytes_GET_SIZE(a[J_BODY]);
    if (header > 0xFFFFFF || 4 + header + body > MAX_FRAME_LENGTH)
        goto python;
    result = PyBytes_FromStringAndSize(NULL, 8 + header + body);
    if (result == NULL)
        goto done;
    at = PyBytes_AS_STRING(result);
    put_i32((unsigned char *)at, (int32_t)(4 + header + body));
    put_i32((unsigned char *)at + 4, (int32_t)header);  /* serialize type 0 (JSON) in the top byte */
    at += 8;
    at = put_raw(at, "{\"code\":", 8);
    at = put_raw(at, nums[0], num_len[0]);
    if (PyDict_GET_SIZE(a[J_EXT]) > 0) {
        int first = 1;
        at = put_raw(at, ",\"extFields\":{", 14);
        pos = 0;  /* no Python code ran since the first pass: the dict is unchanged */
        while (PyDict_Next(a[J_EXT], &pos, &k, &v)) {
            if (!first)
                *at++ = ',';
            first = 0;
            at = put_str(at, k);
            *at++ = ':';
            at = put_control(at, v);
        }
        *at++ = '}';
    }
    at = put_raw(at, ",\"flag\":", 8);
    at = put_raw(at, nums[1], num_len[1]);
    at = put_raw(at, ",\"language\":", 12);
    at = put_str(at, a[J_LANGUAGE]);
    at = put_raw(at, ",\"opaque\":", 10);
    at = put_raw(at, nums[2], num_len[2]);
    if (a[J_REMARK] != Py_None) {
        at = put_raw(at, ",\"remark\":", 10);
        at = put_str(at, a[J_REMARK]);
    }
    at = put_raw(at, ",\"serializeTypeCurrentRPC\":\"JSON\"", 33);
    at = put_raw(at, ",\"version\":", 11);
    at = put_raw(at, nums[3], num_len[3]);
    *at++ = '}';
    at = put_raw(at, PyBytes_AS_STRING(a[J_BODY]), body);
    if (at != PyBytes_AS_STRING(result) + 8 + header + body) {  /* a length above is wrong: never send it */
        Py_CLEAR(result);
        PyErr_SetString(PyExc_SystemError, "rocketpy._speedups.json_frame: length mismatch");
    }
    goto done;
python:
    result = Py_NewRef(Py_None);
done:
    for (i = 0; i < J_ATTRS; i++)
        Py_XDECREF(a[i]);
    return result;
}

/* ---- decoded JSON headers (rocketpy.remoting.codec._from_map) ---------------------------- */

enum { M_CODE, M_VERSION, M_OPAQUE, M_FLAG, M_LANGUAGE, M_REMARK, M_EXT, M_KEYS };
static const char *const M_NAMES[M_KEYS] = {"code", "version", "opaque", "flag", "language", "remark",
                                             "extFields"};
static PyObject *m_names[M_KEYS], *str_java, *zero, *RemotingCommand;

static PyObject *set_command_type(PyObject *self, PyObject *cls) {
    Py_XSETREF(RemotingCommand, Py_NewRef(cls));
    Py_RETURN_NONE;
}

static PyObject *new_command(PyObject *const *fields);  /* _speedups_remoting.h */

/* The RemotingCommand of a decoded header dict whose fields all have their usual types (int
 * code, version, flag; 32-bit opaque; str language and remark; a dict of str extFields);
 * None for anything else, which the Python _from_map checks and refuses. */
static PyObject *command_from_map(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *header, *v[M_KEYS], *call[9], *ext = NULL, *k, *value, *result;
    Py_ssize_t pos = 0;
    int64_t opaque;
    int i;
    if (nargs != 3 || RemotingCommand == NULL) {
        PyErr_SetString(PyExc_TypeError, "command_from_map(header, body, serialize_type) after set_command_type()");
        return NULL;
    }
    header = args[0];
    if (!PyDict_CheckExact(header))
        Py_RETURN_NONE;
    for (i = 0; i < M_KEYS; i++) {  /* borrowed: nothing below runs Python code until the call */
        v[i] = PyDict_GetItemWithError(header, m_names[i]);
        if (v[i] == NULL && PyErr_Occurred())
            return NULL;
    }
    for (i = M_CODE; i <= M_FLAG; i++)
        if (v[i] == NULL ? i == M_CODE : !PyLong_CheckExact(v[i]))
            Py_RETURN_NONE;
    if (v[M_OPAQUE] != NULL && !I32_OK(v[M_OPAQUE], &opaque))
        Py_RETURN_NONE;
    if ((v[M_LANGUAGE] != NULL && !PyUnicode_CheckExact(v[M_LANGUAGE])) ||
        (v[M_REMARK] != NULL && v[M_REMARK] != Py_None && !PyUnicode_CheckExact(v[M_REMARK])))
        Py_RETURN_NONE;
    if (v[M_EXT] == NULL || v[M_EXT] == Py_None) {
        ext = PyDict_New();
        if (ext == NULL)
            return NULL;
    } else {
        if (!PyDict_CheckExact(v[M_EXT]))
            Py_RETURN_NONE;
        while (PyDict_Next(v[M_EXT], &pos, &k, &value))
            if (!PyUnicode_CheckExact(value))
                Py_RETURN_NONE;
        ext = Py_NewRef(v[M_EXT]);
    }
    call[0] = v[M_CODE];
    call[1] = v[M_LANGUAGE] != NULL ? v[M_LANGUAGE] : str_java;
    call[2] = v[M_VERSION] != NULL ? v[M_VERSION] : zero;
    call[3] = v[M_OPAQUE] != NULL ? v[M_OPAQUE] : zero;
    call[4] = v[M_FLAG] != NULL ? v[M_FLAG] : zero;
    call[5] = v[M_REMARK] != NULL ? v[M_REMARK] : Py_None;
    call[6] = ext;
    call[7] = args[1];
    call[8] = args[2];
    for (i = 0; i < 9; i++)  /* own them for the call: __init__ is Python code */
        Py_INCREF(call[i]);
    result = new_command(call);
    for (i = 0; i < 9; i++)
        Py_DECREF(call[i]);
    Py_DECREF(ext);
    return result;
}

/* Intern texts[i] into out[i], those not done yet; -1 with an exception on failure. */
static int intern_array(PyObject **out, const char *const *texts, int n) {
    int i;
    for (i = 0; i < n; i++)
        if (out[i] == NULL && (out[i] = PyUnicode_InternFromString(texts[i])) == NULL)
            return -1;
    return 0;
}

#include "_speedups_attrs.h"  /* turn_attrs: plain attributes through the instance dict */
#include "_speedups_store.h"
#include "_speedups_remoting.h"
#include "_speedups_storeput.h"  /* lone_put: the store service's inline append of one message */
#include "_speedups_chunkput.h"  /* put_encoded: the rest of CommitLog.put_many once its puts are encoded */
#include "_speedups_table.h"  /* send_result_then: the answer to a lone send, to its SendResult */
#include "_speedups_aio.h"  /* syncer_*: the commit log's fdatasync ended on the reactor's epoll */
#include "_speedups_uring.h"  /* uring_*: the same through io_uring */
#include "_speedups_batch.h"  /* write_buffers: a chunk of records into the mapped file */
#include "_speedups_mapped.h"  /* write_zeros: a segment's zeros ahead, 256 KiB a pwrite */
#include "_speedups_producer.h"  /* fire, deliver: an automatic batch's members given their results */

#include "_speedups_answerfirst.h"  /* answer_first: a lone send's answer written before the store's notices */
#include "_speedups_request.h"  /* lone_send, send_now: a lone send request from its command to its answer */
#include "_speedups_loneread.h"  /* lone_read: a read of one whole frame handled from the reactor's turn */
#include "_speedups_lonestore.h"  /* store_put_now, store_answered: the store service's part of a lone send */
#include "_speedups_syncanswer.h"  /* sync_answer_*: a lone SYNC_FLUSH send answered as its sync ends */
#include "_speedups_syncwrite.h"  /* syncer_direct: that answer written by the sync thread itself */
#include "_speedups_clientsend.h"  /* client_lone_send: a lone send from Producer.send to the socket in C */
#include "_speedups_reactor.h"  /* reactor_turn: LeanEPollReactor's turn (rocketpy/remoting/reactor.py) */

/* ---- setup ------------------------------------------------------------------------------ */

/* Find MessageExt's slot offsets; any surprise leaves use_slots at 0 (the class is called). */
static void find_slots(void) {
    use_slots = member_offsets(MessageExt, field_names, N_FIELDS, slot_offsets);  /* _speedups_remoting.h */
}

static PyObject *set_inline_bound(PyObject *self, PyObject *reference) {
    Py_XSETREF(py_inline_bound, Py_NewRef(reference));
    Py_RETURN_NONE;
}

static PyObject *setup(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"record_error", "message_ext", "decode_record", "decode_records", "encode_record",
                            "patch_record", "batch_entries", "encode_batch", "string_to_properties",
                            "properties_to_string", "java_hash", "tags_code", NULL};
    PyObject *v[12];
    PyObject **targets[12] = {&RecordError, &MessageExt, &py_decode_record, &py_decode_records,
                              &py_encode_record, &py_patch_record, &py_batch_entries, &py_encode_batch,
                              &py_string_to_properties, &py_properties_to_string, &py_java_hash, &py_tags_code};
    int i;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "$OOOOOOOOOOOO", names, &v[0], &v[1], &v[2], &v[3], &v[4],
                                     &v[5], &v[6], &v[7], &v[8], &v[9], &v[10], &v[11]))
        return NULL;
    for (i = 0; i < 12; i++)
        Py_XSETREF(*targets[i], Py_NewRef(v[i]));
    find_slots();
    Py_RETURN_NONE;
}

static PyObject *crc32_fast(PyObject *self, PyObject *arg) {
    /* zlib.crc32(arg) by crc_fast; None when the CPU does not allow it (then encode_record calls zlib). */
    Py_buffer view;
    uint32_t crc;
    if (!crc_fast_ready)
        Py_RETURN_NONE;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    crc = crc_fast((const unsigned char *)view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

static PyMethodDef methods[] = {
    {"crc32_fast", crc32_fast, METH_O, "zlib.crc32 by carry-less multiplication; None without it."},
    {"write_buffers", (PyCFunction)(void (*)(void))write_buffers, METH_FASTCALL,
     "Copy the buffers back to back into a writable buffer from pos; the end."},
    {"write_zeros", (PyCFunction)(void (*)(void))write_zeros, METH_FASTCALL,
     "Zeros over [pos, stop) of fd in 256 KiB pwrites without the GIL; False at the first error."},
    {"setup", (PyCFunction)(void (*)(void))setup, METH_VARARGS | METH_KEYWORDS,
     "Register the Python references (fallbacks) and MessageExt; message.py calls it once."},
    {"string_to_properties", string_to_properties, METH_O, "C string_to_properties."},
    {"properties_to_string", properties_to_string, METH_O, "C properties_to_string."},
    {"java_hash", java_hash, METH_O, "C java_hash."},
    {"tags_code", tags_code, METH_O, "C tags_code."},
    {"key_hash", key_hash, METH_O, "C rocketpy.store.index.key_hash."},
    {"batch_entries", batch_entries, METH_O, "C batch_entries."},
    {"encode_batch", encode_batch, METH_O, "C encode_batch."},
    {"encode_record", encode_record, METH_O, "C encode_record."},
    {"patch_record", (PyCFunction)(void (*)(void))patch_record, METH_FASTCALL, "C patch_record."},
    {"decode_record", (PyCFunction)(void (*)(void))decode_record, METH_FASTCALL | METH_KEYWORDS, "C decode_record."},
    {"decode_records", (PyCFunction)(void (*)(void))decode_records, METH_FASTCALL, "C decode_records."},
    {"inline_bound", (PyCFunction)(void (*)(void))inline_bound, METH_FASTCALL,
     "C rocketpy.store.messagestore.inline_bound."},
    {"set_inline_bound", set_inline_bound, METH_O, "Register inline_bound's Python reference."},
    {"send_header", send_header, METH_O, "C rocketpy.broker.sendheader.parse_fields."},
    {"command_from_map", (PyCFunction)(void (*)(void))command_from_map, METH_FASTCALL,
     "The RemotingCommand of a usual decoded header, or None for rocketpy.remoting.codec._from_map."},
    {"set_command_type", set_command_type, METH_O, "Register RemotingCommand for command_from_map."},
    {"json_frame", json_frame, METH_O,
     "The frame of a JSON command with a plain header, or None for rocketpy.remoting.codec.encode."},
    {"set_send_header", (PyCFunction)(void (*)(void))set_send_header, METH_FASTCALL,
     "Register SendHeader, parse_fields (the reference) and the (short, long) keys of its fields."},
    {"stored_batch", (PyCFunction)(void (*)(void))stored_batch, METH_FASTCALL,
     "The broker's messages of a batch body, or None for its Python loop (rocketpy.broker.send)."},
    REQUEST_METHODS
    CLIENT_METHODS
    STORE_METHODS
    LONE_METHODS
    CHUNK_PUT_METHODS
    REMOTING_METHODS
    CLIENT_LONE_METHODS
    PULL_METHODS
    AIO_METHODS
    SYNC_ANSWER_METHODS
    SYNC_WRITE_METHODS
    URING_METHODS
    PRODUCER_METHODS
    CLIENTSEND_METHODS
    REACTOR_METHODS
    LONE_READ_METHODS
    LONE_STORE_METHODS
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "rocketpy._speedups",
                                    "Optional C versions of rocketpy's hot pure functions.", -1, methods};

PyMODINIT_FUNC PyInit__speedups(void) {
    PyObject *zlib;
    int i;
    for (i = 0; i < N_FIELDS; i++) {
        field_names[i] = PyUnicode_InternFromString(FIELD_NAMES[i]);
        if (field_names[i] == NULL)
            return NULL;
    }
    for (i = 0; i < J_ATTRS; i++) {
        j_names[i] = PyUnicode_InternFromString(J_NAMES[i]);
        if (j_names[i] == NULL)
            return NULL;
    }
    for (i = 0; i < M_KEYS; i++) {
        m_names[i] = PyUnicode_InternFromString(M_NAMES[i]);
        if (m_names[i] == NULL)
            return NULL;
    }
    str_java = PyUnicode_InternFromString("JAVA");
    zero = PyLong_FromLong(0);
    if (str_java == NULL || zero == NULL)
        return NULL;
    str_wait = PyUnicode_InternFromString("WAIT");
    str_cluster = PyUnicode_InternFromString("CLUSTER");
    str_false = PyUnicode_InternFromString("false");
    str_delay = PyUnicode_InternFromString("DELAY");  /* MessageConst.DELAY_TIME_LEVEL */
    str_timer_at = PyUnicode_InternFromString("TIMER_DELIVER_MS");  /* MessageConst.TIMER_* */
    str_timer_sec = PyUnicode_InternFromString("TIMER_DELAY_SEC");
    str_timer_ms = PyUnicode_InternFromString("TIMER_DELAY_MS");
    str_keys = PyUnicode_InternFromString("KEYS");
    str_space = PyUnicode_InternFromString(" ");
    if (str_wait == NULL || str_cluster == NULL || str_false == NULL || str_delay == NULL || str_keys == NULL ||
        str_space == NULL || str_timer_at == NULL || str_timer_sec == NULL || str_timer_ms == NULL)
        return NULL;
    zlib = PyImport_ImportModule("zlib");
    if (zlib == NULL)
        return NULL;
    crc_setup();
    zlib_crc32 = PyObject_GetAttrString(zlib, "crc32");
    Py_DECREF(zlib);
    if (zlib_crc32 == NULL)
        return NULL;
    return PyModule_Create(&module);
}
