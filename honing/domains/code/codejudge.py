"""The code domain's judge, run inside the sandbox (standard library only; honing never imports it).

Two processes: the judge holds the tests, the nonce and stdout; the solution runs in a fresh
interpreter the judge spawns, and each name the tests use from it is a proxy that exchanges plain
data only, so the solution never runs the tests' comparisons and cannot print the verdict. The
judge is not dumpable and its sys.path holds no writable directory (docs/tasks.md, "The modules
in detail"). Input: a JSON object on stdin (`judge`). Output: one line on stdout,
`NONCE VERDICT-JSON`. Not covered: scoring (`honing.domains.code.judge` reads the verdict).
"""

from __future__ import annotations

# Only what the solution's process needs is imported here: it starts afresh for every run, and
# modules such as ast, contextlib, hashlib or typing would cost it tens of milliseconds. The
# judge's own (preloaded in the zygote it is forked from) are imported where they are used.
import _thread
import binascii
import builtins
import itertools
import marshal
import operator
import os
import site
import sys
import types
from _json import encode_basestring_ascii

TYPE_CHECKING = False  # as typing's, without importing typing (mypy reads it as typing's)
if TYPE_CHECKING:
    import ast
    from collections.abc import Callable
    from typing import Any, NoReturn

SOLUTION = "solution.py"
AUDIT_MODULE = "honing_riskaudit"  # the sandbox's risk audit (honing.sandbox.riskaudit.MODULE)
MAX_DEPTH = 100  # nesting of plain data
MAX_ITEMS = 1_000_000  # items of an iterator a call returns
MAX_LINE = 256 << 20  # bytes of one reply of the solution's process
EXIT_WAIT_S = 2.0  # for the solution's process to be reaped once its channel closed
PLAIN = (type(None), bool, int, float, str)
CONTAINERS: dict[type, str] = {list: "l", tuple: "t", set: "s", frozenset: "f"}
BUILD: dict[str, Callable[[list[Any]], Any]] = {
    "l": list, "t": tuple, "s": set, "f": frozenset, "i": iter,
}  # fmt: skip
MUTABLE = (list, dict, set, bytearray)  # arguments a call may change in place
PROGRAM = sys._getframe().f_code  # this program: the solution's process runs it too
# How the solution's process starts: it runs this program's code, which the judge marshals into
# a memfd, argv[1] (the same interpreter runs both; compiling the source costs milliseconds).
BOOT = "import marshal, os, sys; exec(marshal.loads(os.pread(int(sys.argv[1]), 1 << 30, 0)))"


# -- plain data, both sides --------------------------------------------------------------------


class NotPlain(TypeError):
    """A value that is not plain data."""


def encode(value: Any, lenient: bool = False, depth: int = 0) -> Any:
    """`value` as JSON, each container tagged (["t", [...]] for a tuple...). `lenient` (the
    solution's side) first turns what stands for plain data into it: subclasses of plain types,
    numpy scalars, integers with __index__, mappings, iterables (as lists) and iterators
    (materialised, as ["i", [...]]: the tests get an iterator)."""
    if depth > MAX_DEPTH:
        raise NotPlain(f"data nested deeper than {MAX_DEPTH} levels")
    kind = type(value)
    if kind in PLAIN:
        return value
    tag = CONTAINERS.get(kind)
    if tag is not None:
        return [tag, [encode(v, lenient, depth + 1) for v in value]]
    if kind is dict:
        pairs = [[encode(k, lenient, depth + 1), encode(v, lenient, depth + 1)]
                 for k, v in value.items()]  # fmt: skip
        return ["d", pairs]
    if kind is bytes or kind is bytearray:
        return ["b" if kind is bytes else "y", value.hex()]
    if kind is complex:
        return ["c", value.real, value.imag]
    if lenient:
        if hasattr(kind, "__next__") and hasattr(kind, "__iter__"):  # an iterator
            items = list(itertools.islice(value, MAX_ITEMS + 1))
            if len(items) > MAX_ITEMS:
                raise NotPlain(f"an iterator of more than {MAX_ITEMS} items")
            return ["i", [encode(v, lenient, depth + 1) for v in items]]
        plain = _plainer(value)
        if type(plain) is not kind:
            return encode(plain, lenient, depth + 1)
    raise NotPlain(f"a {kind.__module__}.{kind.__qualname__} object")


