/* The store's per-record put work in C, included once by rocketpy/_speedups.c (doc/store.md,
 * "Compiled accelerator"): place_chunk (the first loop of CommitLog._write_chunk: queue
 * offsets, record patches, the messages' store fields, message ids) and dispatch_chunk
 * (CommitLog.dispatch for the consume queues and the index: one 20-byte consume-queue entry and
 * the index entries of UNIQ_KEY and KEYS per record).
 *
 * As in the rest of the module, the Python code is the reference. place_chunk changes nothing
 * and returns None unless every record of the chunk is well formed (the caller then runs its
 * Python loop); dispatch_chunk hands each record it cannot take whole (a schedule or
 * transaction record, a queue or index file to create, a duplicate, a gap, an unusual type) to
 * the Python dispatch, in order, after writing back what it has cached. The bytes written are
 * those of the Python code (tests/store/test_store_speedups.py compares the files).
 *
 * Uses from _speedups.c: get_i32, put_i32, put_i64, as_int64 (I32_OK, I64_OK), java_hash_span,
 * encode_record, str_delay, MessageExt, use_slots and slot_offsets. */

#define CQ_UNIT 20
#define INDEX_HEADER 40
#define INDEX_ENTRY 20
#define SCHEDULE_TOPIC_NAME "SCHEDULE_TOPIC_XXXX"  /* their tags codes are delivery times: Python */
#define TIMER_TOPIC_NAME "rmq_sys_wheel_timer"
#define SLOT(msg, field) (*(PyObject **)((char *)(msg) + slot_offsets[field]))
/* MessageExt's fields (FIELD_NAMES' order) */
enum { F_TOPIC = 0, F_BODY = 1, F_PROPERTIES = 3, F_QUEUE_ID = 4, F_SYS_FLAG = 5, F_STORE_TIMESTAMP = 8, F_STORE_HOST = 9, F_QUEUE_OFFSET = 12,
       F_COMMIT_LOG_OFFSET = 13, F_STORE_SIZE = 14 };

/* Attribute names, interned on first use. */
enum { S_TABLE, S_FILES, S_MAPPED_FILES, S_WROTE, S_COMMITTED, S_FROM, S_FILE_SIZE, S_DATA, S_MAX_PHYSIC,
       S_LOGICS_TS, S_INDEX_COUNT, S_MAX_ENTRIES, S_SLOTS, S_ENTRIES_AT, S_MAPPED, S_BEGIN_TS, S_END_TS,
       S_BEGIN_PHY, S_END_PHY, S_HASH_SLOT_COUNT, S_DIRTY, S_TAGS, S_KEYS, S_UNIQ_KEY, N_STORE_NAMES };
static const char *const STORE_NAMES[N_STORE_NAMES] = {
    "_table", "files", "mapped_files", "wrote_position", "committed_position", "file_from_offset", "file_size",
    "data", "max_physic_offset", "logics_msg_timestamp", "index_count", "max_entries", "slots", "_entries_at",
    "mapped", "begin_timestamp", "end_timestamp", "begin_phy_offset", "end_phy_offset", "hash_slot_count",
    "_dirty", "TAGS", "KEYS", "UNIQ_KEY"};
static PyObject *store_names[N_STORE_NAMES];

static int store_names_ready(void) {
    int i;
    if (store_names[0] != NULL)
        return 1;
    for (i = 0; i < N_STORE_NAMES; i++)
        if ((store_names[i] = PyUnicode_InternFromString(STORE_NAMES[i])) == NULL)
            return 0;
    return 1;
}

/* ---- place_chunk ------------------------------------------------------------------------ */

/* One put of a chunk: its messages and records (borrowed): a bytearray per message, or one
 * holding them all back to back (encode_puts' batches). */
static int chunk_put(PyObject *item, PyObject **msgs, PyObject **bufs) {
    if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 4)
        return 0;
    *msgs = PyTuple_GET_ITEM(item, 1);
    *bufs = PyTuple_GET_ITEM(item, 2);
    return (PyList_CheckExact(*msgs) || PyTuple_CheckExact(*msgs)) && PyList_CheckExact(*bufs) &&
           (PySequence_Fast_GET_SIZE(*msgs) == PyList_GET_SIZE(*bufs) ||
            (PyList_GET_SIZE(*bufs) == 1 && PySequence_Fast_GET_SIZE(*msgs) > 1));
}

/* The j-th record of a put of n messages (chunk_put's bufs), from *at on in its buffer: its bytes
 * and size; the buffer when the record starts one (0 when it is not a bytearray, or the record
 * does not hold the fixed fields or overruns it). *at moves past the record. */
static int record_in(PyObject *bufs, Py_ssize_t n, Py_ssize_t j, Py_ssize_t *at, unsigned char **p, int64_t *size,
                     PyObject **starts) {
    int shared = n > 1 && PyList_GET_SIZE(bufs) == 1;  /* the put's records back to back: sizes from their fields */
    PyObject *buf = PyList_GET_ITEM(bufs, shared ? 0 : j);
    Py_ssize_t len;
    if (!PyByteArray_CheckExact(buf))
        return 0;
    if (!shared || j == 0)
        *at = 0;
    len = PyByteArray_GET_SIZE(buf) - *at;
    *p = (unsigned char *)PyByteArray_AS_STRING(buf) + *at;
    *size = !shared ? len : (len >= 4 ? get_i32(*p) : 0);
    *starts = *at == 0 ? buf : NULL;
    if (*size < FIXED_V4 || *size > len)
        return 0;
    *at += (Py_ssize_t)*size;
    return 1;
}

/* Is the message one place_chunk can take: a slotted MessageExt with a str topic and 32-bit
 * queue id and system flag? */
