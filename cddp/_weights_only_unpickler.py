"""cddp.load(weights_only=True): the restricted unpickler of whole-object checkpoints.

Mirrors torch/_weights_only_unpickler.py (torch.load's default since PyTorch 2.6) and the
safe-globals API of torch.serialization (add_safe_globals, get_safe_globals,
clear_safe_globals, safe_globals). What a pickle can make it do:

- name a global (GLOBAL, STACK_GLOBAL): only names in the allowlist below or that the user
  allowlisted resolve, by dictionary lookup — nothing is imported, no attribute is looked up by
  a name the file gives. Modules in _BLOCKED_MODULES are refused even when allowlisted.
- call (REDUCE): only an allowlisted object; each default one through a check of its arguments
  (_CALL_CHECKS) so that no call allocates more than the file's own bytes, iterates a tensor,
  or reaches code other than the callee's. User-allowlisted callables are called as the user
  trusted them. NEWOBJ / NEWOBJ_EX: user-allowlisted classes only. INST, OBJ, EXT1/2/4, PERSID
  (protocols 0-1 and the extension registry) are refused: cddp never writes them.
- BUILD (set an object's state): Tensors, Parameters and dicts get __dict__.update with string
  keys; NumPy arrays and dtypes get __setstate__ only with states of the exact shape NumPy
  writes (checked first); user-allowlisted classes as torch does; anything else, classes
  included (setting a class attribute would patch the process), is refused.
- APPEND(S), SETITEM(S), ADDITEMS: into lists, dicts, sets (or user-allowlisted types) only.
- persistent ids: handed to the caller's persistent_load, which checks them against the file.

The default allowlist, and why each entry is safe:
  collections.OrderedDict, .Counter, .defaultdict   called with a dict or a list of pairs
      (never a tensor or array, which would be iterated); defaultdict's factory one of
      _FACTORIES (builtin types called with no argument).
  builtins.set, .frozenset   called with a list/tuple/set already built from the file.
  builtins.bytearray   called with bytes (or a latin-1 str, protocol 2); never an int size.
  builtins.complex   called with numbers.
  builtins.list/dict/tuple/int/float/str/bool/bytes   values only (defaultdict factories);
      never called through REDUCE.
  _codecs.encode   (str, "latin1") only: how protocol 2 spells bytes.
  numpy.dtype   called with a plain type code (bool, ints, floats, complex, object, fixed-width
      unicode/bytes; no structured dtypes), its BUILD state equal to the one NumPy itself
      writes for that dtype and byte order.
  numpy.ndarray   a value only (the first argument of _reconstruct), never called: a call
      allocates by shape.
  numpy(._)core.multiarray._reconstruct   only as ndarray.__reduce__ writes it:
      (numpy.ndarray, (0,), b'b'), an empty array; its BUILD state is checked before
      ndarray.__setstate__ runs: version 1, shape of non-negative ints, an allowed dtype, and a
      data string of exactly prod(shape) * itemsize bytes (a list of prod(shape) items for
      object arrays) — NumPy then copies what the file holds, nothing more.
  numpy(._)core.multiarray.scalar   (dtype, bytes of exactly itemsize) — a NumPy scalar.
  numpy(._)core.numeric._frombuffer   (bytes, dtype, shape, 'C'|'F') with len == prod * itemsize.
  cddp dtypes (cddp.float32 ...), cddp.device (device() checks its arguments), cddp.Size (a
      tuple of ints), cddp.Tensor and cddp.nn.Parameter (values).
  cddp.serialization's rebuild functions (_rebuild_tensor, _rebuild_parameter,
      _rebuild_subclass, _rebuild_ndarray): they check every argument themselves and make
      views of storages the file holds (bounds checked in C, csrc/core/storage_view.c).

What a pickle cannot make it do: import, getattr, call eval/exec/os.system/subprocess, build
a class it did not allowlist, allocate by a size field (reads come from an in-memory pickle,
so a length field past the end reads what is there; BYTEARRAY8, which pickle's own code
allocates before reading, is replaced), recurse (the opcode loop is iterative;
the loaded object's nesting is checked afterwards, MAX_DEPTH).
"""
import _compat_pickle
import codecs
import pickle
import re
import sys
from collections import Counter, OrderedDict, defaultdict
from struct import unpack

