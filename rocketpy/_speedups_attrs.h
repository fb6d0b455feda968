/* rocketpy._speedups, an object's plain attributes read and written through its instance dict: included
 * once, before _speedups_store.h, _speedups_storeput.h, _speedups_request.h, _speedups_loneread.h,
 * _speedups_lonestore.h and _speedups_reactor.h, which read the attributes of the store's objects,
 * connections (and their transports), protocols, the reactor and the store service this way. */

/* Plain instance attributes read fast: from the instance's dict (checked once per version of its type: no
 * __getattribute__ or __getattr__, and no data descriptor of the names read) or, when absent there, from its
 * type; anything else through PyObject_GetAttr. The same objects PyObject_GetAttr would give. */
typedef struct {
    PyTypeObject *type;
    unsigned int tag;  /* the type's version when checked; 0: not checked, or not plain */
    PyObject *const *const *names;
    size_t count;
    PyObject *dict;  /* the instance dict during one use (a new reference), or NULL */
    int settable;  /* with a dict: the type's setattr is the generic one (attrs_set writes the dict) */
} turn_attrs;

static void attrs_check(turn_attrs *attrs, PyTypeObject *type) {
    size_t i;
    attrs->type = type;
    attrs->tag = 0;
    attrs->settable = type->tp_setattro == PyObject_GenericSetAttr;
    if (type->tp_getattro != PyObject_GenericGetAttr)
        return;
    for (i = 0; i < attrs->count; i++) {
        PyObject *found = _PyType_Lookup(type, *attrs->names[i]);  /* borrowed; gives the type a version */
        if (found != NULL && Py_TYPE(found)->tp_descr_set != NULL)
            return;
    }
    if (type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG)
        attrs->tag = type->tp_version_tag;
}

/* Start reading obj's attributes; 0, or -1 with an exception. attrs_end ends it. */
static int attrs_begin(turn_attrs *attrs, PyObject *obj) {
    PyTypeObject *type = Py_TYPE(obj);
    attrs->dict = NULL;
    if (type != attrs->type || !(type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) || type->tp_version_tag != attrs->tag)
        attrs_check(attrs, type);
    if (attrs->tag != 0) {
        PyObject *dict = PyObject_GenericGetDict(obj, NULL);
        if (dict == NULL)
            return -1;
        if (PyDict_CheckExact(dict))
            attrs->dict = dict;
        else
            Py_DECREF(dict);
    }
    return 0;
}

static void attrs_end(turn_attrs *attrs) {
    Py_CLEAR(attrs->dict);
}

/* obj.name (one of attrs' names) as a new reference, NULL with an exception */
static PyObject *attrs_get(turn_attrs *attrs, PyObject *obj, PyObject *name) {
    if (attrs->dict != NULL) {
        PyObject *value = PyDict_GetItemWithError(attrs->dict, name), *found;
        if (value != NULL)
            return Py_NewRef(value);
        if (PyErr_Occurred())
            return NULL;
        found = _PyType_Lookup(attrs->type, name);  /* a class attribute that is no descriptor */
        if (found != NULL && Py_TYPE(found)->tp_descr_get == NULL)
            return Py_NewRef(found);
    }
    return PyObject_GetAttr(obj, name);
}

/* obj.name = value (one of attrs' names): into the instance dict when the type's setattr is the generic one
 * (no data descriptor of the name: checked), else PyObject_SetAttr; 0, or -1 with an exception */
static int attrs_set(turn_attrs *attrs, PyObject *obj, PyObject *name, PyObject *value) {
    if (attrs->dict != NULL && attrs->settable)
        return PyDict_SetItem(attrs->dict, name, value);
    return PyObject_SetAttr(obj, name, value);
}

/* The truth of obj.name (one of attrs' names): 1, 0, or -1 with an exception */
static int attrs_true(turn_attrs *attrs, PyObject *obj, PyObject *name) {
    PyObject *v = attrs_get(attrs, obj, name);
    int r;
    if (v == NULL)
        return -1;
    r = v == Py_False || v == Py_None ? 0 : v == Py_True ? 1 : PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

/* Which (type, name) pairs had no data descriptor of name at the type's version: a small table of our own
 * (CPython's method cache, _PyType_Lookup, is shared with every lookup of the interpreter and misses often here).
 * Names are the module's interned strings, alive as long as it is. */
static struct {
    PyTypeObject *type;  /* compared only: another type at the same address has another version */
    unsigned int tag;
    PyObject *name;
} plain_seen[256];

/* 1 when type has no data descriptor of name (so obj.name is its dict's, or a class attribute), else 0 */
static int plain_name(PyTypeObject *type, PyObject *name) {
    size_t h = (((uintptr_t)type >> 4) * 31 + ((uintptr_t)name >> 4)) & 255;
    PyObject *found;
    if (plain_seen[h].type == type && plain_seen[h].name == name && (type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) &&
        type->tp_version_tag == plain_seen[h].tag)
        return 1;
    found = _PyType_Lookup(type, name);  /* borrowed; gives the type a version */
    if (found != NULL && Py_TYPE(found)->tp_descr_set != NULL)
        return 0;
    if (type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG)
        plain_seen[h].type = type, plain_seen[h].tag = type->tp_version_tag, plain_seen[h].name = name;
    return 1;
}

/* obj's instance dict (borrowed) when it has one, an exact dict; else NULL */
static PyObject *plain_dict(PyObject *obj) {
    PyObject **dict = _PyObject_GetDictPtr(obj);
    return dict != NULL && *dict != NULL && PyDict_CheckExact(*dict) ? *dict : NULL;
}

/* obj.name (name one of the module's interned strings) as a new reference, NULL with an exception: what
 * PyObject_GetAttr gives, read from the instance dict when obj's type has the generic getattr and no data
 * descriptor of name, else through PyObject_GetAttr. For objects read a few times each, without a turn_attrs of
 * their names. */
static PyObject *plain_get(PyObject *obj, PyObject *name) {
    PyTypeObject *type = Py_TYPE(obj);
    PyObject *dict, *value;
    if (type->tp_getattro == PyObject_GenericGetAttr && plain_name(type, name) && (dict = plain_dict(obj)) != NULL) {
        if ((value = PyDict_GetItemWithError(dict, name)) != NULL)
            return Py_NewRef(value);
        if (PyErr_Occurred())
            return NULL;
    }
    return PyObject_GetAttr(obj, name);  /* a class attribute, a descriptor, none */
}

/* obj.name = value (a new reference, stolen: NULL after a failed allocation gives -1): into the instance dict
 * when obj's type has the generic setattr and no data descriptor of name, else PyObject_SetAttr; 0, or -1 with an
 * exception */
static int plain_set(PyObject *obj, PyObject *name, PyObject *value) {
    PyTypeObject *type = Py_TYPE(obj);
    PyObject *dict;
    int r;
    if (value == NULL)
        return -1;
    if (type->tp_setattro == PyObject_GenericSetAttr && plain_name(type, name) && (dict = plain_dict(obj)) != NULL)
        r = PyDict_SetItem(dict, name, value);
    else
        r = PyObject_SetAttr(obj, name, value);
    Py_DECREF(value);
    return r;
}