static int placeable(PyObject *msg) {
    int64_t v;
    return use_slots && Py_IS_TYPE(msg, (PyTypeObject *)MessageExt) && SLOT(msg, F_TOPIC) != NULL &&
           PyUnicode_CheckExact(SLOT(msg, F_TOPIC)) && SLOT(msg, F_QUEUE_ID) != NULL &&
           PyLong_CheckExact(SLOT(msg, F_QUEUE_ID)) && I32_OK(SLOT(msg, F_QUEUE_ID), &v) && SLOT(msg, F_SYS_FLAG) != NULL && I32_OK(SLOT(msg, F_SYS_FLAG), &v);
}

/* slot = value (a new reference, may be NULL after a failed allocation: then -1). */
static int set_slot(PyObject *msg, int field, PyObject *value) {
    if (value == NULL)
        return -1;
    Py_XSETREF(SLOT(msg, field), value);
    return 0;
}

/* host (ASCII) followed by the offset as 16 upper-case hex digits: offset_msg_id's form. */
static PyObject *offset_id(PyObject *host, int64_t offset) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(host);
    PyObject *id = PyUnicode_New(n + 16, 127);
    char *p;
    int i;
    if (id == NULL)
        return NULL;
    p = PyUnicode_DATA(id);
    memcpy(p, PyUnicode_DATA(host), n);
    for (i = 15; i >= 0; i--, offset = (int64_t)((uint64_t)offset >> 4))
        p[n + i] = "0123456789ABCDEF"[offset & 15];
    return id;
}

/* The queue table's key "topic-queueId" (CommitLog._place's f"{topic}-{queue_id}"), as PyUnicode_FromFormat("%U-%lld")
 * gives it: built directly for ASCII text, the usual topic; NULL with an exception. */
static PyObject *queue_key(PyObject *topic, int64_t qid) {
    char digits[24];
    uint64_t u = qid < 0 ? -(uint64_t)qid : (uint64_t)qid;
    Py_ssize_t n = PyUnicode_GET_LENGTH(topic), d = 0, i;
    PyObject *key;
    char *p;
    if (!PyUnicode_IS_ASCII(topic))
        return PyUnicode_FromFormat("%U-%lld", topic, (long long)qid);
    do
        digits[d++] = (char)('0' + u % 10);
    while ((u /= 10) != 0);
    if (qid < 0)
        digits[d++] = '-';
    if ((key = PyUnicode_New(n + 1 + d, 127)) == NULL)
        return NULL;
    p = PyUnicode_DATA(key);
    memcpy(p, PyUnicode_DATA(topic), n);
    p[n] = '-';
    for (i = 0; i < d; i++)
        p[n + 1 + i] = digits[d - 1 - i];
    return key;
}

/* place_chunk(chunk, table, phys, now, host) -> (phys, undo, records, ids) or None
 * CommitLog._place (the reference): for each put (i, msgs, bufs, total) of chunk and each of its
 * records from commit-log offset phys on: the queue offset from table ("topic-queueId" -> next
 * offset, advanced; 0 for transaction PREPARED and ROLLBACK records), the record patched, the
 * message's queue_offset, commit_log_offset, store_timestamp and store_size set. Returns the
 * end offset, [(key, previous next offset)] to restore if the write fails, every record in
 * order, and each put's message ids. None when a record is not well formed: nothing changed. */
/* table[key] = next (a run of one queue's records ends). */
static int table_set(PyObject *table, PyObject *key, int64_t next) {
    PyObject *value = PyLong_FromLongLong(next);
    int r = value == NULL ? -1 : PyDict_SetItem(table, key, value);
    Py_XDECREF(value);
    return r;
}