import numpy as np

from ._C import Tensor

__all__ = ["UnpicklingError", "add_safe_globals", "get_safe_globals", "clear_safe_globals",
           "safe_globals"]


class UnpicklingError(pickle.UnpicklingError):
    """weights_only=True refused what a checkpoint asked for (a global, a call, a BUILD). A
    pickle.UnpicklingError, as torch.load raises; the message names what was refused and the
    two ways out."""


# Modules never resolved, even when the user allowlists something from them (torch's list,
# plus the other modules that run programs or code).
_BLOCKED_MODULES = {"sys", "os", "posix", "nt", "subprocess", "pty", "shutil", "socket",
                    "importlib", "runpy", "code", "codeop", "ctypes", "marshal", "pickle",
                    "_pickle", "pickletools", "multiprocessing", "webbrowser"}
_BLOCKED_BUILTINS = {"eval", "exec", "compile", "open", "__import__", "getattr", "setattr",
                     "delattr", "globals", "locals", "vars", "input", "breakpoint", "exit",
                     "quit", "help", "memoryview", "type", "object", "super", "classmethod",
                     "staticmethod", "property"}

UNSAFE_MESSAGE = (
    "cddp.load defaults to `weights_only=True`, as torch.load does since PyTorch 2.6. "
    "Re-running `cddp.load` with `weights_only` set to `False` will likely succeed, but it can "
    "result in arbitrary code execution. Do it only if you got the file from a trusted source.")


def weights_only_message(message, name):
    """torch's wording (torch.serialization's _get_wo_message) around the unpickler's own."""
    where = f" for {name}" if name else ""
    if "was not an allowed global by default" in message:
        return (f"Weights only load failed{where}. This file can still be loaded, to do so you "
                "have two options, do those steps only if you trust the source of the "
                f"checkpoint. \n\t(1) {UNSAFE_MESSAGE}\n\t(2) Alternatively, to load with "
                "`weights_only=True` please check the recommended steps in the following error "
                f"message.\n\tWeightsUnpickler error: {message}")
    return f"Weights only load failed{where}. {UNSAFE_MESSAGE}\n\nWeightsUnpickler error: {message}"


def _short(obj, n=120):
    """repr for an error message, bounded (a forged object's repr may be huge or raise)."""
    try:
        r = repr(obj)
    except Exception:  # noqa: BLE001 — any repr failure: say the type only
        r = f"<{type(obj).__name__}>"
    return r if len(r) <= n else r[:n] + "..."


# ---- the user's allowlist ----------------------------------------------------------------

_user_globals = set()


def _global_name(g):
    if isinstance(g, tuple):
        if len(g) != 2:
            raise ValueError("Expected tuple of length 2 (global, str of callable full path), "
                             f"but got tuple of length: {len(g)}")
        if type(g[1]) is not str:
            raise TypeError("Expected second item in tuple to be str of callable full path, "
                            f"but got: {type(g[1])}")
        return g[1]
    module, qual = getattr(g, "__module__", None), getattr(g, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qual, str):
        raise TypeError(f"{_short(g)} has no __module__/__qualname__: allowlist it as "
                        "(object, 'module.name')")
    return f"{module}.{qual}"


def add_safe_globals(safe_globals):
    """Mark classes/functions (or (object, "module.name") pairs) as safe for weights_only
    loads, as torch.serialization.add_safe_globals. Their names are checked now."""
    if not isinstance(safe_globals, (list, tuple, set)):
        raise TypeError(f"add_safe_globals expects a list, got {type(safe_globals).__name__}")
    for g in safe_globals:
        _global_name(g)
    _user_globals.update(safe_globals)


