# Hearth's code-interpreter driver (agent/interpreter.go embeds it). One
# python3 process is one code context; the standard library only.
#
# The agent starts it with a bootstrap (-c) that reads this file from fd 3,
# compiles it as "<hearth-interpreter>" and runs it with REQ, the buffered
# fd 3, in its globals. Then, one JSON object a line:
#   fd 3 (REQ) → here: first {"nonce": "<hex>"}, then {"code": "...", "env": {...}}
#   here → fd 4:       {"type": "stdout"|"stderr", "text"}, {"type": "result", ...},
#                      {"type": "error", "name", "value", "traceback"},
#                      {"type": "number_of_executions", "execution_count"},
#                      {"type": "end", "sync": [stdout_marked, stderr_marked]}
# sys.stdout and sys.stderr are streams onto fd 4, so what Python prints keeps
# its order with the results; fds 1 and 2 are pipes the agent reads, for
# output written below Python (subprocesses, C libraries). At the end of each
# execution a marker ("\0hearth-sync:<nonce>\0") goes down fds 1 and 2 so the
# agent knows it has all of that output before it ends the execution.
#
# SIGINT interrupts the running code (KeyboardInterrupt) and nothing else:
# the context lives on. matplotlib, when the code imports it, draws with this
# driver's backend (_InlineBackend): its figures become PNG results.

import ast
import base64
import builtins
import codecs
import importlib.util
import io
import json
import linecache
import os
import signal
import sys
import threading
import traceback
import types

_DRIVER = "<hearth-interpreter>"
_MAX_TEXT = 4 << 20  # one output string; longer ones are cut
_REQ = REQ  # noqa: F821 (the bootstrap's)
_EVT = os.fdopen(4, "wb")
_lock = threading.Lock()
_executing = False

for _fd in (3, 4):
    try:
        os.set_inheritable(_fd, False)
    except OSError:
        pass


def _emit(obj):
    line = json.dumps(obj, default=str).encode("ascii") + b"\n"
    with _lock:
        try:
            _EVT.write(line)
            _EVT.flush()
        except (BrokenPipeError, ValueError):
            os._exit(0)  # the agent is gone


def _cut(s):
    if len(s) > _MAX_TEXT:
        return s[:_MAX_TEXT] + "\n[output truncated]"
    return s


class _Raw(io.RawIOBase):
    """Bytes written to sys.stdout/sys.stderr become stream events."""

    def __init__(self, name, fd):
        self._name = name
        self._fd = fd
        self._dec = codecs.getincrementaldecoder("utf-8")("replace")

    def writable(self):
        return True

    def fileno(self):
        return self._fd

    def isatty(self):
        return False

    def write(self, b):
        text = self._dec.decode(bytes(b))
        if text:
            _emit({"type": self._name, "text": _cut(text)})
        return len(b)


def _stream(name, fd):
    return io.TextIOWrapper(_Raw(name, fd), encoding="utf-8", errors="backslashreplace", line_buffering=True)


_FORMATS = (
    ("_repr_html_", "html"),
    ("_repr_markdown_", "markdown"),
    ("_repr_svg_", "svg"),
    ("_repr_png_", "png"),
    ("_repr_jpeg_", "jpeg"),
    ("_repr_pdf_", "pdf"),
    ("_repr_latex_", "latex"),
    ("_repr_json_", "json"),
    ("_repr_javascript_", "javascript"),
)


def _result(obj, main):
    """The result event of obj: repr() as text, plus its _repr_*_ formats."""
    out = {"type": "result", "is_main_result": main, "text": _cut(repr(obj))}
    for meth, key in _FORMATS:
        try:
            f = getattr(obj, meth, None)
            if not callable(f) or isinstance(obj, type):
                continue
            v = f()
            if isinstance(v, tuple):
                v = v[0]  # (data, metadata)
            if v is None:
                continue
            if isinstance(v, (bytes, bytearray)):
                v = base64.b64encode(v).decode("ascii")
            if key == "json":
                json.dumps(v)  # must be JSON
            elif not isinstance(v, str):
                v = str(v)
            out[key] = _cut(v) if isinstance(v, str) else v
        except Exception:
            continue
    return out


def display(*objs):
    """IPython's display(): each object as a result that is not the main one."""
    for obj in objs:
        _emit(_result(obj, False))