static PyObject *place_chunk(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *chunk, *table, *host, *undo = NULL, *seen = NULL, *out = NULL, *ids = NULL, *now_obj;
    PyObject *last_topic_obj = NULL, *key = NULL, *result = NULL, *size_obj = NULL;
    int64_t phys, now, last_qid = -1, last_size = -1, next = 0;  /* next: the run's next queue offset, in table once it ends */
    int in_run = 0;
    Py_ssize_t c, j;
    if (nargs != 5)
        return PyErr_Format(PyExc_TypeError, "place_chunk() takes 5 arguments");
    chunk = args[0], table = args[1], now_obj = args[3], host = args[4];
    if (!PyList_CheckExact(chunk) || !PyDict_CheckExact(table) || !I64_OK(args[2], &phys) ||
        phys < 0 || !I64_OK(now_obj, &now) || !PyUnicode_CheckExact(host) || !PyUnicode_IS_ASCII(host) || MessageExt == NULL)
        Py_RETURN_NONE;
    for (c = 0; c < PyList_GET_SIZE(chunk); c++) {  /* check everything before changing anything */
        PyObject *msgs = NULL, *bufs = NULL, *starts;
        Py_ssize_t at = 0;
        unsigned char *p;
        int64_t size;
        if (!chunk_put(PyList_GET_ITEM(chunk, c), &msgs, &bufs))
            Py_RETURN_NONE;
        for (j = 0; j < PySequence_Fast_GET_SIZE(msgs); j++)
            if (!placeable(PySequence_Fast_GET_ITEM(msgs, j)) ||
                !record_in(bufs, PySequence_Fast_GET_SIZE(msgs), j, &at, &p, &size, &starts))
                Py_RETURN_NONE;
        if (PySequence_Fast_GET_SIZE(msgs) > 1 && PyList_GET_SIZE(bufs) == 1 &&
            at != PyByteArray_GET_SIZE(PyList_GET_ITEM(bufs, 0)))
            Py_RETURN_NONE;  /* one buffer, not exactly the put's records */
    }
    if ((undo = PyList_New(0)) == NULL || (seen = PyDict_New()) == NULL || (out = PyList_New(0)) == NULL ||
        (ids = PyList_New(PyList_GET_SIZE(chunk))) == NULL)
        goto fail;
    for (c = 0; c < PyList_GET_SIZE(chunk); c++) {
        PyObject *msgs = NULL, *bufs = NULL, *put_ids;
        Py_ssize_t at = 0;
        chunk_put(PyList_GET_ITEM(chunk, c), &msgs, &bufs);
        if ((put_ids = PyList_New(PySequence_Fast_GET_SIZE(msgs))) == NULL)
            goto fail;
        PyList_SET_ITEM(ids, c, put_ids);
        for (j = 0; j < PySequence_Fast_GET_SIZE(msgs); j++) {
            PyObject *msg = PySequence_Fast_GET_ITEM(msgs, j), *buf, *topic, *id;
            int64_t qid, sys_flag, queue_offset = 0, size;
            unsigned char *p;
            record_in(bufs, PySequence_Fast_GET_SIZE(msgs), j, &at, &p, &size, &buf);  /* checked above */
            topic = SLOT(msg, F_TOPIC);
            I32_OK(SLOT(msg, F_QUEUE_ID), &qid);
            I32_OK(SLOT(msg, F_SYS_FLAG), &sys_flag);
            if ((sys_flag & 0xC) != 0x4 && (sys_flag & 0xC) != 0xC) {  /* not PREPARED or ROLLBACK */
                if (!in_run || topic != last_topic_obj || qid != last_qid) {  /* a new run: its key's next offset */
                    PyObject *found;
                    if (in_run && table_set(table, key, next) < 0)
                        goto fail;
                    in_run = 0;
                    Py_XSETREF(key, queue_key(topic, qid));
                    if (key == NULL)
                        goto fail;
                    last_topic_obj = topic, last_qid = qid;
                    found = PyDict_GetItemWithError(table, key);  /* borrowed */
                    if (found == NULL && PyErr_Occurred())
                        goto fail;
                    next = 0;
                    if (found != NULL && !I64_OK(found, &next)) {
                        PyErr_SetString(PyExc_TypeError, "the queue offset table holds a non-integer");
                        goto fail;
                    }
                    if (PyDict_GetItemWithError(seen, key) == NULL) {  /* the first offset of a key restores it */
                        PyObject *pair;
                        if (PyErr_Occurred() || PyDict_SetItem(seen, key, Py_None) < 0)
                            goto fail;
                        pair = Py_BuildValue("(OL)", key, (long long)next);
                        if (pair == NULL || PyList_Append(undo, pair) < 0) {
                            Py_XDECREF(pair);
                            goto fail;
                        }
                        Py_DECREF(pair);
                    }
                    in_run = 1;
                }
                queue_offset = next++;
            }
            put_i64(p + 20, queue_offset);
            put_i64(p + 28, phys);
            put_i64(p + 56, now);
            if (size_obj == NULL || last_size != size) {  /* a batch's records often have one size */
                Py_XSETREF(size_obj, PyLong_FromLongLong(size));
                last_size = size;
            }
            if (set_slot(msg, F_QUEUE_OFFSET, PyLong_FromLongLong(queue_offset)) < 0 ||
                set_slot(msg, F_COMMIT_LOG_OFFSET, PyLong_FromLongLong(phys)) < 0 ||
                set_slot(msg, F_STORE_TIMESTAMP, Py_NewRef(now_obj)) < 0 ||
                set_slot(msg, F_STORE_SIZE, Py_XNewRef(size_obj)) < 0)
                goto fail;
            if ((id = offset_id(host, phys)) == NULL)
                goto fail;
            PyList_SET_ITEM(put_ids, j, id);
            if (buf != NULL && PyList_Append(out, buf) < 0)
                goto fail;
            phys += size;
        }
    }
    if (in_run && table_set(table, key, next) < 0)
        goto fail;
    in_run = 0;
    result = Py_BuildValue("(LOOO)", (long long)phys, undo, out, ids);
fail:
    if (in_run) {  /* an error: the offsets given so far stay taken, as one message at a time */
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        if (table_set(table, key, next) < 0)
            PyErr_Clear();
        PyErr_Restore(type, value, traceback);
    }
    Py_XDECREF(undo);
    Py_XDECREF(seen);
    Py_XDECREF(out);
    Py_XDECREF(ids);
    Py_XDECREF(key);
    Py_XDECREF(size_obj);
    return result;
}

/* ---- dispatch_chunk --------------------------------------------------------------------- */

/* An int attribute in [lo, hi] into *out: 1; 0 when missing or another value (no exception). */
static int int_named(PyObject *o, PyObject *name, int64_t lo, int64_t hi, int64_t *out) {
    PyObject *v = plain_get(o, name);
    int ok;
    if (v == NULL) {
        PyErr_Clear();
        return 0;
    }
    ok = as_int64(v, lo, hi, out);
    Py_DECREF(v);
    return ok;
}

static int int_attr(PyObject *o, int name, int64_t lo, int64_t hi, int64_t *out) {
    return int_named(o, store_names[name], lo, hi, out);
}

/* obj.name = v (int); -1 with an exception. */
static int set_int_named(PyObject *o, PyObject *name, int64_t v) {
    return plain_set(o, name, PyLong_FromLongLong(v));
}

static int set_int_attr(PyObject *o, int name, int64_t v) {
    return set_int_named(o, store_names[name], v);
}

/* The last item of o.name (a list), or NULL (no exception) when it is missing or empty; new reference. */
static PyObject *last_of(PyObject *o, int name) {
    PyObject *list = plain_get(o, store_names[name]), *last = NULL;
    if (list == NULL)
        PyErr_Clear();
    else if (PyList_CheckExact(list) && PyList_GET_SIZE(list) > 0)
        last = Py_NewRef(PyList_GET_ITEM(list, PyList_GET_SIZE(list) - 1));
    Py_XDECREF(list);
    return last;
}