def get_safe_globals():
    """The user's allowlist (torch.serialization.get_safe_globals)."""
    return list(_user_globals)


def clear_safe_globals():
    """Empty the user's allowlist (torch.serialization.clear_safe_globals)."""
    _user_globals.clear()


class safe_globals:
    """Context manager: allowlist `safe_globals` inside the block only
    (torch.serialization.safe_globals). Entries already allowlisted before stay after."""

    def __init__(self, safe_globals):
        self.safe_globals = list(safe_globals)
        self._added = []

    def __enter__(self):
        for g in self.safe_globals:
            _global_name(g)
        self._added = [g for g in self.safe_globals if g not in _user_globals]
        _user_globals.update(self._added)
        return self

    def __exit__(self, *exc):
        _user_globals.difference_update(self._added)
        return False


def _user_allowed():
    return {_global_name(g): (g[0] if isinstance(g, tuple) else g) for g in _user_globals}


# ---- argument checks of the default callables ------------------------------------------------

_FACTORIES = (list, dict, set, frozenset, tuple, int, float, complex, str, bytes, bool,
              OrderedDict, Counter, defaultdict)
_BUILT = (dict, list, tuple, set, frozenset)      # containers the VM built from the file


def _refuse(func, args, why):
    raise UnpicklingError(f"Trying to call {_short(func)} with arguments {_short(args)}: {why}")


def _is_str(x, *allowed):
    return type(x) is str and x in allowed


def _mapping_arg(func, args):
    if len(args) > 1 or (args and not (isinstance(args[0], dict) or (
            type(args[0]) in (list, tuple) and
            all(type(p) in (list, tuple) and len(p) == 2 for p in args[0])))):
        _refuse(func, args, "expected nothing, a dict or a list of pairs")


def _check_counter(func, args):
    if len(args) > 1 or (args and not isinstance(args[0], dict)):
        _refuse(func, args, "expected nothing or a dict")


def _check_defaultdict(func, args):
    if not args:
        return
    if not (args[0] is None or any(args[0] is f for f in _FACTORIES)):
        _refuse(func, args, "the default factory must be None or a builtin container/number type")
    _mapping_arg(func, args[1:])


def _check_set(func, args):
    if len(args) > 1 or (args and type(args[0]) not in _BUILT):
        _refuse(func, args, "expected nothing or a list/tuple/set")


def _check_bytearray(func, args):
    ok = (not args or (len(args) == 1 and type(args[0]) in (bytes, bytearray)) or
          (len(args) == 2 and type(args[0]) is str and _is_str(args[1], "latin1", "latin-1")))
    if not ok:
        _refuse(func, args, "expected bytes (a size would allocate)")


def _is_number(x):
    return type(x) in (int, float, bool)


def _check_complex(func, args):
    if not (1 <= len(args) <= 2 and all(_is_number(a) for a in args)):
        _refuse(func, args, "expected one or two numbers")


def _check_encode(func, args):
    if not (len(args) == 2 and type(args[0]) is str and _is_str(args[1], "latin1", "latin-1")):
        _refuse(func, args, "only (str, 'latin1'): how protocol 2 writes bytes")


# NumPy type codes np.dtype may be called with: bool, integers, floats, complex, object,
# fixed-width unicode and bytes. No structured ('V', field lists), datetime or subarray dtypes.
_NP_CODE = re.compile(r"(b1|[iu](1|2|4|8)|f(2|4|8|12|16)|c(8|16|24|32)|O[48]|[US]\d{1,9})")


def _check_np_dtype(func, args):
    # (code, align=False, copy=True), as NumPy writes it: copy=True makes a new dtype object,
    # so the BUILD that follows can never reach one of NumPy's shared builtin dtypes
    if not (len(args) == 3 and type(args[0]) is str and _NP_CODE.fullmatch(args[0]) and
            args[1] is False and args[2] is True):
        _refuse(func, args, "only (plain NumPy type code, False, True): no structured dtypes")