def _plainer(value: Any) -> Any:
    """The plain value `value` stands for (a subclass's base value, a numpy scalar's value, an
    __index__'s int, a mapping's dict, another iterable's list), or `value` when none."""
    bases: tuple[Callable[[Any], Any], ...] = (
        bool, int, float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset,
    )  # fmt: skip
    for base in bases:
        if isinstance(value, base):  # type: ignore[arg-type]
            return base(value)
    if type(value).__module__.split(".")[0] == "numpy" and getattr(value, "ndim", None) == 0:
        return value.item()
    if hasattr(type(value), "__index__"):
        return operator.index(value)
    if hasattr(value, "keys") and hasattr(value, "__getitem__"):  # a mapping
        return dict(value)
    if hasattr(value, "__iter__"):  # dict views, ranges, deques, arrays...
        return list(itertools.islice(value, MAX_ITEMS))
    return value


def decode(data: Any, depth: int = 0) -> Any:
    """The value `encode` wrote; ValueError for anything it would not have written."""
    if depth > MAX_DEPTH + 1:
        raise ValueError("data nested too deeply")
    if type(data) in PLAIN:
        return data
    if type(data) is not list or not data or type(data[0]) is not str:
        raise ValueError("not plain data")
    tag, body = data[0], data[1:]
    try:
        if tag in BUILD and len(body) == 1 and type(body[0]) is list:
            return BUILD[tag]([decode(v, depth + 1) for v in body[0]])
        if tag == "d" and len(body) == 1 and type(body[0]) is list:
            pairs = [(decode(k, depth + 1), decode(v, depth + 1)) for k, v in body[0]]
            return dict(pairs)
        if tag in ("b", "y") and len(body) == 1 and type(body[0]) is str:
            return (bytes if tag == "b" else bytearray).fromhex(body[0])
        if tag == "c" and len(body) == 2 and all(type(x) in (int, float) for x in body):
            return complex(body[0], body[1])
    except (TypeError, ValueError) as exc:  # an unhashable key, a pair of three...
        raise ValueError(f"not plain data: {exc}") from None
    raise ValueError(f"not plain data (tag {tag[:20]!r})")


def to_json(value: Any) -> str:
    """JSON of a message of the solution's process (dicts with str keys, lists, scalars), as
    json.dumps writes it, without importing json (its import costs the process milliseconds)."""
    kind = type(value)
    if value is None or kind is bool:
        return "null" if value is None else "true" if value else "false"
    if kind is int:
        return int.__repr__(value)
    if kind is float:
        if value != value:
            return "NaN"
        if value in (float("inf"), float("-inf")):
            return "Infinity" if value > 0 else "-Infinity"
        return float.__repr__(value)
    if kind is str:
        return str(encode_basestring_ascii(value))
    if kind is list:
        return "[" + ",".join(map(to_json, value)) + "]"
    if kind is dict:
        return "{" + ",".join(to_json(k) + ":" + to_json(v) for k, v in value.items()) + "}"
    raise TypeError(f"no JSON for {kind.__name__}")


def describe(exc: BaseException) -> str:
    """`ValueError: why`, as python reports an exception (the judge's side)."""
    import traceback

    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


def _plain_describe(exc: BaseException) -> str:
    """`ValueError: why`, without traceback's imports (the solution's side)."""
    kind = type(exc)
    name = kind.__qualname__
    if kind.__module__ not in ("builtins", "__main__"):
        name = f"{kind.__module__}.{name}"
    try:
        said = str(exc)
    except BaseException:
        said = ""
    return f"{name}: {said}" if said else name


# -- the solution's process ----------------------------------------------------------------------


class Watch:
    """What the solution's process should leave alone: the builtins, and the functions of the
    modules a test harness reports through (os, sys, json, marshal, traceback, io). Changing
    them cannot reach the judge; it is reported as tampering."""

    MODULES = ("os", "sys", "json", "marshal", "traceback", "io")

    def __init__(self) -> None:
        self.builtins = dict(vars(builtins))
        self.notes: list[str] = []

    def changed(self) -> list[str]:
        now = vars(builtins)
        missing = object()
        replaced = [f"builtins.{k}" for k, v in self.builtins.items()
                    if now.get(k, missing) is not v]  # fmt: skip
        for name in self.MODULES:  # a function the solution defined, in a module's place
            module = sys.modules.get(name)
            for key, value in list(vars(module).items()) if module is not None else []:
                try:
                    if getattr(value, "__module__", None) == "solution" and callable(value):
                        replaced.append(f"{name}.{key}")
                except Exception:  # an object whose __module__ raises: the solution's too
                    replaced.append(f"{name}.{key}")
        if replaced:
            self.note("the solution replaced " + ", ".join(replaced[:8]))
        return self.notes

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