/* A writable view of o.data (an mmap) of at least need bytes: 1; 0 (no exception) otherwise. */
static int data_view(PyObject *o, Py_buffer *view, int64_t need) {
    PyObject *data = plain_get(o, store_names[S_DATA]);
    int r;
    if (data == NULL) {
        PyErr_Clear();
        return 0;
    }
    r = PyObject_GetBuffer(data, view, PyBUF_WRITABLE);
    Py_DECREF(data);
    if (r < 0) {  /* closed by retention, or not a buffer: the Python code says what happens */
        PyErr_Clear();
        return 0;
    }
    if (view->len < need) {
        PyBuffer_Release(view);
        return 0;
    }
    return 1;
}

/* What a record needs of a message (references held until record_release, checked). */
typedef struct {
    PyObject *topic, *queue_id, *store_ts_obj, *uniq, *keys;
    int64_t offset, size, queue_offset, store_ts, tags_code;
    Py_ssize_t nkeys;
} Record;

/* The last topic record_of found to be neither the schedule's nor the timer's, the last tags and
 * their code: held, so that the addresses stay theirs. */
static PyObject *plain_topic, *last_tags;
static int64_t last_tags_code;

/* The record of msg for the fast path: 1; 0 when it needs the Python dispatch. */
static int record_of(PyObject *msg, Record *r) {
    PyObject *props, *tags, *k, *value;
    int64_t v, sys_flag;
    uint32_t h;
    Py_ssize_t i, n, pos = 0;
    int i_slot;
    if (!use_slots || !Py_IS_TYPE(msg, (PyTypeObject *)MessageExt))
        return 0;
    for (i_slot = 0; i_slot < N_FIELDS; i_slot++)
        if (SLOT(msg, i_slot) == NULL)
            return 0;
    r->topic = SLOT(msg, F_TOPIC);
    r->queue_id = SLOT(msg, F_QUEUE_ID);
    r->store_ts_obj = SLOT(msg, F_STORE_TIMESTAMP);
    props = SLOT(msg, F_PROPERTIES);
    if (!PyUnicode_CheckExact(r->topic) || !PyDict_CheckExact(props) || !I32_OK(r->queue_id, &v) ||
        !I32_OK(SLOT(msg, F_SYS_FLAG), &sys_flag) || (sys_flag & 0x4) ||  /* PREPARED, ROLLBACK: Python */
        !I64_OK(SLOT(msg, F_COMMIT_LOG_OFFSET), &r->offset) || r->offset < 0 ||
        !I32_OK(SLOT(msg, F_STORE_SIZE), &r->size) || r->size < 0 ||
        !as_int64(SLOT(msg, F_QUEUE_OFFSET), 0, INT64_MAX / CQ_UNIT, &r->queue_offset) ||
        !as_int64(r->store_ts_obj, -((int64_t)1 << 61), (int64_t)1 << 61, &r->store_ts))
        return 0;
    if (r->topic != plain_topic) {  /* the last topic found to be neither of these (a str never changes) */
        if (PyUnicode_CompareWithASCIIString(r->topic, SCHEDULE_TOPIC_NAME) == 0 ||
            PyUnicode_CompareWithASCIIString(r->topic, TIMER_TOPIC_NAME) == 0)
            return 0;
        Py_XSETREF(plain_topic, Py_NewRef(r->topic));
    }
    tags = r->uniq = r->keys = NULL;
    while (PyDict_Next(props, &pos, &k, &value)) {  /* TAGS, UNIQ_KEY, KEYS: one pass, not three look-ups */
        if (!PyUnicode_CheckExact(k))  /* a str subclass might equal one of them: Python */
            return 0;
        if (same_text(k, store_names[S_TAGS]))
            tags = value;
        else if (same_text(k, store_names[S_UNIQ_KEY]))
            r->uniq = value;
        else if (same_text(k, store_names[S_KEYS]))
            r->keys = value;
    }
    r->tags_code = 0;
    if (tags != NULL) {
        if (tags != last_tags) {  /* a producer's messages share their tags (a cached value, property_value) */
            if (!PyUnicode_CheckExact(tags) || !java_hash_span(0, tags, 0, PyUnicode_GET_LENGTH(tags), &h))
                return 0;
            Py_XSETREF(last_tags, Py_NewRef(tags));
            last_tags_code = (int32_t)h;
        }
        r->tags_code = last_tags_code;
    }
    if (r->uniq != NULL && !PyUnicode_CheckExact(r->uniq))
        return 0;
    r->nkeys = r->uniq != NULL;
    if (r->keys != NULL && r->keys != Py_None) {
        int kind;
        const void *data;
        if (!PyUnicode_CheckExact(r->keys))
            return 0;
        kind = PyUnicode_KIND(r->keys), data = PyUnicode_DATA(r->keys), n = PyUnicode_GET_LENGTH(r->keys);
        for (i = 0; i < n; i++)  /* the non-empty words between spaces */
            if (PyUnicode_READ(kind, data, i) != ' ' && (i == 0 || PyUnicode_READ(kind, data, i - 1) == ' '))
                r->nkeys++;
    } else {
        r->keys = NULL;
    }
    Py_INCREF(r->topic);  /* the dispatch reads other objects meanwhile: hold what it uses */
    Py_INCREF(r->queue_id);
    Py_INCREF(r->store_ts_obj);
    Py_XINCREF(r->uniq);
    Py_XINCREF(r->keys);
    return 1;
}

static void record_release(Record *r) {
    Py_DECREF(r->topic);
    Py_DECREF(r->queue_id);
    Py_DECREF(r->store_ts_obj);
    Py_XDECREF(r->uniq);
    Py_XDECREF(r->keys);
}

/* An index file's header fields and layout. */
typedef struct {
    int64_t count, max_entries, slots, entries_at, begin_ts, end_ts, begin_phy, end_phy, hash_slot_count;
} IndexState;

static const int INDEX_FIELDS[9] = {S_INDEX_COUNT, S_MAX_ENTRIES, S_SLOTS, S_ENTRIES_AT, S_BEGIN_TS, S_END_TS,
                                    S_BEGIN_PHY, S_END_PHY, S_HASH_SLOT_COUNT};