def _is_np_dtype(x):
    return type(x).__module__.startswith("numpy") and isinstance(x, np.dtype) and \
        x.fields is None and x.subdtype is None and x.kind in "biufcOUS"


def _is_shape(s, max_dims=64):
    return type(s) is tuple and len(s) <= max_dims and \
        all(type(d) is int and d >= 0 for d in s)


def _check_reconstruct(func, args):
    if not (len(args) == 3 and args[0] is np.ndarray and type(args[1]) is tuple and
            args[1] == (0,) and type(args[2]) in (bytes, str) and args[2] in (b"b", "b")):
        _refuse(func, args, "only (numpy.ndarray, (0,), b'b'), as ndarray.__reduce__ writes it")


def _check_scalar(func, args):
    if not (len(args) in (1, 2) and _is_np_dtype(args[0])):
        _refuse(func, args, "expected an allowed NumPy dtype")
    if args[0].hasobject:
        return
    if not (len(args) == 2 and type(args[1]) is bytes and len(args[1]) == args[0].itemsize):
        _refuse(func, args, f"expected {args[0].itemsize} bytes of data")


def _check_frombuffer(func, args):
    if not (len(args) == 4 and type(args[0]) in (bytes, bytearray) and _is_np_dtype(args[1]) and
            not args[1].hasobject and _is_shape(args[2]) and _is_str(args[3], "C", "F") and
            len(args[0]) == _prod(args[2]) * args[1].itemsize):
        _refuse(func, args, "expected (bytes, dtype, shape, order) with matching sizes")


def _check_size(func, args):
    if not (len(args) == 1 and type(args[0]) in (tuple, list) and
            all(type(d) is int for d in args[0])):
        _refuse(func, args, "expected a tuple of ints")