def serve(requests_fd: int, replies_fd: int, path: list[str]) -> None:
    """The solution's process: load solution.py, say how that went, then answer requests."""
    write, read, loads = os.write, os.read, marshal.loads  # kept before the solution runs

    def send(message: dict[str, Any]) -> None:
        data = (to_json(message) + "\n").encode()
        while data:
            data = data[write(replies_fd, data) :]

    def receive(size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = read(requests_fd, size - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data

    sys.set_int_max_str_digits(0)
    site.setquit()  # exit() and quit(), as the zygote gives every job
    site.setcopyright()
    site.sethelper()
    sys.path[:] = [os.getcwd(), *path]
    watch = Watch()
    module = types.ModuleType("solution")
    module.__file__ = os.path.abspath(SOLUTION)
    sys.modules["solution"] = module
    names = module.__dict__
    error = None
    try:
        with open(SOLUTION, "rb") as f:
            source = f.read()
        exec(compile(source, module.__file__, "exec", dont_inherit=True), names)
    except SystemExit as exc:
        _exit_as(exc)
    except BaseException as exc:
        error = _plain_describe(exc)
    send({"loaded": error is None, "error": error, "tampering": watch.changed()})
    while True:
        try:  # requests come from the judge, trusted: marshal, 8 bytes of length first
            request = loads(receive(int.from_bytes(receive(8), "little")))
        except EOFError:  # the judge is done
            return
        if request.get("op") == "names":
            found = {n: _kind(names[n]) for n in request["names"] if n in names}
            reply: dict[str, Any] = {"names": found}
        else:
            reply = _call(names.get(request["name"]), request, watch)
        reply["tampering"] = watch.changed()
        send(reply)


def _kind(value: Any) -> list[Any]:
    if isinstance(value, types.ModuleType):
        return ["module", str(value.__name__)]
    if callable(value):
        return ["call"]
    try:
        return ["value", encode(value)]
    except (NotPlain, RecursionError):
        return ["other"]


def _call(function: Any, request: dict[str, Any], watch: Watch) -> dict[str, Any]:
    if not callable(function):
        return {"missing": True}
    args, kwargs = decode(request["args"]), decode(request["kwargs"])
    try:
        result = function(*args, **kwargs)
    except SystemExit as exc:
        _exit_as(exc)
    except BaseException as exc:
        return {"raised": _exception_info(exc)}
    if type(result) not in PLAIN and _equals_anything(result):
        watch.note(f"{request['name']}() returned an object ({type(result).__qualname__}) "
                   "equal to anything (its __eq__ is overridden)")  # fmt: skip
    try:
        data = encode(result, lenient=True)
        after = {}  # the arguments it may have changed in place, for the tests to see
        for key, value in [*enumerate(args), *kwargs.items()]:
            if type(value) in MUTABLE:
                after[str(key)] = encode(value, lenient=True)
    except SystemExit as exc:
        _exit_as(exc)
    except (NotPlain, RecursionError) as exc:
        return {"unplain": str(exc)}
    except BaseException as exc:  # an iterator it returned raised
        return {"raised": _exception_info(exc)}
    return {"ok": data, "after": after}


def _equals_anything(value: Any) -> bool:
    probe = object()
    try:
        return bool(value == probe) or not bool(value != probe)
    except BaseException:  # an array's ambiguous truth value, say
        return False


def _exception_info(exc: BaseException) -> list[Any]:
    """[builtin class it derives from, its args as plain data or None, message, its name]."""
    base = next(c for c in type(exc).__mro__ if c.__module__ == "builtins")
    try:
        args = encode(exc.args, lenient=True)
    except BaseException:
        args = None
    try:
        message = str(exc)[:2000]
    except BaseException:
        message = ""
    return [base.__name__, args, message, type(exc).__qualname__]


def _exit_as(exc: SystemExit) -> NoReturn:
    """End the process as python ends on an uncaught SystemExit."""
    code = exc.code
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code & 0xFF
    else:
        print(code, file=sys.stderr)
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105 - contextlib would cost the solution's process an import
            stream.flush()
        except BaseException:
            pass
    os._exit(status)


# -- the judge -----------------------------------------------------------------------------------


class SolutionGone(BaseException):
    """The solution's process cannot answer any more (a BaseException: no test catches it)."""


class NotPlainData(BaseException):
    """The solution answered a call with something that is not plain data."""


class Solution:
    """The solution's process as the judge sees it: calls go out, plain data comes back."""

    def __init__(self, path: list[str]) -> None:
        requests_r, self.requests = os.pipe()
        replies, replies_w = os.pipe()
        os.set_inheritable(requests_r, True)
        os.set_inheritable(replies_w, True)
        program = os.memfd_create("codejudge")
        data = marshal.dumps(PROGRAM)
        while data:
            data = data[os.write(program, data) :]
        os.set_inheritable(program, True)
        paths = binascii.b2a_base64(marshal.dumps(path), newline=False).decode()
        passed = [program, requests_r, replies_w]
        # The sandbox's risk audit follows the solution into its fresh interpreter: the job's
        # risk pipe is passed on, and that process arms the same audit before solution.py runs.
        audit = sys.modules.get(AUDIT_MODULE)
        current = getattr(audit, "CURRENT", None)
        risk = "-"
        if audit is not None and current is not None:
            spec, fd = current
            risk_fd = os.dup(fd)
            os.set_inheritable(risk_fd, True)
            passed.append(risk_fd)
            given = (audit.__file__, spec, risk_fd)
            risk = binascii.b2a_base64(marshal.dumps(given), newline=False).decode()
        # -u: unbuffered, as every job is (PYTHONUNBUFFERED, which -I ignores)
        argv = [sys.executable, "-I", "-S", "-B", "-u", "-c", BOOT, str(program), "serve",
                str(requests_r), str(replies_w), paths, risk]  # fmt: skip
        self.pid = os.posix_spawn(sys.executable, argv, dict(os.environ))
        for fd in passed:
            os.close(fd)
        self.replies = os.fdopen(replies, "rb")
        self.lock = _thread.allocate_lock()
        self.phase = "while solution.py was loading"
        self.ended = ""  # why it cannot answer any more
        self.status: int | None = None
        self.tampering: list[str] = []
        self.faults: list[str] = []  # answers of the current test that could not be used

    def receive(self, *keys: str) -> dict[str, Any]:
        """The next message, which must hold one of `keys` (anything else is tampering)."""
        import json

        if self.ended:
            raise SolutionGone(self.ended)
        try:
            line = self.replies.readline(MAX_LINE)
        except OSError:
            line = b""
        if not line:
            self._end(None)
        if not line.endswith(b"\n"):
            self._end(f"it sent a reply longer than {MAX_LINE} bytes")
        try:
            reply = json.loads(line)
            if not isinstance(reply, dict) or not any(k in reply for k in keys):
                raise ValueError("not the message asked for")
        except ValueError:
            self._tamper("the solution's process wrote into the judge's channel")
            self._end("it wrote into the judge's channel")
        notes = reply.get("tampering")
        for note in notes if isinstance(notes, list) else []:
            self._tamper(str(note)[:300])
        return reply

    def ask(self, request: dict[str, Any], *keys: str) -> dict[str, Any]:
        """Send `request`, return its reply (one at a time: a test may call from threads)."""
        with self.lock:
            if self.ended:
                raise SolutionGone(self.ended)
            data = marshal.dumps(request)
            data = len(data).to_bytes(8, "little") + data
            try:
                while data:
                    data = data[os.write(self.requests, data) :]
            except OSError:  # it closed its end, or ended
                pass
            return self.receive(*keys)

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            request = {"op": "call", "name": name, "args": encode(args), "kwargs": encode(kwargs)}
        except NotPlain as exc:
            raise self._fault(f"the tests passed {exc} to {name}(), and only plain data "
                              "reaches the solution's process") from None  # fmt: skip
        reply = self.ask(request, "ok", "raised", "unplain", "missing")
        if "raised" in reply:
            raise _exception(reply["raised"])
        if "unplain" in reply:
            said = str(reply["unplain"])[:200]
            raise self._fault(f"{name}() returned {said}, which is not plain data (numbers, "
                              "strings, bytes, lists, tuples, dicts, sets)")  # fmt: skip
        if "missing" in reply:
            raise NameError(f"name {name!r} is not defined")
        try:
            result = decode(reply["ok"])
            after = reply.get("after") or {}
            for key, data in after.items():
                target = args[int(key)] if key.isdigit() else kwargs[key]
                _update(target, decode(data))
        except (KeyError, IndexError, ValueError, TypeError, AttributeError, RecursionError):
            self._tamper("the solution's process sent a malformed reply")
            self._end("it sent a malformed reply")
        return result

    def proxy(self, name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            return self.call(name, args, kwargs)

        call.__name__ = call.__qualname__ = name
        return call

    def close(self) -> None:
        """End the solution's process (its tampering notes are in; nothing more is asked)."""
        import signal

        if self.status is None:
            try:  # noqa: SIM105
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:  # already ended: reaped below
                pass
            os.waitpid(self.pid, 0)
            self.status = -signal.SIGKILL

    def _fault(self, text: str) -> NotPlainData:
        self.faults.append(text)
        return NotPlainData(text)

    def _tamper(self, text: str) -> None:
        if text not in self.tampering:
            self.tampering.append(text)

    def _end(self, why: str | None) -> NoReturn:
        """It can answer no more: `why`, or (None) its channel closed; raise SolutionGone."""
        import signal
        import time

        pid, status = 0, 0
        deadline = time.monotonic() + EXIT_WAIT_S
        while why is None and time.monotonic() < deadline:  # it is ending: its status
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                break
            time.sleep(0.005)
        if pid:
            self.status = os.waitstatus_to_exitcode(status)
            if self.status < 0:
                why = f"killed by signal {signal.Signals(-self.status).name}"
            else:
                why = f"exit status {self.status}"
            if self.status == 0:
                self._tamper(f"the solution ended its process (exit status 0) {self.phase}")
        else:
            self.close()
            if why is None:
                why = "it closed its channel to the judge"
                self._tamper(f"the solution closed its channel to the judge {self.phase}")
        self.ended = f"the solution's process ended ({why}) {self.phase}"
        raise SolutionGone(self.ended)


def _update(target: Any, value: Any) -> None:
    """Make `target`, an argument a call changed in place, hold `value` (same type only)."""
    if type(target) is not type(value):
        raise TypeError("an argument changed type")
    if isinstance(target, list | bytearray):
        target[:] = value
    else:
        target.clear()
        target.update(value)


def _exception(info: Any) -> BaseException:
    """The exception the solution raised, as a subclass of the builtin class it derives from.
    StopIteration becomes RuntimeError (as PEP 479 has it for generators): raised out of a call
    that `map` or a generator makes, it would end the tests' iteration early, and
    `all(map(is_prime, primes))` would hold. So do the BaseExceptions that only an interpreter
    raises (KeyboardInterrupt, GeneratorExit; SystemExit ends the solution's process)."""
    if not (isinstance(info, list) and len(info) == 4 and all(
            isinstance(x, str) for x in (info[0], info[2], info[3]))):  # fmt: skip
        return RuntimeError("the solution raised an exception it did not describe")
    name, args, message, qualname = info
    base = getattr(builtins, name, None)
    if not (isinstance(base, type) and issubclass(base, Exception)) or issubclass(
            base, StopIteration | StopAsyncIteration):  # fmt: skip
        return RuntimeError(f"the solution raised {qualname}" + (f": {message}" * bool(message)))
    kind: type[BaseException] = base
    if qualname != base.__name__:  # the solution's own class: named as it is, caught as its base
        kind = type(qualname, (base,), {"__module__": "solution"})
    try:
        found = decode(args) if args is not None else (message,)
        return kind(*found) if type(found) is tuple else kind(message)
    except Exception:
        try:
            return kind(message)
        except Exception:
            return RuntimeError(f"{qualname}: {message}")


def _is_stub(node: ast.stmt) -> bool:
    """A function (or a class with one) left for the solution to write: its body is a docstring,
    `pass`, `...` or `raise NotImplementedError`."""
    import ast

    if isinstance(node, ast.ClassDef):
        return any(_is_stub(n) for n in node.body)
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return False
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]

    def empty(s: ast.stmt) -> bool:
        if isinstance(s, ast.Raise):
            return s.exc is not None and ast.unparse(s.exc).startswith("NotImplementedError")
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant):
            return s.value.value is Ellipsis
        return isinstance(s, ast.Pass)

    return all(empty(s) for s in body)


def given(prompt: str | None, entry_point: str) -> dict[str, Any]:
    """What the prompt defines in full (helpers such as HumanEval's `poly`), run here: the tests
    use the task's own, not the solution's. Stubs and the entry point are the solution's."""
    import ast

    if not prompt:
        return {}
    try:
        tree = ast.parse(prompt)
        space: dict[str, Any] = {"__name__": "prompt", "__builtins__": builtins}
        exec(compile(tree, "prompt.py", "exec", dont_inherit=True), space)
    except BaseException:  # prose, or code that does not run here: nothing is given
        return {}
    left = {n.name for n in tree.body if _is_stub(n)} | {entry_point}  # type: ignore[attr-defined]
    return {k: v for k, v in space.items() if not k.startswith("__") and k not in left}


def free_names(units: list[str]) -> set[str]:
    """Names the tests use without defining them (builtins aside)."""
    import ast

    used: set[str] = set()
    bound: set[str] = set()
    for src in units:
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                (used if isinstance(node.ctx, ast.Load) else bound).add(node.id)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                bound.add(node.name)
            elif isinstance(node, ast.arg):
                bound.add(node.arg)
            elif isinstance(node, ast.Import | ast.ImportFrom):
                bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, ast.ExceptHandler) and node.name:
                bound.add(node.name)
    return used - bound - set(dir(builtins))