/* IndexFile.put_hash for one key: the entry, its slot, the fields (the room was checked). */
static void index_put(IndexState *s, unsigned char *data, uint32_t khash, const Record *r) {
    int64_t slot_at = INDEX_HEADER + (int64_t)(khash % (uint64_t)s->slots) * 4, seconds = 0;
    int32_t prev = get_i32(data + slot_at);
    unsigned char *e = data + s->entries_at + s->count * INDEX_ENTRY;
    if (prev <= 0 || prev > s->count)
        prev = 0;
    if (s->begin_ts > 0) {
        int64_t elapsed = r->store_ts - s->begin_ts;
        seconds = elapsed < 0 ? 0 : elapsed / 1000;
        if (seconds > INT32_MAX)
            seconds = INT32_MAX;
    }
    put_i32(e, (int32_t)khash);
    put_i64(e + 4, r->offset);
    put_i32(e + 12, (int32_t)seconds);
    put_i32(e + 16, prev);
    put_i32(data + slot_at, (int32_t)s->count);
    if (s->count <= 1) {
        s->begin_phy = r->offset;
        s->begin_ts = r->store_ts;
    }
    s->hash_slot_count++;
    s->count++;
    s->end_phy = r->offset;
    s->end_ts = r->store_ts;
}

/* |hashCode| of topic + "#" + key[start:end], Integer.MIN_VALUE -> 0 (index.key_hash). */
static int index_key_hash(uint32_t prefix, PyObject *key, Py_ssize_t start, Py_ssize_t end, uint32_t *out) {
    uint32_t h;
    int32_t v;
    if (!java_hash_span(prefix, key, start, end, &h))
        return 0;
    v = (int32_t)h;
    *out = v == INT32_MIN ? 0 : (uint32_t)(v < 0 ? -v : v);
    return 1;
}

/* What dispatch_chunk keeps between the records of one call: the consume queues and the index
 * file it writes, their fields and mapped views. Nothing else writes them meanwhile (the store's
 * one writer runs this call); the fields go back to the Python objects before any Python
 * dispatch and at the end (flush_cache), and each entry's bytes are in place before that. */
#define CQ_CACHE 8
typedef struct {
    PyObject *cq, *mf;
    Py_buffer view;
    int64_t wrote, from, file_size, max_physic;
} CachedQueue;

typedef struct {
    PyObject *cqs, *index, *table, *logics_ts;
    CachedQueue queues[CQ_CACHE];
    int nqueues;
    PyObject *last_topic, *last_qid;  /* the last record's queue (held) and its cached entry */
    CachedQueue *last_q;
    PyObject *file;  /* the index file, NULL when not loaded */
    Py_buffer iview;
    IndexState s, loaded;  /* the fields now, and as loaded (the ones unchanged are not written back) */
} DispatchCache;

/* Write the cached fields back and drop the cache; -1 with an exception. */
static int flush_cache(DispatchCache *c) {
    int i, r = 0;
    c->last_q = NULL;
    Py_CLEAR(c->last_topic);
    Py_CLEAR(c->last_qid);
    for (i = 0; i < c->nqueues; i++) {
        CachedQueue *q = &c->queues[i];
        PyObject *position = PyLong_FromLongLong(q->wrote);
        if (r == 0 && (position == NULL || plain_set(q->mf, store_names[S_WROTE], Py_NewRef(position)) < 0 ||
                       plain_set(q->mf, store_names[S_COMMITTED], Py_NewRef(position)) < 0 ||
                       set_int_attr(q->cq, S_MAX_PHYSIC, q->max_physic) < 0))
            r = -1;
        Py_XDECREF(position);
        PyBuffer_Release(&q->view);
        Py_DECREF(q->cq);
        Py_DECREF(q->mf);
    }
    c->nqueues = 0;
    if (c->logics_ts != NULL) {
        if (r == 0 && plain_set(c->cqs, store_names[S_LOGICS_TS], Py_NewRef(c->logics_ts)) < 0)
            r = -1;
        Py_CLEAR(c->logics_ts);
    }
    if (c->file != NULL) {
        static const int WRITTEN[6] = {S_INDEX_COUNT, S_BEGIN_TS, S_END_TS, S_BEGIN_PHY, S_END_PHY, S_HASH_SLOT_COUNT};
        int64_t values[6] = {c->s.count, c->s.begin_ts, c->s.end_ts, c->s.begin_phy, c->s.end_phy, c->s.hash_slot_count};
        int64_t loaded[6] = {c->loaded.count, c->loaded.begin_ts, c->loaded.end_ts, c->loaded.begin_phy,
                             c->loaded.end_phy, c->loaded.hash_slot_count};
        for (i = 0; i < 6 && r == 0; i++)
            if (values[i] != loaded[i] && set_int_attr(c->file, WRITTEN[i], values[i]) < 0)
                r = -1;
        if (r == 0 && plain_set(c->file, store_names[S_DIRTY], Py_NewRef(Py_True)) < 0)
            r = -1;
        PyBuffer_Release(&c->iview);
        Py_CLEAR(c->file);
    }
    return r;
}

/* The cached queue cq, loaded when missing; NULL (no exception) when it cannot be written here:
 * no file, or the last file is full (a new one is Python's to create). */