def _figures():
    """Like IPython's inline backend: every open matplotlib figure becomes a
    result with its PNG (not the main one), and is closed."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    try:
        nums = plt.get_fignums()
    except Exception:
        return
    for num in nums:
        try:
            fig = plt.figure(num)
            buf = io.BytesIO()
            fig.savefig(buf, format="png", bbox_inches="tight")
            _emit({"type": "result", "is_main_result": False, "text": _cut(repr(fig)),
                   "png": base64.b64encode(buf.getvalue()).decode("ascii")})
        except Exception:
            pass
    try:
        plt.close("all")
    except Exception:
        pass


class _InlineBackend:
    """matplotlib's "module://hearth_inline" backend (the default MPLBACKEND
    of a context): Agg's canvas, and plt.show() sends the open figures
    (_figures), as the end of every execution does."""

    name = "hearth_inline"

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname != cls.name:
            return None
        return importlib.util.spec_from_loader(fullname, cls)

    @staticmethod
    def create_module(spec):
        return None

    @staticmethod
    def exec_module(mod):
        from matplotlib.backend_bases import FigureManagerBase
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        mod.FigureCanvas = FigureCanvasAgg
        mod.FigureManager = FigureManagerBase
        mod.show = lambda *args, **kwargs: _figures()


def _error(e):
    tb = e.__traceback__
    if isinstance(e, SyntaxError):
        tb = None  # the frames are the parser's
    while tb is not None and tb.tb_frame.f_code.co_filename == _DRIVER:
        tb = tb.tb_next
    try:
        text = "".join(traceback.format_exception(type(e), e, tb))
    except Exception:
        text = ""
    try:
        value = str(e)
    except Exception:
        value = "<unprintable %s>" % type(e).__name__
    return {"type": "error", "name": type(e).__name__, "value": _cut(value), "traceback": _cut(text)}


def _sigint(signum, frame):
    if _executing:
        raise KeyboardInterrupt


def _run(req, g, n, marker):
    global _executing
    code = req.get("code") or ""
    env = req.get("env") or {}
    _emit({"type": "number_of_executions", "execution_count": n})
    saved = {k: os.environ.get(k) for k in env}
    try:
        os.environ.update(env)
        name = "<cell-%d>" % n
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        try:
            tree = ast.parse(code, name, "exec")
            last = None
            # Like IPython: a trailing expression statement is the result,
            # unless a semicolon ends the cell.
            if tree.body and isinstance(tree.body[-1], ast.Expr) and not code.rstrip().endswith(";"):
                last = ast.Expression(tree.body.pop().value)
            body = compile(tree, name, "exec")
            tail = compile(last, name, "eval") if last is not None else None
            _executing = True
            exec(body, g)
            value = eval(tail, g) if tail is not None else None
            _executing = False
            if value is not None:
                g["_"] = value
                _emit(_result(value, True))
        except BaseException as e:  # SystemExit and KeyboardInterrupt included
            _executing = False
            _emit(_error(e))
        _figures()
    except KeyboardInterrupt as e:  # between the checks above
        _executing = False
        _emit(_error(e))
    finally:
        _executing = False
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        sync = []
        for s in (sys.stdout, sys.stderr):
            try:
                s.flush()
            except Exception:
                pass
        for fd in (1, 2):
            try:
                os.write(fd, marker)
                sync.append(True)
            except OSError:
                sync.append(False)
        _emit({"type": "end", "sync": sync})


def _main():
    first = json.loads(_REQ.readline())
    marker = b"\0hearth-sync:" + first["nonce"].encode("ascii") + b"\0"
    sys.stdout = sys.__stdout__ = _stream("stdout", 1)
    sys.stderr = sys.__stderr__ = _stream("stderr", 2)
    sys.argv = [""]
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    builtins.display = display
    sys.meta_path.append(_InlineBackend)
    os.environ.setdefault("MPLBACKEND", "module://" + _InlineBackend.name)
    g = main.__dict__
    signal.signal(signal.SIGINT, _sigint)
    n = 0
    while True:
        try:
            line = _REQ.readline()
        except KeyboardInterrupt:
            continue
        if not line:
            os._exit(0)
        try:
            req = json.loads(line)
        except ValueError:
            continue
        n += 1
        _run(req, g, n, marker)


_main()