class SolutionModule(types.ModuleType):
    """`import solution` / `from solution import f` in the tests: names resolved as proxies."""

    def __init__(self, solution: Solution) -> None:
        super().__init__("solution")
        self._solution = solution

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        found = bind(self._solution, [name])
        if name not in found:
            raise AttributeError(f"module 'solution' has no attribute {name!r}")
        setattr(self, name, found[name])
        return found[name]


def bind(solution: Solution, names: list[str]) -> dict[str, Any]:
    """What the solution defines under `names`, as the tests see it: functions and classes as
    proxies, modules as the judge's own import of them, plain values as copies."""
    import contextlib
    import importlib

    reply = solution.ask({"op": "names", "names": names}, "names")
    kinds = reply.get("names")
    out: dict[str, Any] = {}
    for name, kind in kinds.items() if isinstance(kinds, dict) else []:
        if name not in names or not isinstance(kind, list) or not kind:
            continue
        if kind[0] == "call":
            out[name] = solution.proxy(name)
        elif kind[0] == "module" and len(kind) == 2 and isinstance(kind[1], str):
            with contextlib.suppress(BaseException):  # not importable here: not bound
                out[name] = importlib.import_module(kind[1])
        elif kind[0] == "value" and len(kind) == 2:
            with contextlib.suppress(ValueError):
                out[name] = decode(kind[1])
    return out