def _prod(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _np_function(name):
    """numpy._core.multiarray.<name> (NumPy 2) or numpy.core.multiarray.<name> (NumPy 1)."""
    for mod in ("numpy._core.multiarray", "numpy.core.multiarray", "numpy._core.numeric",
                "numpy.core.numeric"):
        m = sys.modules.get(mod)
        if m is not None and hasattr(m, name):
            return getattr(m, name)
    return None


def _default_globals():
    """{"module.name": object} and {object: argument check} of the default allowlist. Built on
    first use (cddp.nn must be importable) and kept: nothing in it changes at run time."""
    global _DEFAULTS
    if _DEFAULTS is not None:
        return _DEFAULTS
    import cddp
    from cddp import serialization as ser
    from cddp.nn.parameter import Parameter
    from cddp._checkpoint_pickle import REBUILD_FUNCTIONS
    names, checks = {}, {}

    def put(obj, check=None, *extra_names):
        for n in (f"{obj.__module__}.{obj.__qualname__}",) + extra_names:
            names[n] = obj
        if check is not None:
            checks[obj] = check

    put(OrderedDict, _mapping_arg)
    put(Counter, _check_counter)
    put(defaultdict, _check_defaultdict)
    put(set, _check_set)
    put(frozenset, _check_set)
    put(bytearray, _check_bytearray)
    put(complex, _check_complex)
    for t in (list, dict, tuple, int, float, str, bool, bytes):
        put(t)                              # values only: no check entry = never called
    names["_codecs.encode"] = codecs.encode
    checks[codecs.encode] = _check_encode
    put(np.dtype, _check_np_dtype)
    names["numpy.ndarray"] = np.ndarray
    for fn, check in (("_reconstruct", _check_reconstruct), ("scalar", _check_scalar),
                      ("_frombuffer", _check_frombuffer)):
        f = _np_function(fn)
        if f is not None:
            mod = "numeric" if fn == "_frombuffer" else "multiarray"
            for core in ("numpy.core", "numpy._core"):
                names[f"{core}.{mod}.{fn}"] = f
            checks[f] = check
    for dt in ser._DTYPES:
        names[f"cddp.{dt}"] = getattr(cddp, dt)
    put(cddp.device, lambda func, args: None)   # device() checks its own arguments
    put(cddp.Size, _check_size)
    put(cddp.Tensor)
    put(Parameter)
    for f in REBUILD_FUNCTIONS:
        put(f, lambda func, args: None)         # they check their own arguments
    _DEFAULTS = (names, checks)
    return _DEFAULTS


_DEFAULTS = None


# ---- the unpickler -----------------------------------------------------------------------

def _refused_opcode(name):
    def load(self):
        raise UnpicklingError(f"Unsupported operand {name}: protocol 0/1 object building and "
                              "the extension registry are not allowed with weights_only")
    return load


class WeightsUnpickler(pickle._Unpickler):
    """The pure-Python unpickler with the risky opcodes replaced (module docstring). The opcode
    loop is CPython's own; reads come from the in-memory pickle of a checkpoint."""

    dispatch = dict(pickle._Unpickler.dispatch)

    def __init__(self, file, persistent_load, **kwargs):
        super().__init__(file, **kwargs)
        self._persistent_load = persistent_load
        self._names, self._checks = _default_globals()
        self._user = _user_allowed()
        self._user_types = {v for v in self._user.values() if isinstance(v, type)}
        self._user_objs = list(self._user.values())

    def persistent_load(self, pid):
        return self._persistent_load(pid)

    def find_class(self, module, name):
        sys.audit("pickle.find_class", module, name)
        if self.proto < 3 and self.fix_imports:
            if (module, name) in _compat_pickle.NAME_MAPPING:
                module, name = _compat_pickle.NAME_MAPPING[(module, name)]
            elif module in _compat_pickle.IMPORT_MAPPING:
                module = _compat_pickle.IMPORT_MAPPING[module]
        full = "".join(c if c.isprintable() else "?" for c in f"{module}.{name}"[:300])
        top = module.split(".")[0]
        if top in _BLOCKED_MODULES or (module == "builtins" and name in _BLOCKED_BUILTINS):
            raise UnpicklingError(f"Trying to load unsupported GLOBAL {full} whose module "
                                  f"{full.split('.')[0]} is blocked.")
        if full in self._user:
            return self._user[full]
        if full in self._names:
            return self._names[full]
        shown = full[len("builtins."):] if full.startswith("builtins.") else full
        if top == "torch":       # allowlisting cannot help: cddp has no such object to build
            raise UnpicklingError(
                f"the file names {shown}, which cddp cannot build (torch writes "
                "torch._utils._rebuild_tensor_v3 for the dtypes cddp lacks: uint16, uint32, "
                "uint64, float8 and complex32 tensors); convert those tensors in torch (e.g. "
                "t.to(torch.float32)) and save again")
        raise UnpicklingError(
            f"Unsupported global: GLOBAL {shown} was not an allowed global by default. Please "
            f"use `cddp.serialization.add_safe_globals([{shown}])` or the "
            f"`cddp.serialization.safe_globals([{shown}])` context manager to allowlist this "
            "global if you trust this class/function.")

    def _is_user(self, obj):
        return any(obj is u for u in self._user_objs)

    def load_reduce(self):
        stack = self.stack
        args = stack.pop()
        func = stack[-1]
        if type(args) is not tuple:
            raise UnpicklingError(f"REDUCE arguments must be a tuple, got {type(args).__name__}")
        if not self._is_user(func):
            check = self._checks.get(func) if _hashable(func) else None
            if check is None:
                raise UnpicklingError(f"Trying to call reduce for unrecognized function "
                                      f"{_short(func)}")
            check(func, args)
        stack[-1] = func(*args)
    dispatch[pickle.REDUCE[0]] = load_reduce

    def _new(self, cls, args, kwargs):
        if not (isinstance(cls, type) and cls in self._user_types):
            raise UnpicklingError("Can only create new object for classes allowlisted via "
                                  f"`add_safe_globals` but got {_short(cls)}")
        if type(args) is not tuple or type(kwargs) is not dict:
            raise UnpicklingError("NEWOBJ arguments must be a tuple (and a dict)")
        self.append(cls.__new__(cls, *args, **kwargs))

    def load_newobj(self):
        args = self.stack.pop()
        cls = self.stack.pop()
        self._new(cls, args, {})
    dispatch[pickle.NEWOBJ[0]] = load_newobj

    def load_newobj_ex(self):
        kwargs = self.stack.pop()
        args = self.stack.pop()
        cls = self.stack.pop()
        self._new(cls, args, kwargs)
    dispatch[pickle.NEWOBJ_EX[0]] = load_newobj_ex

    def load_build(self):
        state = self.stack.pop()
        inst = self.stack[-1]
        tp = type(inst)
        if isinstance(inst, Tensor) and (tp is Tensor or tp in self._names.values() or
                                         tp in self._user_types) \
                or tp in (OrderedDict, Counter, defaultdict):
            if not (type(state) is dict and all(type(k) is str for k in state)):
                raise UnpicklingError(f"BUILD of a {tp.__name__}: the state must be a dict "
                                      "with string keys")
            inst.__dict__.update(state)
        elif tp is np.ndarray:
            _check_array_state(inst, state)
            inst.__setstate__(state)
        elif _is_np_dtype(inst):
            _check_dtype_state(inst, state)
            inst.__setstate__(state)
        elif tp in self._user_types:
            _build_user(inst, state)
        else:
            raise UnpicklingError("Can only build Tensor, Parameter, OrderedDict or types "
                                  f"allowlisted via `add_safe_globals`, but got {_short(tp)}")
    dispatch[pickle.BUILD[0]] = load_build

    def _target(self, kinds, op):
        obj = self.stack[-1]
        if type(obj) not in kinds and type(obj) not in self._user_types:
            raise UnpicklingError(f"Can only {op} into {'/'.join(k.__name__ for k in kinds)}, "
                                  f"but got {_short(type(obj))}")
        return obj

    def load_append(self):
        value = self.stack.pop()
        self._target((list,), "APPEND").append(value)
    dispatch[pickle.APPEND[0]] = load_append

    def load_appends(self):
        items = self.pop_mark()
        obj = self._target((list,), "APPENDS")
        if hasattr(obj, "extend"):
            obj.extend(items)
        else:
            for item in items:
                obj.append(item)
    dispatch[pickle.APPENDS[0]] = load_appends

    _DICTS = (dict, OrderedDict, Counter, defaultdict)

    def load_setitem(self):
        value = self.stack.pop()
        key = self.stack.pop()
        self._target(self._DICTS, "SETITEM")[key] = value
    dispatch[pickle.SETITEM[0]] = load_setitem

    def load_setitems(self):
        items = self.pop_mark()
        obj = self._target(self._DICTS, "SETITEMS")
        for i in range(0, len(items) - 1, 2):
            obj[items[i]] = items[i + 1]
    dispatch[pickle.SETITEMS[0]] = load_setitems

    def load_additems(self):
        items = self.pop_mark()
        obj = self._target((set,), "ADDITEMS")
        for item in items:
            obj.add(item)
    dispatch[pickle.ADDITEMS[0]] = load_additems

    def load_bytearray8(self):
        """pickle's own allocates the length the file claims before reading (2^63 bytes from a
        forged field): read what is there first, then copy."""
        n, = unpack("<Q", self.read(8))
        data = self.read(n)
        if len(data) != n:
            raise UnpicklingError(f"BYTEARRAY8 claims {n} bytes; the pickle holds {len(data)}")
        self.append(bytearray(data))
    dispatch[pickle.BYTEARRAY8[0]] = load_bytearray8

    for _op in ("INST", "OBJ", "EXT1", "EXT2", "EXT4", "PERSID"):
        dispatch[getattr(pickle, _op)[0]] = _refused_opcode(_op)
    del _op


def _hashable(x):
    try:
        hash(x)
    except TypeError:
        return False
    return True


def _check_array_state(arr, state):
    """ndarray.__setstate__ runs only on (1, shape, dtype, fortran, data) with data exactly
    what shape x dtype needs: NumPy copies what the file holds and allocates nothing more."""
    ok = (type(state) is tuple and len(state) == 5 and type(state[0]) is int and state[0] == 1
          and _is_shape(state[1], 32) and _is_np_dtype(state[2]) and type(state[3]) is bool)
    if ok:
        n, data = _prod(state[1]), state[4]
        if state[2].hasobject:
            ok = type(data) is list and len(data) == n
        else:
            ok = type(data) in (bytes, bytearray) and len(data) == n * state[2].itemsize
    if not ok or arr.shape != (0,):
        raise UnpicklingError(f"BUILD of a numpy.ndarray with an unexpected state "
                              f"{_short(state)}")


def _check_dtype_state(dt, state):
    """dtype.__setstate__ runs only on the state NumPy itself writes for this dtype in one of
    the byte orders."""
    if _plain(state) and len(state) >= 2 and _is_str(state[1], "<", ">", "|", "="):
        try:
            ref = dt.newbyteorder(state[1]).__reduce__()[2]
        except (ValueError, TypeError):
            ref = None
        if state == ref:
            return
    raise UnpicklingError(f"BUILD of numpy dtype {dt} with an unexpected state {_short(state)}")


def _plain(x):
    """A tuple of None/bool/int/str/nested such tuples: compares without running code."""
    return type(x) is tuple and all(v is None or type(v) in (bool, int, str) or _plain(v)
                                    for v in x)


def _build_user(inst, state):
    """A user-allowlisted class: as torch (and pickle) do it."""
    if hasattr(inst, "__setstate__"):
        inst.__setstate__(state)
        return
    slotstate = None
    if isinstance(state, tuple) and len(state) == 2:
        state, slotstate = state
    if state:
        inst.__dict__.update(state)
    if slotstate:
        for k, v in slotstate.items():
            setattr(inst, k, v)


# ---- nesting of what was loaded --------------------------------------------------------------

def _children(obj, user_types):
    """The objects obj holds, as far as the nesting check counts them: container items, dict
    keys and values, the __dict__ of tensors and of user-allowlisted instances, object arrays."""
    tp = type(obj)
    if isinstance(obj, dict):
        return [*obj.keys(), *obj.values()]
    if isinstance(obj, (list, tuple, set, frozenset)):
        return list(obj)
    if tp is np.ndarray:
        return list(obj.ravel()) if obj.dtype.hasobject else []
    if tp in user_types or isinstance(obj, Tensor):
        d = getattr(obj, "__dict__", None)
        return [d] if d else []
    return []


def _is_node(obj, user_types):
    if isinstance(obj, (dict, list, tuple, set, frozenset)):
        return True
    if type(obj) is np.ndarray:
        return obj.dtype.hasobject
    return (type(obj) in user_types or isinstance(obj, Tensor)) and \
        bool(getattr(obj, "__dict__", None))


def nesting_height(root, limit):
    """The longest chain of containers below root (a cycle's back edge counts once), computed
    without recursion; stops early past `limit` and then returns limit + 1."""
    user_types = {v for v in _user_allowed().values() if isinstance(v, type)}
    height, active = {}, set()
    work = [(root, False)]
    while work:
        obj, finished = work.pop()
        k = id(obj)
        if finished:
            active.discard(k)
            h = 1 + max((height.get(id(c), 0) for c in _children(obj, user_types)), default=0)
            if h > limit:
                return limit + 1
            height[k] = h
            continue
        if k in height or k in active:
            continue
        if not _is_node(obj, user_types):
            continue                       # a leaf: height 0
        kids = [c for c in _children(obj, user_types) if _is_node(c, user_types)]
        active.add(k)
        if len(active) > limit:
            return limit + 1
        work.append((obj, True))
        work.extend((c, False) for c in kids)
    return height.get(id(root), 0)