static CachedQueue *cached_queue(DispatchCache *c, PyObject *cq) {
    CachedQueue *q;
    PyObject *files;
    int i;
    for (i = 0; i < c->nqueues; i++)
        if (c->queues[i].cq == cq)
            return &c->queues[i];
    if (c->nqueues == CQ_CACHE && flush_cache(c) < 0)
        return NULL;
    q = &c->queues[c->nqueues];
    files = plain_get(cq, store_names[S_FILES]);
    if (files == NULL) {
        PyErr_Clear();
        return NULL;
    }
    q->mf = last_of(files, S_MAPPED_FILES);
    Py_DECREF(files);
    if (q->mf == NULL)
        return NULL;
    if (!int_attr(cq, S_MAX_PHYSIC, INT64_MIN, INT64_MAX, &q->max_physic) ||
        !int_attr(q->mf, S_WROTE, 0, INT64_MAX / 4, &q->wrote) || !int_attr(q->mf, S_FROM, 0, INT64_MAX / 4, &q->from) ||
        !int_attr(q->mf, S_FILE_SIZE, 0, INT64_MAX / 4, &q->file_size) || !data_view(q->mf, &q->view, q->file_size)) {
        Py_DECREF(q->mf);
        return NULL;
    }
    q->cq = Py_NewRef(cq);
    c->nqueues++;
    return q;
}

/* ConsumeQueue.put's common case: the entry goes at the end of the queue's last file, which has
 * room, exactly where the queue offset says, after the newest record. 1 done, 0 not taken
 * (nothing changed). */
static int cq_put(DispatchCache *c, Record *r) {
    PyObject *queues, *cq;
    CachedQueue *q;
    unsigned char *p;
    if (c->last_q != NULL && r->topic == c->last_topic && r->queue_id == c->last_qid) {
        q = c->last_q;  /* a batch's records go to one queue: its look-ups once */
    } else {
        queues = PyDict_GetItemWithError(c->table, r->topic);  /* borrowed */
        cq = queues != NULL && PyDict_CheckExact(queues) ? PyDict_GetItemWithError(queues, r->queue_id) : NULL;
        if (cq == NULL || (q = cached_queue(c, cq)) == NULL) {
            PyErr_Clear();
            return 0;
        }
        Py_XSETREF(c->last_topic, Py_NewRef(r->topic));
        Py_XSETREF(c->last_qid, Py_NewRef(r->queue_id));
        c->last_q = q;
    }
    if (r->offset + r->size <= q->max_physic || q->wrote + CQ_UNIT > q->file_size ||
        r->queue_offset * CQ_UNIT != q->from + q->wrote)
        return 0;
    p = (unsigned char *)q->view.buf + q->wrote;
    put_i64(p, r->offset);
    put_i32(p + 8, (int32_t)r->size);
    put_i64(p + 12, r->tags_code);
    q->wrote += CQ_UNIT;
    q->max_physic = r->offset + r->size;
    Py_XSETREF(c->logics_ts, Py_NewRef(r->store_ts_obj));
    return 1;
}

/* The newest index file into the cache; 0 (no exception) when there is none or it is unusual. */
static int load_index(DispatchCache *c) {
    PyObject *f = last_of(c->index, S_FILES), *mapped;
    int64_t *fields[9] = {&c->s.count, &c->s.max_entries, &c->s.slots, &c->s.entries_at, &c->s.begin_ts,
                          &c->s.end_ts, &c->s.begin_phy, &c->s.end_phy, &c->s.hash_slot_count};
    int i, ok;
    if (f == NULL)
        return 0;
    for (i = 0; i < 9; i++)
        if (!int_attr(f, INDEX_FIELDS[i], i < 4 ? 0 : -((int64_t)1 << 61), i < 4 ? INT32_MAX : (int64_t)1 << 61,
                      fields[i])) {
            Py_DECREF(f);
            return 0;
        }
    mapped = plain_get(f, store_names[S_MAPPED]);
    if (mapped == NULL)
        PyErr_Clear();
    /* the view covers the header, the slots and every entry */
    ok = mapped != NULL && c->s.slots > 0 && c->s.entries_at >= INDEX_HEADER + c->s.slots * 4 &&
         c->s.hash_slot_count >= INT32_MIN && c->s.hash_slot_count <= INT32_MAX &&
         data_view(mapped, &c->iview, c->s.entries_at + c->s.max_entries * INDEX_ENTRY);
    Py_XDECREF(mapped);
    if (!ok) {
        Py_DECREF(f);
        return 0;
    }
    c->file = f;
    c->loaded = c->s;
    return 1;
}

/* The last topic an index key began with and the hash of topic + "#" (held: the address stays its own). */
static PyObject *prefix_topic;
static uint32_t prefix_hash;

/* IndexService.dispatch's common case: the newest file has room for every key of the record,
 * which is newer than its last one. 1 done, 0 not taken (nothing changed). */
static int index_dispatch(DispatchCache *c, Record *r) {
    IndexState *s = &c->s;
    uint32_t prefix, khash = 0;
    unsigned char *data;
    Py_ssize_t n = r->keys != NULL ? PyUnicode_GET_LENGTH(r->keys) : 0, start, end;
    int kind = r->keys != NULL ? PyUnicode_KIND(r->keys) : 0, pass;
    const void *kd = r->keys != NULL ? PyUnicode_DATA(r->keys) : NULL;
    if (c->file == NULL && !load_index(c))
        return 0;
    if (s->count >= s->max_entries || s->count + r->nkeys > s->max_entries ||
        s->hash_slot_count + r->nkeys > INT32_MAX || r->offset < s->end_phy ||
        (r->offset == s->end_phy && s->end_ts > 0))
        return 0;
    if (r->topic != prefix_topic) {
        if (!java_hash_span(0, r->topic, 0, PyUnicode_GET_LENGTH(r->topic), &prefix))
            return 0;
        Py_XSETREF(prefix_topic, Py_NewRef(r->topic));
        prefix_hash = prefix * 31 + '#';
    }
    prefix = prefix_hash;
    data = c->iview.buf;
    /* every key hashes (no lone surrogate) before anything is written: a first pass, unless the keys
     * are one-byte text, which always hashes */
    pass = (r->uniq == NULL || PyUnicode_KIND(r->uniq) == PyUnicode_1BYTE_KIND) && kind <= PyUnicode_1BYTE_KIND;
    for (; pass < 2; pass++) {
        if (r->uniq != NULL) {
            if (!index_key_hash(prefix, r->uniq, 0, PyUnicode_GET_LENGTH(r->uniq), &khash))
                return 0;
            if (pass)
                index_put(s, data, khash, r);
        }
        for (start = 0; start < n; start = end + 1) {
            for (end = start; end < n && PyUnicode_READ(kind, kd, end) != ' '; end++)
                ;
            if (end > start) {
                if (!index_key_hash(prefix, r->keys, start, end, &khash))
                    return 0;
                if (pass)
                    index_put(s, data, khash, r);
            }
        }
    }
    put_i64(data, s->begin_ts);  /* IndexFile.write_header */
    put_i64(data + 8, s->end_ts);
    put_i64(data + 16, s->begin_phy);
    put_i64(data + 24, s->end_phy);
    put_i32(data + 32, (int32_t)s->hash_slot_count);
    put_i32(data + 36, (int32_t)s->count);
    return 1;
}