def got(src: str, namespace: dict[str, Any]) -> str:
    """What the left side of a failed `assert X == Y` was."""
    import ast

    try:
        test = ast.parse(src).body[-1].test  # type: ignore[attr-defined]
        if isinstance(test, ast.Compare) and [type(o) for o in test.ops] == [ast.Eq]:
            value = eval(compile(ast.Expression(test.left), "tests.py", "eval"), namespace)
            return " (got " + repr(value)[:100] + ")"
    except BaseException:
        pass
    return ""


def run_tests(spec: dict[str, Any]) -> dict[str, Any]:
    """The verdict on solution.py: compiled, passed, total, errors (the first five), tampering."""
    import hashlib

    units: list[str] = spec["units"]
    verdict: dict[str, Any] = {"compiled": True, "passed": 0, "total": len(units), "errors": [],
                               "tampering": []}  # fmt: skip
    errors: list[str] = verdict["errors"]
    try:
        with open(SOLUTION, "rb") as f:
            compile(f.read(), SOLUTION, "exec", dont_inherit=True)
    except SyntaxError as exc:
        verdict["compiled"], verdict["errors"] = False, [describe(exc)]
        return verdict
    except BaseException as exc:  # no solution.py, or source no compiler takes (NUL bytes...)
        verdict["compiled"], verdict["errors"] = False, [f"{SOLUTION}: {describe(exc)}"]
        return verdict
    solution = Solution(sys.path)
    try:
        loaded = solution.receive("loaded")
        solution.phase = "while the tests ran"
        if loaded.get("loaded") is not True:
            errors.append(f"{SOLUTION}: {str(loaded.get('error'))[:500]}")
        else:
            verdict["passed"] = _run_units(units, spec, solution, errors)
    except SolutionGone as exc:
        errors.append(f"{SOLUTION}: {exc}")
    tampering = solution.tampering
    solution.close()
    for path, digest in spec["files"].items():
        try:
            with open(path, "rb") as f:
                now = "changed" if hashlib.sha256(f.read()).hexdigest() != digest else ""
        except OSError:
            now = "deleted"
        if now:
            tampering.append(f"the task's file {path} was {now} while the tests ran")
    verdict["tampering"] = tampering
    return verdict


