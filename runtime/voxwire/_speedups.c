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
#include <stddef.h>

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *decode;
    PyObject *explain;
    PyObject *other;
    Py_ssize_t quarter;
} Gate;

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

static PyObject *
gate_call(PyObject *self_, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Gate *self = (Gate *)self_;
    if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "a decoder takes one argument: the message");
        return NULL;
    }
    PyObject *data = args[0];
    if (!PyUnicode_CheckExact(data) || PyUnicode_GET_LENGTH(data) > self->quarter) {
        return PyObject_Vectorcall(self->other, args, 1, NULL);
    }
    PyObject *result = PyObject_Vectorcall(self->decode, args, 1, NULL);
    if (result != NULL || !PyErr_ExceptionMatches(PyExc_Exception)) {
        return result;
    }
    return gate_explain(self, data);
}

static PyObject *
gate_new(PyTypeObject *cls, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"decode", "explain", "other", "quarter", NULL};
    PyObject *decode, *explain, *other;
    Py_ssize_t quarter;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$OOOn:Gate", keywords, &decode, &explain,
                                     &other, &quarter)) {
        return NULL;
    }
    if (PyTuple_GET_SIZE(args) != 0 || kwargs == NULL || PyDict_GET_SIZE(kwargs) != 4) {
        PyErr_SetString(PyExc_TypeError, "Gate() takes decode, explain, other and quarter");
        return NULL;
    }
    Gate *self = (Gate *)cls->tp_alloc(cls, 0);
    if (self == NULL) {
        return NULL;
    }
    self->vectorcall = gate_call;
    Py_INCREF(decode);
    self->decode = decode;
    Py_INCREF(explain);
    self->explain = explain;
    Py_INCREF(other);
    self->other = other;
    self->quarter = quarter;
    return (PyObject *)self;
}

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
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject GateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "voxwire._speedups.Gate",
    .tp_doc = PyDoc_STR("Gate(*, decode, explain, other, quarter)(data): decode(data) for a str "
                        "of at most quarter characters, explain(exc, data) if that raises exc, "
                        "other(data) for anything else."),
    .tp_basicsize = sizeof(Gate),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Gate, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = gate_new,
    .tp_traverse = (traverseproc)gate_traverse,
    .tp_clear = (inquiry)gate_clear,
    .tp_dealloc = (destructor)gate_dealloc,
};

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
    PyObject *module = PyModule_Create(&speedups_module);
    if (module == NULL) {
        return NULL;
    }
    Py_INCREF(&GateType);
    if (PyModule_AddObject(module, "Gate", (PyObject *)&GateType) < 0) {
        Py_DECREF(&GateType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
