/* voxwire._speedups: the decode gate of voxwire._codec, and the flat-object test of
 * voxwire._rules, in C.
 *
 * Optional: built by hatch_build.py where a C compiler is found, and used unless the
 * environment sets VOXWIRE_NO_SPEEDUPS. voxwire._codec.python_gate and
 * voxwire._rules.python_flat_object are the same functions in Python and the reference for
 * them (tests/test_speedups.py holds each pair to one answer). What the gate saves is the Python
 * frame between a caller and msgspec, most of what decode adds to msgspec; the flat-object
 * test is the loop over a free-form object's items, at about 40 ns an item in Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    PyObject *decode;
    PyObject *explain;
    PyObject *other;
    Py_ssize_t quarter;
    Py_ssize_t limit;
} Gate;

/* Whether the n bytes at s are well-formed UTF-8, as Python's strict decoder reads it (no
 * overlong form, no surrogate, nothing past U+10FFFF; Unicode 15, table 3-7): ASCII eight bytes
 * at a time, the rest one sequence at a time. */
static int
valid_utf8(const unsigned char *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        if (i + 8 <= n) {
            uint64_t word;
            memcpy(&word, s + i, 8);
            if (!(word & 0x8080808080808080ULL)) {
                i += 8;
                continue;
            }
        }
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        Py_ssize_t length;
        unsigned char low = 0x80, high = 0xBF; /* the second byte's range */
        if (c >= 0xC2 && c <= 0xDF) {
            length = 2;
        }
        else if (c >= 0xE0 && c <= 0xEF) {
            length = 3;
            if (c == 0xE0) {
                low = 0xA0; /* overlong below */
            }
            else if (c == 0xED) {
                high = 0x9F; /* surrogates above */
            }
        }
        else if (c >= 0xF0 && c <= 0xF4) {
            length = 4;
            if (c == 0xF0) {
                low = 0x90; /* overlong below */
            }
            else if (c == 0xF4) {
                high = 0x8F; /* past U+10FFFF above */
            }
        }
        else {
            return 0;
        }
        if (n - i < length || s[i + 1] < low || s[i + 1] > high) {
            return 0;
        }
        for (Py_ssize_t k = 2; k < length; k++) {
            if ((s[i + k] & 0xC0) != 0x80) {
                return 0;
            }
        }
        i += length;
    }
    return 1;
}

/* explain(exc, data), called as from an `except` block that caught exc (an exception it
 * raises has exc as its __context__, as in Python). */
static PyObject *
gate_explain(Gate *self, PyObject *data)
{
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (traceback != NULL) {
        PyException_SetTraceback(value, traceback);
    }
    PyObject *saved_type, *saved_value, *saved_traceback;
    PyErr_GetExcInfo(&saved_type, &saved_value, &saved_traceback);
    PyErr_SetExcInfo(type, value, traceback); /* steals the three references */
    Py_INCREF(value);
    PyObject *call[2] = {value, data};
    PyObject *result = PyObject_Vectorcall(self->explain, call, 2, NULL);
    Py_DECREF(value);
    PyErr_SetExcInfo(saved_type, saved_value, saved_traceback);
    return result;
}

/* The sender's decode function: a method of the Gate (METH_O, the cheapest call there is). */
static PyObject *
gate_decode(PyObject *self_, PyObject *data)
{
    Gate *self = (Gate *)self_;
    int direct;
    if (PyUnicode_CheckExact(data)) {
        direct = PyUnicode_GET_LENGTH(data) <= self->quarter;
    }
    else if (PyBytes_CheckExact(data)) {
        Py_ssize_t size = PyBytes_GET_SIZE(data);
        direct = size <= self->limit &&
                 valid_utf8((const unsigned char *)PyBytes_AS_STRING(data), size);
    }
    else {
        direct = 0;
    }
    if (!direct) {
        return PyObject_Vectorcall(self->other, &data, 1, NULL);
    }
    PyObject *result = PyObject_Vectorcall(self->decode, &data, 1, NULL);
    if (result != NULL || !PyErr_ExceptionMatches(PyExc_Exception)) {
        return result;
    }
    return gate_explain(self, data);
}