def _run_units(units: list[str], spec: dict[str, Any], solution: Solution,
               errors: list[str]) -> int:  # fmt: skip
    namespace: dict[str, Any] = {"__name__": "tests", "__builtins__": builtins}
    namespace.update(given(spec["prompt"], spec["entry_point"]))
    wanted = (free_names(units) | {spec["entry_point"]}) - set(namespace)
    namespace.update(bind(solution, sorted(wanted)))
    sys.modules["solution"] = SolutionModule(solution)
    passed = 0
    for i, src in enumerate(units):
        if solution.ended:
            errors.append(f"{len(units) - i} more test(s) did not run: {solution.ended}")
            break
        solution.faults.clear()
        failure = ""
        try:
            exec(compile(src, "tests.py", "exec", dont_inherit=True), namespace)
        except BaseException as exc:
            failure = describe(exc)
            if isinstance(exc, AssertionError):
                failure += got(src, namespace)
        if not failure and (solution.faults or solution.ended):  # a test swallowed it
            failure = (solution.faults or [solution.ended])[0]
        if failure:
            errors.append(src.strip().splitlines()[-1][:120] + " -> " + failure)
        else:
            passed += 1
    return passed


def judge() -> None:
    """The job: read the spec {"nonce", "units", "prompt", "entry_point", "files" (path →
    sha256 of the task's files as shipped)}, write the verdict."""
    import json
    import signal

    spec = json.loads(sys.stdin.buffer.read())
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)  # the spec's memfd is released; the solution's process gets /dev/null
    verdict_fd = os.dup(1)  # not inherited by the solution's process (close-on-exec)
    os.dup2(2, 1)  # what the tests or the solution print goes to stderr
    # SIGINT (the solution's process may send it) must not raise KeyboardInterrupt in a test,
    # where a handler that catches everything would let it through as a pass.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.set_int_max_str_digits(0)
    sys.path[:] = [p for p in sys.path if p and os.path.isabs(p) and os.path.exists(p)
                   and not os.access(p, os.W_OK)]  # fmt: skip
    verdict = run_tests(spec)
    os.write(verdict_fd, ("\n" + spec["nonce"] + " " + json.dumps(verdict) + "\n").encode())


def arm_audit(given: str) -> None:
    """In the solution's process, before solution.py runs: arm the sandbox's risk audit as the
    job that started it carries it (`riskaudit.arm_inherited`), reporting on the job's pipe."""
    from importlib.machinery import SourceFileLoader, SourcelessFileLoader

    source, spec, fd = marshal.loads(binascii.a2b_base64(given))
    kind = SourcelessFileLoader if source.endswith(".pyc") else SourceFileLoader
    module = types.ModuleType(AUDIT_MODULE)
    module.__file__ = source
    kind(AUDIT_MODULE, source).exec_module(module)
    module.arm_inherited(spec, fd)


if __name__ == "__main__":
    if sys.argv[-5:-4] == ["serve"]:  # the solution's process
        os.close(int(sys.argv[-6]))  # this program's code, read
        if sys.argv[-1] != "-":
            arm_audit(sys.argv[-1])
        path = marshal.loads(binascii.a2b_base64(sys.argv[-2]))
        serve(int(sys.argv[-4]), int(sys.argv[-3]), path)
    else:
        judge()