/* One record of dispatch_chunk: its entry and keys written here when both go the common way (1),
 * else dispatch(msg) does it after the cache is written back (0); -1 with an exception. dispatch is slow, or
 * when name is not NULL, slow's method name (looked up only then). */
static int dispatch_record(DispatchCache *c, PyObject *msg, PyObject *slow, PyObject *name) {
    Record r;
    int taken = 0;
    Py_INCREF(msg);
    if (PyDict_CheckExact(c->table) && record_of(msg, &r)) {
        taken = cq_put(c, &r);
        if (taken && c->index != Py_None)
            taken = index_dispatch(c, &r);
        record_release(&r);
    }
    if (!taken) {  /* the Python dispatch does the record, after the cache is written back */
        PyObject *done = flush_cache(c) < 0 ? NULL
                         : name != NULL ? PyObject_CallMethodOneArg(slow, name, msg) : PyObject_CallOneArg(slow, msg);
        taken = done == NULL ? -1 : 0;
        Py_XDECREF(done);
    }
    Py_DECREF(msg);
    return taken;
}

/* dispatch_chunk(chunk, consume_queues, index, dispatch) -> None
 * CommitLog.dispatch of every record of chunk's puts (i, msgs, bufs, total), in order, for the
 * dispatchers [consume_queues] (index None) or [consume_queues, index]: a record's consume-queue
 * entry and index keys are written here when both go the common way, otherwise dispatch(msg)
 * (the Python method) does the record. (If only the entry was written, the Python consume
 * queue then ignores it as a duplicate: it is at or below the queue's newest record.) */
static PyObject *dispatch_chunk(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    DispatchCache c;
    PyObject *chunk, *slow;
    Py_ssize_t i, j;
    int failed = 0;
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "dispatch_chunk() takes 4 arguments");
    chunk = args[0], slow = args[3];
    if (!PyList_CheckExact(chunk))
        return PyErr_Format(PyExc_TypeError, "dispatch_chunk() needs a list of puts");
    if (!store_names_ready())
        return NULL;
    memset(&c, 0, sizeof c);
    c.cqs = args[1], c.index = args[2];
    c.table = plain_get(c.cqs, store_names[S_TABLE]);
    if (c.table == NULL)
        return NULL;
    for (i = 0; i < PyList_GET_SIZE(chunk) && !failed; i++) {
        PyObject *item = PyList_GET_ITEM(chunk, i), *msgs;
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 4 ||
            !(PyList_CheckExact(PyTuple_GET_ITEM(item, 1)) || PyTuple_CheckExact(PyTuple_GET_ITEM(item, 1)))) {
            PyErr_SetString(PyExc_TypeError, "dispatch_chunk() needs (i, msgs, bufs, total) puts");
            failed = 1;
            break;
        }
        msgs = Py_NewRef(PyTuple_GET_ITEM(item, 1));
        for (j = 0; j < PySequence_Fast_GET_SIZE(msgs) && !failed; j++)
            failed = dispatch_record(&c, PySequence_Fast_GET_ITEM(msgs, j), slow, NULL) < 0;
        Py_DECREF(msgs);
    }
    if (failed) {  /* write back what was done, keeping the exception */
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        if (flush_cache(&c) < 0)
            PyErr_Clear();
        PyErr_Restore(type, value, traceback);
    } else if (flush_cache(&c) < 0) {
        failed = 1;
    }
    Py_DECREF(c.table);
    if (failed)
        return NULL;
    Py_RETURN_NONE;
}

/* ---- encode_puts ------------------------------------------------------------------------ */

/* A batch's records (each message's store_host set first) back to back in one bytearray, *bufs
 * = [it], *total its size: 1 (a malloc and a free per put, not per message); 0, having set
 * nothing, for a lone message or when a message needs the Python encoder (encode_record then
 * takes them one by one); -1 when a record is over max_record, or with an exception. */
static int batch_records(PyObject *msgs, PyObject *host, int64_t max_record, PyObject **bufs, int64_t *total) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(msgs), j, done = 0;
    RecordParts *parts;
    PyObject *buf;
    unsigned char *p;
    int r = -1;
    if (n < 2)
        return 0;
    if ((parts = PyMem_Malloc(n * sizeof *parts)) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (*total = 0; done < n; done++) {
        PyObject *msg = PySequence_Fast_GET_ITEM(msgs, done);
        int got;
        Py_XSETREF(SLOT(msg, F_STORE_HOST), Py_NewRef(host));
        if ((got = record_parts(msg, &parts[done])) <= 0) {
            r = got;
            goto release;
        }
        *total += parts[done].size;
        if (parts[done].size > max_record) {
            done++;
            goto release;
        }
    }
    if ((buf = PyByteArray_FromStringAndSize(NULL, *total)) == NULL)
        goto release;
    for (j = 0, p = (unsigned char *)PyByteArray_AS_STRING(buf); j < n; p += parts[j].size, j++)
        if (!write_record(p, &parts[j])) {  /* releases the part */
            Py_DECREF(buf);
            for (j++; j < n; j++)
                release_parts(&parts[j]);
            PyMem_Free(parts);
            return -1;
        }
    PyMem_Free(parts);
    if ((*bufs = PyList_New(1)) == NULL) {
        Py_DECREF(buf);
        return -1;
    }
    PyList_SET_ITEM(*bufs, 0, buf);
    return 1;
release:
    for (j = 0; j < done; j++)
        release_parts(&parts[j]);
    PyMem_Free(parts);
    return r;
}