static PyMethodDef gate_decode_def = {
    "decode", gate_decode, METH_O,
    PyDoc_STR("decode(data): one message of the gate's sender, or its ProtocolError."),
};

static int
gate_traverse(Gate *self, visitproc visit, void *arg)
{
    Py_VISIT(self->decode);
    Py_VISIT(self->explain);
    Py_VISIT(self->other);
    return 0;
}

static int
gate_clear(Gate *self)
{
    Py_CLEAR(self->decode);
    Py_CLEAR(self->explain);
    Py_CLEAR(self->other);
    return 0;
}

static void
gate_dealloc(Gate *self)
{
    PyObject_GC_UnTrack(self);
    gate_clear(self);
    PyObject_GC_Del(self);
}

static PyTypeObject GateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "voxwire._speedups.Gate",
    .tp_doc = PyDoc_STR("What one sender's decode function holds (made by gate())."),
    .tp_basicsize = sizeof(Gate),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)gate_traverse,
    .tp_clear = (inquiry)gate_clear,
    .tp_dealloc = (destructor)gate_dealloc,
};

/* gate(*, decode, explain, other, quarter, limit): voxwire._codec.python_gate in C. */
static PyObject *
gate(PyObject *module, PyObject *args, PyObject *kwargs)
{
    (void)module;
    static char *keywords[] = {"decode", "explain", "other", "quarter", "limit", NULL};
    PyObject *decode, *explain, *other;
    Py_ssize_t quarter, limit;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "$OOOnn:gate", keywords, &decode, &explain,
                                     &other, &quarter, &limit)) {
        return NULL;
    }
    Gate *self = PyObject_GC_New(Gate, &GateType);
    if (self == NULL) {
        return NULL;
    }
    Py_INCREF(decode);
    self->decode = decode;
    Py_INCREF(explain);
    self->explain = explain;
    Py_INCREF(other);
    self->other = other;
    self->quarter = quarter;
    self->limit = limit;
    PyObject_GC_Track(self);
    PyObject *function = PyCFunction_New(&gate_decode_def, (PyObject *)self);
    Py_DECREF(self);
    return function;
}

/* flat_object(value): whether value is a dict whose keys are all str and whose values are
 * all str, int, bool or None (exact types): voxwire._rules.flat_object in C. */
static PyObject *
flat_object(PyObject *module, PyObject *value)
{
    (void)module;
    if (!PyDict_CheckExact(value)) {
        Py_RETURN_FALSE;
    }
    Py_ssize_t position = 0;
    PyObject *key, *item;
    while (PyDict_Next(value, &position, &key, &item)) {
        if (!PyUnicode_CheckExact(key)) {
            Py_RETURN_FALSE;
        }
        if (!(PyUnicode_CheckExact(item) || PyLong_CheckExact(item) || PyBool_Check(item) ||
              item == Py_None)) {
            Py_RETURN_FALSE;
        }
    }
    Py_RETURN_TRUE;
}

static PyMethodDef speedups_methods[] = {
    {"gate", (PyCFunction)(void (*)(void))gate, METH_VARARGS | METH_KEYWORDS,
     PyDoc_STR("gate(*, decode, explain, other, quarter, limit): a sender's decode function: "
               "decode(data) for a str of at most quarter characters or UTF-8 bytes of at most "
               "limit, explain(exc, data) if that raises exc, other(data) for anything else.")},
    {"flat_object", flat_object, METH_O,
     PyDoc_STR("flat_object(value): a dict of str keys whose values are all str, int, bool or "
               "None.")},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "voxwire._speedups",
    .m_doc = "The decode gate of voxwire._codec and a rule of voxwire._rules, in C.",
    .m_size = -1,
    .m_methods = speedups_methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    if (PyType_Ready(&GateType) < 0) {
        return NULL;
    }
    return PyModule_Create(&speedups_module);
}