/* encode_puts(puts, store_host, max_body, slack, limit) -> [(i, msgs, records, total)] or None
 * The first loop of CommitLog.put_many with CommitLog._encode, when every put is well formed
 * and fits: each message's store_host set and its record encoded (encode_record). None, with
 * nothing but store hosts set (the Python loop sets them again), when a put is empty, a message
 * is unusual or has a delay level or a timer (it moves to another topic), a record or a put is too
 * large, or encoding raises: the Python loop then gives each put its status or exception. */
static PyObject *encode_puts(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *puts, *host, *out = NULL;
    int64_t max_body, slack, limit;
    Py_ssize_t i, j;
    if (nargs != 5)
        return PyErr_Format(PyExc_TypeError, "encode_puts() takes 5 arguments");
    puts = args[0], host = args[1];
    if (!(PyList_CheckExact(puts) || PyTuple_CheckExact(puts)) || !I64_OK(args[2], &max_body) ||
        !I64_OK(args[3], &slack) || !I64_OK(args[4], &limit) || !store_names_ready() || MessageExt == NULL)
        Py_RETURN_NONE;
    for (i = 0; i < PySequence_Fast_GET_SIZE(puts); i++) {  /* check everything before changing anything */
        PyObject *msgs = PySequence_Fast_GET_ITEM(puts, i);
        if (!(PyList_CheckExact(msgs) || PyTuple_CheckExact(msgs)) || PySequence_Fast_GET_SIZE(msgs) == 0)
            Py_RETURN_NONE;
        for (j = 0; j < PySequence_Fast_GET_SIZE(msgs); j++) {
            PyObject *msg = PySequence_Fast_GET_ITEM(msgs, j), *topic, *body, *props, *k, *v;
            Py_ssize_t pos = 0;
            if (!use_slots || !Py_IS_TYPE(msg, (PyTypeObject *)MessageExt))
                Py_RETURN_NONE;
            topic = SLOT(msg, F_TOPIC), body = SLOT(msg, F_BODY), props = SLOT(msg, F_PROPERTIES);
            if (topic == NULL || body == NULL || props == NULL || !PyUnicode_CheckExact(topic) ||
                PyUnicode_GET_LENGTH(topic) > TOPIC_MAX_LENGTH || !PyBytes_CheckExact(body) ||
                PyBytes_GET_SIZE(body) > max_body || !PyDict_CheckExact(props))
                Py_RETURN_NONE;
            while (PyDict_Next(props, &pos, &k, &v))  /* no str subclass (it might equal one), no delay, no timer */
                if (!PyUnicode_CheckExact(k) || same_text(k, str_delay) || same_text(k, str_timer_at) ||
                    same_text(k, str_timer_sec) || same_text(k, str_timer_ms))
                    Py_RETURN_NONE;
        }
    }
    if ((out = PyList_New(PySequence_Fast_GET_SIZE(puts))) == NULL)
        return NULL;
    for (i = 0; i < PySequence_Fast_GET_SIZE(puts); i++) {
        PyObject *msgs = PySequence_Fast_GET_ITEM(puts, i), *bufs, *put;
        int64_t total = 0;
        int shared = batch_records(msgs, host, max_body + slack, &bufs, &total);
        if (shared < 0)
            goto python;
        if (shared)
            goto encoded;
        if ((bufs = PyList_New(PySequence_Fast_GET_SIZE(msgs))) == NULL)
            goto python;
        for (j = 0; j < PySequence_Fast_GET_SIZE(msgs); j++) {
            PyObject *msg = PySequence_Fast_GET_ITEM(msgs, j), *buf;
            Py_XSETREF(SLOT(msg, F_STORE_HOST), Py_NewRef(host));
            buf = encode_record(NULL, msg);
            if (buf == NULL || !PyByteArray_CheckExact(buf) || PyByteArray_GET_SIZE(buf) > max_body + slack) {
                Py_XDECREF(buf);
                Py_DECREF(bufs);
                goto python;
            }
            total += PyByteArray_GET_SIZE(buf);
            PyList_SET_ITEM(bufs, j, buf);
        }
    encoded:
        put = total > limit ? NULL : Py_BuildValue("(nONL)", i, msgs, bufs, (long long)total);
        if (put == NULL) {
            if (total > limit)
                Py_DECREF(bufs);
            goto python;
        }
        PyList_SET_ITEM(out, i, put);
    }
    return out;
python:  /* whatever went wrong, the Python loop meets it again and answers it */
    PyErr_Clear();
    Py_DECREF(out);
    Py_RETURN_NONE;
}

#define STORE_METHODS                                                                                         \
    {"place_chunk", (PyCFunction)(void (*)(void))place_chunk, METH_FASTCALL,                                  \
     "The first loop of rocketpy.store.commitlog.CommitLog._write_chunk, or None for its Python reference."}, \
    {"dispatch_chunk", (PyCFunction)(void (*)(void))dispatch_chunk, METH_FASTCALL,                            \
     "CommitLog.dispatch of a chunk's records to the consume queues and the index."},                     \
    {"encode_puts", (PyCFunction)(void (*)(void))encode_puts, METH_FASTCALL,                                  \
     "The encoded puts of rocketpy.store.commitlog.CommitLog.put_many, or None for its Python loop."},
